//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Process lifecycle hooks of the user-stack capture (../bpf/include/stack.h),
// on the scheduler's tracepoints (kprobes are not needed):
//
//   - sched_process_fork: a forked child runs its parent's image, so it gets
//     the parent's unwinder and interpreter state at once (stack_fork),
//     before user space has looked at it.
//   - sched_process_exit: the process's last thread exits, and its entries
//     go (stack_exit), so that forks that never exec do not fill the
//     shared tables.
//   - sched_process_exec: the process's mappings are gone, and its
//     unwind_procs entry with them, and a forked process gives its place
//     back to its origin (stack_exec); its next sample announces it, and
//     user space loads the new image.
//
// The maps are agent/stackwalk's, shared with the probes. (The build
// constraint above keeps the go tool from taking this file for a cgo
// source; bpf2go compiles it.) Dual licensed, like the probes.

#include "common.h"
#include "stack.h"

// include/uapi/linux/bpf.h: the context of a raw tracepoint program.
struct bpf_raw_tracepoint_args {
	__u64 args[0];
};

// TP_PROTO(struct task_struct *parent, struct task_struct *child)
SEC("raw_tp/sched_process_fork")
int on_fork(struct bpf_raw_tracepoint_args *ctx)
{
	stack_fork((struct task_struct *)ctx->args[0], (struct task_struct *)ctx->args[1]);
	return 0;
}

// TP_PROTO(struct task_struct *p)
SEC("raw_tp/sched_process_exit")
int on_exit(struct bpf_raw_tracepoint_args *ctx)
{
	stack_exit((struct task_struct *)ctx->args[0]);
	return 0;
}

// TP_PROTO(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
SEC("raw_tp/sched_process_exec")
int on_exec(struct bpf_raw_tracepoint_args *ctx)
{
	stack_exec((struct task_struct *)ctx->args[0]);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
