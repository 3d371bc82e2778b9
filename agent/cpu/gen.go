package cpu

// The BPF object is compiled by bpf2go and committed (sampler_bpfel.go,
// sampler_bpfel.o). CI regenerates it with Debian bookworm's clang-14 and
// fails on any diff; run ./regen-check.sh to do the same locally.
//
// One little-endian target covers every architecture we ship (amd64, arm64):
// the program reads no pt_regs, so it needs no __TARGET_ARCH_*.
// bpf2go already maps the source directory out of the debug info and drops
// the compiler identification, which keeps the object byte-for-byte
// reproducible; -Werror keeps warnings from creeping into a committed binary.
// The types, constants and probe code shared with agent/gputrace come from
// ../bpf/include (agent/bpf), which CI's regeneration covers too.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -I../bpf/include" -target bpfel -type count_key -type count_val -type stat_index sampler sampler.bpf.c
