#!/usr/bin/env bash
# device-check.sh: slurmscope's GPU metrics on a machine with a real NVIDIA GPU.
#
# Builds the agent, runs it (metrics only) for about DEVCHECK_SECONDS (60 s)
# beside a PyTorch matmul loop in a simulated SLURM job cgroup, prints the
# job's GPU series as the agent serves them, and exits non-zero if the job's
# GPU utilisation series is missing, or if the job, which no slurmd granted
# anything, is allocated the GPU its CUDA_VISIBLE_DEVICES names. Without
# python3 + torch (or CUDA) the job runs sleep: only the latter is checked.
#
# It reads NVML only: it never calls nvidia-smi and never changes GPU or MIG
# settings. Run as root from anywhere in the repository; needs no network.
#
# Environment (all optional):
#   SLURMSCOPE_AGENT        prebuilt agent binary (default: go build, GOPROXY=off)
#   DEVCHECK_SECONDS        how long the job runs while sampled (default 60)
#   DEVCHECK_GPU_INDEX      NVML index of the GPU to use (default: the first
#                           GPU with MIG off, else the first MIG instance)
#   DEVCHECK_CPU_PROFILING  passed to --cpu-profiling (default false)
#   NVML_LIBRARY            passed to --nvml-library (default: the driver's)
#
# Exit status: 0 the job's series are there; 1 they are missing; 2 the check
# could not run (no root, no cgroup v2, no driver, build failed, ...).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SECONDS_WANTED=${DEVCHECK_SECONDS:-60}
JOB_ID=$((900000 + $$ % 99999))
JOB_NAME=devcheck-matmul
SLICE=slurmscope-devcheck.slice
NODE=devcheck
GPU_INTERVAL=2s

LOG_NAME=device-check
LOG_FD=1
STOP_TENTHS=100

if ! [[ $SECONDS_WANTED =~ ^[0-9]+$ ]] || ((SECONDS_WANTED < 10)); then
	die "DEVCHECK_SECONDS must be an integer >= 10"
fi
begin_check devcheck "it creates a cgroup and moves a process into it"

# --- the agent ----------------------------------------------------------
if [[ -z ${SLURMSCOPE_AGENT:-} ]] && ! command -v go >/dev/null; then
	die "no Go toolchain: build ./agent/cmd/slurmscope-agent elsewhere and set SLURMSCOPE_AGENT"
fi
build_agent "$work/slurmscope-agent" ||
	die "go build failed (no network is used: the module cache must hold go.mod's modules; or set SLURMSCOPE_AGENT)"

# fetch: the agent's /metrics, by curl, else bash's /dev/tcp.
fetch() {
	if command -v curl >/dev/null; then
		curl -sf -m 5 "http://$addr/metrics"
	else
		local host=${addr%:*} port=${addr##*:}
		exec 3<>"/dev/tcp/$host/$port" || return 1
		printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$addr" >&3
		sed '1,/^\r$/d' <&3
		exec 3<&-
	fi
}

agent_args=(run --cpu-profiling="${DEVCHECK_CPU_PROFILING:-false}" --offcpu-profiling="${DEVCHECK_CPU_PROFILING:-false}" --gpu-interval "$GPU_INTERVAL"
	--node-name "$NODE" --metrics-addr 127.0.0.1:0 --output-dir "$work/profiles" --slurm-cgroup-v2-parent "/$SLICE")
[[ -n ${NVML_LIBRARY:-} ]] && agent_args+=(--nvml-library "$NVML_LIBRARY")
log "starting: $agent ${agent_args[*]}"
"$agent" "${agent_args[@]}" >"$work/agent.log" 2>&1 &
agent_pid=$!

addr=""
for _ in $(seq 120); do
	kill -0 "$agent_pid" 2>/dev/null || {
		cat "$work/agent.log" >&2
		die "the agent exited at start"
	}
	addr=$(sed -n 's/.*msg="serving metrics" addr=\([^ ]*\).*/\1/p' "$work/agent.log" | head -n1)
	[[ -n $addr ]] && break
	sleep 0.5
done
if [[ -z $addr ]]; then
	cat "$work/agent.log" >&2
	if grep -q 'CPU profiling off' "$work/agent.log"; then
		die "the agent did not serve /metrics with --cpu-profiling=false (it returns before starting the metrics server); retry with DEVCHECK_CPU_PROFILING=true"
	fi
	die "the agent did not serve /metrics within 60 s"
fi
log "agent pid $agent_pid serves http://$addr/metrics"

# Wait for the first GPU poll.
metrics=""
for _ in $(seq 60); do
	metrics=$(fetch || true)
	grep -q '^slurmscope_gpu_info{' <<<"$metrics" && break
	if grep -q 'no NVIDIA driver\|GPU metrics disabled' "$work/agent.log"; then
		cat "$work/agent.log" >&2
		die "the agent found no usable NVML (see its log above)"
	fi
	sleep 0.5
done
grep -q '^slurmscope_gpu_info{' <<<"$metrics" || {
	cat "$work/agent.log" >&2
	die "no slurmscope_gpu_info after 30 s"
}

# label NAME: the value of label NAME in each line of stdin.
label() { sed -n "s/.*[{,]$1=\"\\([^\"]*\\)\".*/\\1/p"; }

log "GPUs the agent sees:"
grep '^slurmscope_gpu_info{' <<<"$metrics" | sed 's/^/    /'
mig_parents=$(grep '^slurmscope_gpu_mig_info{' <<<"$metrics" | label gpu_uuid | sort -u || true)
gpu_uuid=""
gpu_index=""
alloc=""
mig_only=false
while read -r line; do
	u=$(label gpu_uuid <<<"$line")
	i=$(label gpu_index <<<"$line")
	if [[ -n ${DEVCHECK_GPU_INDEX:-} && $i != "$DEVCHECK_GPU_INDEX" ]]; then continue; fi
	if grep -qxF "$u" <<<"$mig_parents"; then
		[[ -n ${DEVCHECK_GPU_INDEX:-} ]] || continue
		mig_only=true
	fi
	gpu_uuid=$u
	gpu_index=$i
	break
done < <(grep '^slurmscope_gpu_info{' <<<"$metrics")
if [[ -z $gpu_uuid && -z ${DEVCHECK_GPU_INDEX:-} && -n $mig_parents ]]; then
	# Every GPU has MIG on: take the first instance.
	mig_only=true
	gpu_uuid=$(head -n1 <<<"$mig_parents")
fi
[[ -n $gpu_uuid ]] || die "no GPU with index ${DEVCHECK_GPU_INDEX:-?}"
if $mig_only; then
	line=$(grep '^slurmscope_gpu_mig_info{' <<<"$metrics" | grep -F "gpu_uuid=\"$gpu_uuid\"" | head -n1)
	alloc=$(label gpu_mig_uuid <<<"$line")
	gpu_index=$(label gpu_index <<<"$line")
	log "GPU $gpu_index has MIG on: the job gets MIG instance $alloc ($(label gpu_mig_profile <<<"$line"))."
	log "NVML has no per-process utilisation on MIG: the job's allocation and memory series are checked instead."
else
	alloc=$gpu_uuid
	log "the job gets GPU $gpu_index ($gpu_uuid)"
fi

# --- the simulated job ----------------------------------------------------
cg2=$(cgroup2_mount)
[[ -n $cg2 ]] || die "no cgroup2 mount (the agent attributes jobs by their cgroup v2 path)"
job_cgroup_create "$cg2/$SLICE" "$JOB_ID" || die "cannot create $cg_leaf (read-only cgroupfs? run on the host or a privileged container)"

load_secs=$((SECONDS_WANTED + 20)) # still running at the last sample
matmul='
import sys, time, torch
secs = float(sys.argv[1])
dev = torch.device("cuda:0")
a = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
b = torch.randn_like(a)
print("matmul loop on", torch.cuda.get_device_name(0), flush=True)
end, n = time.time() + secs, 0
while time.time() < end:
    c = a @ b
    n += 1
    if n % 20 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print("matmul loop: %d matmuls of 8192x8192 fp16 in %.0f s" % (n, secs), flush=True)
'
job_env=(SLURM_JOB_ID="$JOB_ID" SLURM_JOB_NAME="$JOB_NAME" CUDA_VISIBLE_DEVICES="$alloc")
mode=matmul
if ! command -v python3 >/dev/null; then
	log "python3 not found: the job only holds the GPU (idle allocation check)"
	mode=idle
elif ! env "${job_env[@]}" timeout 120 python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' >"$work/torch.log" 2>&1; then
	log "python3 has no torch with CUDA ($(tail -n1 "$work/torch.log")): the job only holds the GPU (idle allocation check)"
	mode=idle
fi
if [[ $mode == matmul ]]; then
	env "${job_env[@]}" bash -c "$enter" devcheck-load "$cg_leaf" python3 -c "$matmul" "$load_secs" >"$work/load.log" 2>&1 &
else
	env "${job_env[@]}" bash -c "$enter" devcheck-load "$cg_leaf" sleep "$load_secs" >"$work/load.log" 2>&1 &
fi
job_pid=$!
log "job $JOB_ID ($JOB_NAME, $mode): pid $job_pid in $cg_leaf, CUDA_VISIBLE_DEVICES=$alloc"

# --- sampling ---------------------------------------------------------------
jobsel="slurm_job_id=\"$JOB_ID\""
max_util=""
seen_util=false
start=$(date +%s)
next_report=0
while :; do
	now=$(date +%s)
	elapsed=$((now - start))
	((elapsed >= SECONDS_WANTED)) && break
	if ! kill -0 "$job_pid" 2>/dev/null; then
		cat "$work/load.log" >&2
		die "the job's workload exited early (its output is above)"
	fi
	metrics=$(fetch || true)
	util=$(grep '^slurmscope_job_gpu_utilization_ratio{' <<<"$metrics" | grep -F "$jobsel" | awk '{print $NF}' | head -n1 || true)
	if [[ -n $util ]]; then
		seen_util=true
		if [[ -z $max_util ]] || awk -v a="$util" -v b="$max_util" 'BEGIN { exit !(a > b) }'; then max_util=$util; fi
	fi
	if ((elapsed >= next_report)); then
		log "t=${elapsed}s job GPU utilisation: ${util:-<no series>}"
		next_report=$((next_report + 15))
	fi
	sleep 2
done

metrics=$(fetch || true)
port=${addr##*:}
echo
log "curl -s 127.0.0.1:$port/metrics | grep slurmscope_ | grep '$jobsel'"
job_lines=$(grep '^slurmscope_' <<<"$metrics" | grep -F "$jobsel" || true)
if [[ -n $job_lines ]]; then
	while IFS= read -r l; do echo "    $l"; done <<<"$job_lines"
else
	echo "    (nothing)"
fi
echo
log "the GPU's own series (gpu_uuid=\"$gpu_uuid\"):"
grep '^slurmscope_gpu_' <<<"$metrics" | grep -F "gpu_uuid=\"$gpu_uuid\"" | sed 's/^/    /' || true
grep '^slurmscope_gpu_nvml_errors_total\|^slurmscope_gpu_allocation_errors_total' <<<"$metrics" | sed 's/^/    /' || true
echo
[[ $mode == matmul ]] && sed 's/^/    load: /' "$work/load.log"

fail=0
# The simulated job has no slurmd: Slurm granted it nothing, so its
# CUDA_VISIBLE_DEVICES must not allocate it the GPU (the agent reads grants
# from slurmstepd's device cgroup or slurmctld; e2e/hostile_test.go checks
# real grants with a real slurmd). Its use of the GPU is NVML's and shows.
if grep -q "^slurmscope_job_gpu_allocated{.*$jobsel" <<<"$job_lines"; then
	log "FAIL: job $JOB_ID is allocated a GPU from its environment alone (CUDA_VISIBLE_DEVICES=$alloc)"
	fail=1
fi
grep -q '^slurmscope_gpu_allocation_errors_total{.*reason="grant_unknown".*} [1-9]' <<<"$metrics" ||
	{ log "FAIL: the job without a Slurm grant is not counted as grant_unknown" && fail=1; }
if [[ $mode == idle ]]; then
	log "idle job: no process on the GPU, so no use series to check"
elif $mig_only; then
	grep -q "^slurmscope_job_gpu_memory_used_bytes{.*$jobsel" <<<"$job_lines" ||
		{ log "FAIL: no slurmscope_job_gpu_memory_used_bytes series for job $JOB_ID on MIG instance $alloc" && fail=1; }
else
	if ! grep -q "^slurmscope_job_gpu_utilization_ratio{.*$jobsel" <<<"$job_lines"; then
		log "FAIL: no slurmscope_job_gpu_utilization_ratio series for job $JOB_ID (seen during the run: $seen_util)"
		fail=1
	fi
	if [[ $fail == 0 ]]; then
		if awk -v a="${max_util:-0}" 'BEGIN { exit !(a > 0) }'; then
			log "highest job GPU utilisation seen: $max_util"
		else
			log "WARNING: the matmul job's utilisation stayed 0. NVML reports host pids: in a container with its own pid namespace they match no process the agent sees."
		fi
	fi
fi
if ((fail)); then
	log "agent log:"
	sed 's/^/    /' "$work/agent.log"
	exit 1
fi
log "PASS ($mode)"
