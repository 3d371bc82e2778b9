//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// No program: this object exists for its BTF, from which bpf2go generates
// the Go types of the structs that the stack capture (include/stack.h,
// interp.h) shares with user space, once for every probe (gen.go). (The
// build constraint above keeps the go tool from taking this file for a cgo
// source.)

#include "common.h"
#include "stack.h"

const struct stack_event *unused_event __attribute__((unused));
const struct interp_new_event *unused_interp_new_event __attribute__((unused));
const struct interp_stack *unused_interp_stack __attribute__((unused));
const struct interp_proc *unused_interp_proc __attribute__((unused));
const struct unwind_stack *unused_unwind_stack __attribute__((unused));
const enum interp_status *unused_interp_status __attribute__((unused));
const enum interp_stack_flag *unused_interp_flag __attribute__((unused));
const enum stack_event_flag *unused_event_flag __attribute__((unused));
const enum stack_setup_flag *unused_setup_flag __attribute__((unused));
const enum stack_stat *unused_stack_stat __attribute__((unused));
const enum nvtx_stat *unused_nvtx_stat __attribute__((unused));
const struct nvtx_thread_key *unused_nvtx_thread_key __attribute__((unused));
const struct nvtx_thread_val *unused_nvtx_thread_val __attribute__((unused));

char LICENSE[] SEC("license") = "Dual BSD/GPL";
