#!/usr/bin/env bash
# Installs what slurmscope's demo and tests need on a Debian/Ubuntu machine
# (as root): a real SLURM (slurmctld, slurmd, munge), Prometheus, and the
# pinned clang that regenerates the committed eBPF object. Go comes from the
# machine (go.mod names the version).
set -euo pipefail

PKGS=(slurm-wlm munge prometheus clang-14 llvm-14 libbpf-dev gcc g++ make procps util-linux curl)

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
