package nvtx

import "github.com/cilium/ebpf"

// The uprobe object is compiled by bpf2go and committed (nvtx_*_bpfel.go
// and .o), one per target (it reads the uprobe's registers). CI
// regenerates it with Debian bookworm's clang-14 and fails on any diff:
// ./regen-check.sh. The capture's shared structs and maps come from
// ../bpf/include (nvtx.h through stack.h).

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -I../bpf/include" -target amd64,arm64 -no-global-types -type nvtx_name_event -type nvtx_probe_stat probes nvtx.bpf.c

// Spec is the probes' embedded programs and maps.
func Spec() (*ebpf.CollectionSpec, error) { return loadProbes() }
