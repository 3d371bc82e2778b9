#!/bin/sh
# build.sh OUTDIR: build the NVTX TEST STAND-INS (not NVIDIA's):
#   OUTDIR/libnvtx_standin.so    stand-in for the NVTX v3 headers' inline
#                                implementation (nvtx_standin.c)
#   OUTDIR/libnvtx_standin_b.so  the same, a second "copy of the headers"
#   OUTDIR/nvtx_driver           pretend annotated program (nvtx_driver.c)
# With frame pointers and no inlining in the driver, so run_steps >
# work_phase_a / work_phase_b stay real frames for a profiler. $CC may add flags.
set -eu
out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
inc="$here/../../../gpuinject" # nvtx_abi.h
cc=${CC:-cc}
fp="-fno-omit-frame-pointer"
if echo 'int x;' | $cc -x c -c -mno-omit-leaf-frame-pointer -o /dev/null - 2>/dev/null; then
	fp="$fp -mno-omit-leaf-frame-pointer"
fi
mkdir -p "$out"
for lib in libnvtx_standin.so libnvtx_standin_b.so; do
	$cc -std=c11 -O2 -g $fp -Wall -Wextra -shared -fPIC -fvisibility=hidden \
		-I "$inc" -I "$here" -o "$out/$lib" "$here/nvtx_standin.c" -ldl
done
$cc -std=c11 -O1 -g $fp -fno-inline -Wall -Wextra -pthread \
	-I "$inc" -I "$here" -o "$out/nvtx_driver" "$here/nvtx_driver.c" \
	-L "$out" -lnvtx_standin -ldl -Wl,-rpath,'$ORIGIN'
