package offcpu

import "github.com/cilium/ebpf"

// The BPF object is compiled by bpf2go and committed (offcpu_*_bpfel.go and
// .o); CI regenerates it with Debian bookworm's clang-14 and fails on any
// diff (./regen-check.sh). One object per target: the user-stack capture
// of ../bpf/include/stack.h reads registers whose layout differs per
// architecture.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -I../bpf/include" -target amd64,arm64 -no-global-types -type count_key -type count_val -type stat_index -type offcpu_job offcpu offcpu.bpf.c

// Spec is the probe's embedded program and maps, for checks that span
// probes (the maps the stack walker shares).
func Spec() (*ebpf.CollectionSpec, error) { return loadOffcpu() }
