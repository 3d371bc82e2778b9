package python

// The Go types of python.h's structs (struct py_proc, the kind), generated
// from types.bpf.c's BTF and committed (types_bpfel.go and .o); CI
// regenerates them with clang-14 and fails on any diff: ./regen-check.sh.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -I../bpf/include" -target bpfel -no-global-types -output-stem types -type py_proc -type py_kind -type py_proc_flag -type py_frame_buf types types.bpf.c
