#!/usr/bin/env bash
# kernel-check.sh: slurmscope's GPU kernel profiles on a machine with a real
# NVIDIA GPU, CUDA (CUDA_HOME, with CUPTI) and PyTorch. NOT RUNNABLE WITHOUT
# A GPU: it has never run on the development box, which has none (the
# stand-in version is e2e/gpu/standin-demo.sh).
#
#  1. compiles the injection library and the static ABI check
#     (gpuinject/abi_check.c against $CUDA_HOME's real cupti.h)
#     and runs the check;
#  2. times a small PyTorch training loop without the library;
#  3. runs it for about KCHECK_SECONDS (60 s) in a simulated SLURM job cgroup
#     under the library (CUDA_INJECTION64_PATH, PYTHONPERFSUPPORT=1) with the
#     agent (--gpu-inject-lib) writing to a profile directory;
#  4. prints the top kernels by GPU time with their launching Python stacks
#     (`slurmscope-agent top --dir`, over the gpu profiles only) and the
#     loop's slowdown with the library loaded;
#  5. checks that torch.profiler, run for 20 steps after the timed loop,
#     got its CUDA kernels while the library stood aside, and that the
#     loop's NVTX ranges (torch.cuda.nvtx) sit over the kernels as [nvtx]
#     frames (NVTX_INJECTION64_PATH).
#
# Run as root from anywhere in the repository; needs no network.
# Environment: CUDA_HOME (default /usr/local/cuda), KCHECK_SECONDS (60),
# SLURMSCOPE_AGENT (prebuilt agent; default go build, GOPROXY=off), PYTHON
# (default python3), KCHECK_KEEP=1 keeps the work directory.
# Exit status: 0 done; 1 no gpu profile for the job; 2 the check could not run.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SECS=${KCHECK_SECONDS:-60}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PY=${PYTHON:-python3}
JOB_ID=$((910000 + $$ % 9999))
SLICE=slurmscope-kcheck.slice
NODE=kcheck

LOG_NAME=kernel-check
LOG_FD=1
KEEP_WORK=${KCHECK_KEEP:-}
if ! [[ $SECS =~ ^[0-9]+$ ]] || ((SECS < 20)); then
	die "KCHECK_SECONDS must be an integer >= 20"
fi
begin_check kcheck "eBPF and a job cgroup"
[[ -f $CUDA_HOME/include/cupti.h || -f $CUDA_HOME/extras/CUPTI/include/cupti.h ]] || die "no cupti.h under CUDA_HOME=$CUDA_HOME"
command -v "$PY" >/dev/null || die "no $PY"
"$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' || die "$PY has no torch with CUDA"

# --- builds -------------------------------------------------------------------
build_agent "$work/slurmscope-agent" || die "go build failed"
sh gpuinject/build.sh "$work/lib" || die "building the injection library failed"
lib=$work/lib/libslurmscope_inject.so
log "ABI check against $CUDA_HOME"
cupti_inc=$CUDA_HOME/include
[[ -f $cupti_inc/cupti.h ]] || cupti_inc=$CUDA_HOME/extras/CUPTI/include
"${CC:-cc}" -std=c11 -Wall -I gpuinject -I "$CUDA_HOME/include" -I "$cupti_inc" \
	-o "$work/abi_check" gpuinject/abi_check.c || die "abi_check.c does not compile against $cupti_inc/cupti.h"
"$work/abi_check" || die "abi_check failed: cupti_abi.h does not match this CUDA's cupti.h"

# --- the training loop ----------------------------------------------------------
cat >"$work/train.py" <<'PY'
import os, sys, time, torch
secs = float(sys.argv[1])
dev = torch.device("cuda:0")
model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(256, 2048, device=dev)

def forward():
    return model(x).square().mean()

def backward(loss):
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()

nvtx = torch.cuda.nvtx

def train_step():
    # NVTX ranges, as frameworks mark their steps: with
    # NVTX_INJECTION64_PATH they become [nvtx] frames in the profiles.
    nvtx.range_push("step")
    nvtx.range_push("forward")
    loss = forward()
    nvtx.range_pop()
    nvtx.range_push("backward")
    backward(loss)
    nvtx.range_pop()
    nvtx.range_pop()

for _ in range(20):
    train_step()
torch.cuda.synchronize()
end, n, t0 = time.time() + secs, 0, time.time()
while time.time() < end:
    train_step()
    n += 1
torch.cuda.synchronize()
print("steps_per_second=%.2f steps=%d" % (n / (time.time() - t0), n), flush=True)

# The user's own profiler after the timed loop: it must get its CUDA
# kernels while the injection library steps aside.
prof_steps = int(os.environ.get("KCHECK_PROFILE_STEPS", "0"))
if prof_steps > 0:
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(prof_steps):
            train_step()
        torch.cuda.synchronize()
    kernels = sum(e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA)
    print("user_profiler_cuda_kernels=%d" % kernels, flush=True)
    for _ in range(prof_steps):
        train_step()
    torch.cuda.synchronize()
PY
rate() { sed -n 's/^steps_per_second=\([0-9.]*\).*/\1/p' "$1"; }

base_secs=$((SECS / 3))
log "baseline: ${base_secs}s without the injection library"
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} "$PY" "$work/train.py" "$base_secs" >"$work/base.log" 2>&1 ||
	{ cat "$work/base.log" >&2; die "the training loop failed"; }
base=$(rate "$work/base.log")

out=$work/profiles
"$agent" run --output-dir "$out" --upload-interval 10s --node-name "$NODE" --gpu-inject-lib "$lib" \
	--slurm-cgroup-v2-parent "/$SLICE" --metrics-addr 127.0.0.1:0 >"$work/agent.log" 2>&1 &
agent_pid=$!
wait_profiling "$work/agent.log"

cg2=$(cgroup2_mount)
[[ -n $cg2 ]] || die "no cgroup2 mount"
job_cgroup_create "$cg2/$SLICE" "$JOB_ID" || die "cannot create $cg_leaf"
log "traced run: ${SECS}s in job $JOB_ID under $lib"
env SLURM_JOB_ID="$JOB_ID" SLURM_JOB_NAME=kcheck-train CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" \
	CUDA_INJECTION64_PATH="$lib" NVTX_INJECTION64_PATH="$lib" PYTHONPERFSUPPORT=1 KCHECK_PROFILE_STEPS=20 \
	bash -c "$enter" kcheck-job "$cg_leaf" "$PY" "$work/train.py" "$SECS" >"$work/traced.log" 2>&1 &
job_pid=$!
wait "$job_pid" || { cat "$work/traced.log" >&2; die "the traced training loop failed"; }
job_pid=""
traced=$(rate "$work/traced.log")
grep 'slurmscope-inject:' "$work/traced.log" || true
sleep 12 # one more interval
stop_pid "$agent_pid"
agent_pid=""

# top reads every profile type in a directory: give it the gpu ones only.
mkdir -p "$work/gpu/$JOB_ID"
n=0
for f in "$out/$JOB_ID"/gpu-*.pb.gz; do
	[[ -e $f ]] || continue
	cp "$f" "$work/gpu/$JOB_ID/" && n=$((n + 1))
done
echo
if ((n == 0)); then
	log "FAIL: no gpu profiles for job $JOB_ID under $out"
	sed 's/^/    agent: /' "$work/agent.log"
	exit 1
fi
log "top kernels by GPU time, with their launching stacks ($n profiles):"
"$agent" top --type gpu --dir "$work/gpu" | sed 's/^/    /'
# The user's torch.profiler got its kernels while the library stood aside,
# and the time aside is in the gpu profile's untraced type.
user=$(sed -n 's/^user_profiler_cuda_kernels=\([0-9]*\)$/\1/p' "$work/traced.log")
if [[ -z $user || $user == 0 ]]; then
	log "FAIL: torch.profiler recorded no CUDA kernel beside the injection library"
	exit 1
fi
log "torch.profiler recorded $user CUDA kernels beside the library"
if command -v go >/dev/null; then
	go tool pprof -top -sample_index=untraced "$work/gpu/$JOB_ID"/gpu-*.pb.gz 2>/dev/null | head -n 8 | sed 's/^/    untraced: /'
fi
# NVTX ranges at the root of the kernels' stacks: [nvtx] step, forward, backward.
if ! "$agent" top --type gpu --dir "$work/gpu" --cum | grep -q '\[nvtx\] step'; then
	log "FAIL: no [nvtx] step frame over the GPU kernels"
	exit 1
fi
# top lists leaves (the kernels); the launching stacks, heaviest first:
if command -v go >/dev/null; then
	go tool pprof -traces -sample_index=gpu_time "$work/gpu/$JOB_ID"/gpu-*.pb.gz 2>/dev/null | head -n 120 | sed 's/^/    /'
fi
echo
log "steps/s without the library: $base; with it (and the agent): $traced"
awk -v a="$base" -v b="$traced" 'BEGIN { if (a > 0 && b > 0) printf "kernel-check: slowdown %.2f%%\n", (a / b - 1) * 100 }'
log "done"
