#!/bin/sh
# Regenerates the committed bpf2go output (needs clang-14 and llvm-strip-14,
# as in Debian bookworm) and fails if it differs from what is committed.
set -eu
cd "$(dirname "$0")" && go generate ./ && git diff --exit-code -- walktest_bpfel.go walktest_bpfel.o && test -z "$(git status --porcelain -- walktest_bpfel.go walktest_bpfel.o)"
