#!/bin/sh
# Regenerates the committed bpf2go output (needs clang-14 and llvm-strip-14,
# as in Debian bookworm) and fails if it differs from what is committed.
set -eu
cd "$(dirname "$0")"
gen="probes_x86_bpfel.go probes_x86_bpfel.o probes_arm64_bpfel.go probes_arm64_bpfel.o"
go generate ./ && git diff --exit-code -- $gen && test -z "$(git status --porcelain -- $gen)"
