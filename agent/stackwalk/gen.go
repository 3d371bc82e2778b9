package stackwalk

import "github.com/cilium/ebpf"

// The BPF object is compiled by bpf2go and committed (procs_*_bpfel.go and
// .o). CI regenerates it with Debian bookworm's clang-14 and fails on any
// diff; run ./regen-check.sh to do the same locally. One object per target
// (amd64, arm64): the unwinder's maps exist on x86-64 only so far. The maps
// and helpers shared with the probes come from ../bpf/include (stack.h).

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -I../bpf/include" -target amd64,arm64 -no-global-types procs procs.bpf.c

// Spec is the probe's embedded program and maps, for checks that span
// probes (the maps the stack walker shares).
func Spec() (*ebpf.CollectionSpec, error) { return loadProcs() }
