#!/usr/bin/env bash
# standin-demo.sh OUTDIR: the agent's GPU kernel profiles, end to end, on a
# machine WITHOUT a GPU. Builds the agent, the injection library and the
# TEST STAND-INS (mock libcupti, pretend CUDA runtime, pretend trainer; see
# internal/testenv/cudastandin), runs the trainer for about DEMO_SECONDS (20 s)
# in a simulated SLURM job cgroup under the injection library, with the
# agent in --output-dir OUTDIR mode, stops the agent, and leaves the job's
# gpu profiles in OUTDIR/<job id>/gpu-<unix>.pb.gz. Then prints the mock's
# true GPU time per kernel, one `kernel=<name> ns=<n>` line each, to compare
# with e.g. `go tool pprof -top -sample_index=gpu_time OUTDIR/<job id>/gpu-*`.
#
# Run as root (eBPF, cgroups) from anywhere in the repository.
# Environment: DEMO_JOB_ID (default 88001), DEMO_SECONDS (default 20),
# SLURMSCOPE_AGENT (a prebuilt agent; default go build, GOPROXY=off).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

out=${1:?usage: standin-demo.sh OUTDIR}
JOB_ID=${DEMO_JOB_ID:-88001}
SECS=${DEMO_SECONDS:-20}
SLICE=slurmscope-gpudemo.slice
NODE=gpudemo

LOG_NAME=standin-demo
LOG_FD=2
[[ $JOB_ID =~ ^[0-9]+$ ]] || die "DEMO_JOB_ID must be a number"
[[ $SECS =~ ^[0-9]+$ ]] || die "DEMO_SECONDS must be a number"
begin_check gpudemo "it loads eBPF programs and creates a cgroup"
mkdir -p "$out"
out=$(cd "$out" && pwd)

# --- builds ----------------------------------------------------------------
build_agent "$work/slurmscope-agent" || die "go build failed"
bin=$work/bin
sh gpuinject/build.sh "$bin" || die "building the injection library failed"
sh internal/testenv/cudastandin/build.sh "$bin" || die "building the stand-ins failed"
lib=$bin/libslurmscope_inject.so

# --- the agent ----------------------------------------------------------------
"$agent" run --output-dir "$out" --upload-interval 5s --node-name "$NODE" --gpu-inject-lib "$lib" \
	--slurm-cgroup-v2-parent "/$SLICE" --gpu-metrics=false --metrics-addr 127.0.0.1:0 >"$work/agent.log" 2>&1 &
agent_pid=$!
wait_profiling "$work/agent.log"
log "agent pid $agent_pid writes to $out"

# --- the simulated job ----------------------------------------------------------
cg2=$(cgroup2_mount)
[[ -n $cg2 ]] || die "no cgroup2 mount"
job_cgroup_create "$cg2/$SLICE" "$JOB_ID" || die "cannot create $cg_leaf"
truth=$work/truth
env SLURM_JOB_ID="$JOB_ID" SLURM_JOB_NAME=standin-trainer CUDA_VISIBLE_DEVICES=0 \
	CUDA_INJECTION64_PATH="$lib" SLURMSCOPE_CUPTI_PATH="$bin/mock/libcupti.so" SLURMSCOPE_MOCK_TRUTH_FILE="$truth" \
	bash -c "$enter" standin-job "$cg_leaf" "$bin/trainer" --seconds "$SECS" --steps 100000000 >"$work/job.log" 2>&1 &
job_pid=$!
log "job $JOB_ID: trainer pid $job_pid in $cg_leaf for ${SECS}s"
# The trainer launches flat out; run it in 20 ms bursts so the launches
# spread over the run (its --seconds counts the pauses too).
while kill -0 "$job_pid" 2>/dev/null; do
	sleep 0.02
	kill -STOP "$job_pid" 2>/dev/null || true
	sleep 0.4
	kill -CONT "$job_pid" 2>/dev/null || true
done
wait "$job_pid" || {
	cat "$work/job.log" >&2
	die "the trainer failed"
}
job_pid=""
sleep 6 # one more interval: the records flushed at exit
stop_pid "$agent_pid"
agent_pid=""
[[ -s $truth ]] || die "the mock wrote no truth file"
log "profiles: $(find "$out/$JOB_ID" -name 'gpu-*.pb.gz' 2>/dev/null | wc -l) gpu files in $out/$JOB_ID/"
sed -n 's/^\(kernel=.*\) ns=\([0-9]*\) launches=[0-9]*$/\1 ns=\2/p' "$truth"
