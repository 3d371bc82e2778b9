#!/bin/sh
# build.sh OUTDIR: build the slurmscope CUDA injection library as
# OUTDIR/libslurmscope_inject.so with the system C compiler ($CC, default cc).
# It needs no CUDA headers or libraries: CUPTI is dlopened at run time and
# its ABI subset is declared in cupti_abi.h.
set -eu
out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# -fvisibility=hidden: only InitializeInjection, the three markers and
# slurmscope_inject_abi_version are exported (they say so explicitly).
# -fno-omit-frame-pointer: the agent unwinds through this library from the
# launch marker by frame pointers where it has no unwind tables
# (--unwind=fp, or before a process's tables are loaded).
${CC:-cc} -std=c11 -O2 -g -Wall -Wextra -Werror=implicit-function-declaration \
	-shared -fPIC -fvisibility=hidden -fno-omit-frame-pointer -pthread \
	-I "$here" -o "$out/libslurmscope_inject.so" "$here/inject.c" "$here/nvtx.c" -ldl
