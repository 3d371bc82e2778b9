#!/usr/bin/env bash
# Runs slurmscope's whole test suite: unit tests (no root), then the
# integration tier as root: real eBPF, a real SLURM (slurmctld + two slurmd,
# cgroup v1 and v2), a real Prometheus. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
# go-nvml's cgo preamble warns about every deprecated NVML call; not ours.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
[[ $(id -u) == 0 ]] || { echo "test.sh: the integration tier needs root" >&2; exit 1; }

step() { printf '\n=== %s\n' "$*"; }

step "generated eBPF objects are reproducible (clang-14)"
agent/cpu/regen-check.sh
agent/gputrace/regen-check.sh

step "go vet"
go vet ./...

# One pass: unit tests need nothing; integration tests run because
# SLURMSCOPE_INTEGRATION=1 turns a missing prerequisite into a failure
# rather than a skip. Test clusters take a host-wide lock, so packages
# still run in parallel.
step "unit and integration tests"
SLURMSCOPE_INTEGRATION=1 go test -count=1 -timeout 25m ./...
