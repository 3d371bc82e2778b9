package bpf

// The Go types of the structs shared by every program that includes
// include/stack.h (the CPU sampler, the GPU launch marker, the stack
// walker's hooks), generated once from stack.bpf.c's BTF and committed
// (stack_bpfel.go and .o; they hold no arch-specific field). CI
// regenerates them with Debian bookworm's clang-14 and fails on any diff:
// ./regen-check.sh. The programs' own bpf2go runs take -no-global-types,
// so that none generates a second copy.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror -Iinclude" -target bpfel -no-global-types -type stack_event -type interp_new_event -type interp_stack -type interp_frame -type interp_proc -type unwind_stack -type interp_status -type interp_stack_flag -type stack_event_flag -type stack_setup_flag -type stack_stat -type nvtx_stat -type nvtx_thread_key -type nvtx_thread_val stack stack.bpf.c
