#!/usr/bin/env bash
# The slurmscope demo: a local SLURM node (slurmctld + slurmd), a few real
# jobs, the real agent profiling them with eBPF, and per-job results printed.
# Needs root; no external server. Flags go to the demo, see --help.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
exec go run ./tools/demo "$@"
