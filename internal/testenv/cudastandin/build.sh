#!/bin/sh
# build.sh OUTDIR: build the TEST STAND-INS for the injection library:
#   OUTDIR/mock/libcupti.so           mock CUPTI (mock_cupti.c), not NVIDIA's
#   OUTDIR/mock-noperiod/libcupti.so  the same without cuptiActivityFlushPeriod
#   OUTDIR/libcudart_standin.so       pretend CUDA runtime (cudart_standin.c)
#   OUTDIR/libkineto_standin.so       pretend user CUPTI profiler (kineto_standin.c),
#                                     linked to OUTDIR/mock/libcupti.so like Kineto to libcupti
#   OUTDIR/trainer                    pretend training program (trainer.c)
# The mocks live in their own directories so that nothing finds them by
# accident.
#
# Everything keeps frame pointers (-fno-omit-frame-pointer, and
# -mno-omit-leaf-frame-pointer where the compiler has it): the tests' probe
# has no unwind tables and unwinds with frame pointers only, and the stack
# of a launch runs through the trainer, the stand-in runtime and the mock
# CUPTI. $CC may add flags.
set -eu
out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
inc="$here/../../../gpuinject" # cupti_abi.h
cc=${CC:-cc}
fp="-fno-omit-frame-pointer"
if echo 'int x;' | $cc -x c -c -mno-omit-leaf-frame-pointer -o /dev/null - 2>/dev/null; then
	fp="$fp -mno-omit-leaf-frame-pointer"
fi
mkdir -p "$out/mock" "$out/mock-noperiod"
$cc -std=c11 -O2 -g $fp -Wall -Wextra -shared -fPIC -fvisibility=hidden -pthread \
	-I "$inc" -o "$out/mock/libcupti.so" "$here/mock_cupti.c"
$cc -std=c11 -O2 -g $fp -Wall -Wextra -shared -fPIC -fvisibility=hidden -pthread \
	-DSLURMSCOPE_MOCK_NO_FLUSH_PERIOD -I "$inc" -o "$out/mock-noperiod/libcupti.so" "$here/mock_cupti.c"
$cc -std=c11 -O2 -g $fp -Wall -Wextra -shared -fPIC -fvisibility=hidden -pthread \
	-I "$inc" -o "$out/libcudart_standin.so" "$here/cudart_standin.c" -ldl
# DT_NEEDED libcupti.so (the mock) found through DT_RUNPATH; -z now with
# relro: a full-RELRO GOT, bound at load, as hardened builds have.
$cc -std=c11 -O2 -g $fp -Wall -Wextra -shared -fPIC -fvisibility=hidden -pthread \
	-I "$inc" -o "$out/libkineto_standin.so" "$here/kineto_standin.c" \
	-L "$out/mock" -lcupti -Wl,-rpath,'$ORIGIN/mock' -Wl,-z,relro -Wl,-z,now
# No inlining keeps train_step/forward/launch_gemm as real frames for
# stack-attribution tests.
$cc -std=c11 -O1 -g $fp -fno-inline -Wall -Wextra \
	-I "$here" -o "$out/trainer" "$here/trainer.c" \
	-L "$out" -lcudart_standin -Wl,-rpath,'$ORIGIN' -ldl
