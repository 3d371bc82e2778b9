#!/bin/sh
# build.sh OUTDIR: build the NVML test stand-in as OUTDIR/libnvidia-ml.so.1.
# It compiles against the nvml.h that the go-nvml module in go.mod ships, so
# the stand-in's ABI is exactly the one the collector is built for.
set -eu
out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
inc=$(cd "$here" && go list -m -f '{{.Dir}}' github.com/NVIDIA/go-nvml)/pkg/nvml
mkdir -p "$out"
${CC:-cc} -std=c11 -O2 -g -Wall -Wextra -shared -fPIC -fvisibility=hidden \
	-I "$inc" -o "$out/libnvidia-ml.so.1" "$here/nvmlstub.c" -lpthread -lm
