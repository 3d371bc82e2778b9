// Package unwindtest is the BPF test probe of agent/unwind: programs that
// unwind a target process's stack with unwind.h (perf_event and uprobe)
// or take it by frame pointers (bpf_get_stack), and send each stack to a
// ring buffer; and the replay probe (Replay), which runs one walk of
// unwind.h from given registers over the calling process's memory. Only
// tests and benchmarks use it.
package unwindtest

// The BPF objects are compiled by bpf2go and committed (probe_x86_bpfel.go
// and .o, replay_x86_bpfel.go and .o). CI regenerates them with Debian
// bookworm's clang-14 and fails on any diff; run ./regen-check.sh to do
// the same locally. One target: the unwinder reads x86-64 registers
// (arm64 is not built yet).

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -I../../bpf/include" -target amd64 -type sample -type unwind_stat -type unwind_end -type unwind_kind -type unwind_mapping_key -type unwind_mapping -type unwind_proc -type unwind_table_header -type unwind_row probe probe.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -I../../bpf/include" -target amd64 -type unwind_stack replay replay.bpf.c
