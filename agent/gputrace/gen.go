package gputrace

import "github.com/cilium/ebpf"

// The BPF object is compiled by bpf2go and committed (markers_*_bpfel.go and
// .o). CI regenerates it with Debian bookworm's clang-14 and fails on any
// diff; run ./regen-check.sh to do the same locally.
//
// Unlike agent/cpu, the program reads function arguments from the uprobe's
// registers, whose layout differs per architecture, so there is one object per
// target (bpf2go defines __TARGET_ARCH_x86 / __TARGET_ARCH_arm64 and adds the
// build constraints). bpf2go maps the source directory out of the debug info
// and drops the compiler identification, so the objects are byte-for-byte
// reproducible; -Werror keeps warnings out of a committed binary. The types,
// constants, registers and probe code shared with agent/cpu come from
// ../bpf/include (agent/bpf).

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -I../bpf/include" -target amd64,arm64 -no-global-types -type event_header -type launch_event -type records_event -type name_event -type state_event -type kernel_record -type event_kind -type stat_index markers markers.bpf.c

// Spec is the probe's embedded program and maps, for checks that span
// probes (the maps the stack walker shares).
func Spec() (*ebpf.CollectionSpec, error) { return loadMarkers() }
