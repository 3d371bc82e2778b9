package cpu

import "github.com/cilium/ebpf"

// The BPF object is compiled by bpf2go and committed (sampler_*_bpfel.go and
// .o). CI regenerates it with Debian bookworm's clang-14 and
// fails on any diff; run ./regen-check.sh to do the same locally.
//
// One object per target (amd64, arm64): the user-stack unwinder of
// ../bpf/include/stack.h reads the sampled registers, whose layout differs
// per architecture (and unwinds from tables on x86-64 only so far).
// bpf2go already maps the source directory out of the debug info and drops
// the compiler identification, which keeps the object byte-for-byte
// reproducible; -Werror keeps warnings from creeping into a committed binary.
// The types, constants and probe code shared with agent/gputrace come from
// ../bpf/include (agent/bpf), which CI's regeneration covers too.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -I../bpf/include" -target amd64,arm64 -no-global-types -type count_key -type count_val -type stat_index sampler sampler.bpf.c

// Spec is the probe's embedded program and maps, for checks that span
// probes (the maps the stack walker shares).
func Spec() (*ebpf.CollectionSpec, error) { return loadSampler() }
