package walktest

// The BPF object is compiled by bpf2go and committed (walktest_bpfel.go,
// walktest_bpfel.o), as in agent/cpu: one little-endian object for amd64 and
// arm64 (the walk reads no pt_regs; the thread pointer's field is picked by
// CO-RE). ./regen-check.sh regenerates it and fails on any diff.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target bpfel -type sample -type py_proc -type py_stack -type py_frame walktest walktest.bpf.c
