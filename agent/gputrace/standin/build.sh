#!/bin/sh
# build.sh OUTDIR: build the TEST STAND-INS for the injection library:
#   OUTDIR/mock/libcupti.so      mock CUPTI (mock_cupti.c), not NVIDIA's
#   OUTDIR/libcudart_standin.so  pretend CUDA runtime (cudart_standin.c)
#   OUTDIR/trainer               pretend training program (trainer.c)
# The mock lives in its own directory so that nothing finds it by accident.
set -eu
out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
inc="$here/../inject"
cc=${CC:-cc}
mkdir -p "$out/mock"
$cc -std=c11 -O2 -g -Wall -Wextra -shared -fPIC -fvisibility=hidden -pthread \
	-I "$inc" -o "$out/mock/libcupti.so" "$here/mock_cupti.c"
$cc -std=c11 -O2 -g -Wall -Wextra -shared -fPIC -fvisibility=hidden -pthread \
	-I "$inc" -o "$out/libcudart_standin.so" "$here/cudart_standin.c" -ldl
# Frame pointers and no inlining keep train_step/forward/launch_gemm as real
# frames for stack-attribution tests.
$cc -std=c11 -O1 -g -fno-omit-frame-pointer -fno-inline -Wall -Wextra \
	-I "$here" -o "$out/trainer" "$here/trainer.c" \
	-L "$out" -lcudart_standin -Wl,-rpath,'$ORIGIN'
