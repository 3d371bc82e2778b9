#!/usr/bin/env bash
# Installs what slurmscope's demo and tests need on a Debian/Ubuntu machine
# (as root): a real SLURM (slurmctld, slurmd, munge), Prometheus, and the
# pinned clang that regenerates the committed eBPF object, and Chromium for
# the front end's browser test. Go and Node.js come from the machine (go.mod
# and package.json name the versions).
set -euo pipefail

# linux-perf: agent/unwind compares its stacks with perf record --call-graph dwarf;
# gdb: agent/unwind/replay records snapshots under it (its live test too).
PKGS=(slurm-wlm munge prometheus clang-14 llvm-14 libbpf-dev gcc g++ make procps util-linux curl linux-perf gdb)
# The CPython frame tests: Debian's own interpreter (static, stripped, no
# frame pointers) and its venv module; the arm64 C library headers hold the
# offset table to CPython's headers for arm64 too.
PKGS+=(python3.11 python3.11-venv libc6-dev-arm64-cross)
# The package test reads the .rpm back with rpm and checks the installed unit
# with systemd-analyze.
PKGS+=(rpm systemd)
# The test suite also builds and drives the front end; the demo does not.
if [[ ${SLURMSCOPE_DEPS_FRONTEND:-} == 1 ]]; then
	PKGS+=(chromium)
fi

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
	for d in /usr/local/go/bin /usr/lib/go/bin; do
		[[ -x $d/go ]] && export PATH="$d:$PATH"
	done
fi
command -v go >/dev/null || { echo "deps: Go is not installed (see go.mod for the version)" >&2; exit 1; }

if [[ ${SLURMSCOPE_DEPS_FRONTEND:-} == 1 ]]; then
	command -v node >/dev/null && command -v npm >/dev/null || { echo "deps: Node.js and npm are not installed (package.json names the version)" >&2; exit 1; }
fi
