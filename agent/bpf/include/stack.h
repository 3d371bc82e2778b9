// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// One piece of code that captures a user thread's stack for every probe
// (the CPU sampler's perf_event program, the GPU launch marker's uprobe):
// its native frames and its CPython frames. Include after common.h.
//
//	long err;
//	struct unwind_stack *st = stack_native(ctx, tgid, start_boottime_ns, &err);
//	// st->ips[0 .. st->len), innermost first; st->end: enum unwind_end.
//	// 0 with err < 0: no user stack (a kernel thread, an unreadable stack).
//	struct py_stack *py = stack_python_frames(task, pid_tgid, start_boottime_ns);
//	// 0 when Python frames are off; else py->len frames and py->status.
//
// Both return per-CPU buffers, valid until the program returns: copy or
// hash what is kept. The two buffers are distinct, and kernel stacks
// (stack_get with flags 0) share the native one, so take a kernel stack
// before the user stack or copy it first.
//
// Native frames come from agent/unwind's tables (unwind.h: .eh_frame rows,
// frame pointers for files without them) when the loader sets
// stack_tables, on x86-64; otherwise, and on other architectures, from the
// kernel's frame-pointer walk (bpf_get_stack), as before the unwinder
// (--unwind=fp). A process that has state in neither the unwinder's maps nor
// py_procs is announced on py_events (python.h), which agent/stackwalk
// reads to load the processes it profiles. Python frames (python.h) are taken when stack_python is
// set (--python-frames). The maps of both come from agent/stackwalk,
// shared by every program.

#ifndef SLURMSCOPE_STACK_H
#define SLURMSCOPE_STACK_H

#include "unwind.h"
#include "python.h"

// Set by the loader (agent/stackwalk, Walker.Constants).
volatile const __u32 stack_tables = 0; // 1: table unwinder (x86-64 only)
volatile const __u32 stack_python = 0; // 1: walk CPython frames

// Where bpf_get_stack writes: 1 KiB is too much for the 512-byte BPF
// stack. Laid out as unwind_user's result, so that callers handle one kind.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UNWIND_SLOTS); // per kind of program: unwind.h
	__type(key, __u32);
	__type(value, struct unwind_stack);
} stack_fp_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UNWIND_SLOTS);
	__type(key, __u32);
	__type(value, struct py_stack);
} stack_py_scratch SEC(".maps");

// stack_get takes a stack with bpf_get_stack (flags: 0 for the kernel
// stack, BPF_F_USER_STACK for the user one by frame pointers). Returns 0
// with *err the helper's result (0 for an empty stack) when there is none.
static __always_inline struct unwind_stack *stack_get(void *ctx, __u64 flags, long *err)
{
	__u32 slot = UNWIND_SLOT;
	struct unwind_stack *st = bpf_map_lookup_elem(&stack_fp_scratch, &slot);

	*err = -EFAULT;
	if (!st)
		return 0; // never: a one-entry array always has its entry
	long n = bpf_get_stack(ctx, st->ips, sizeof(st->ips), flags);

	if (n <= 0) {
		*err = n;
		return 0;
	}
	st->len = n / sizeof(__u64);
	// The kernel keeps the innermost frames of a deeper stack.
	st->end = st->len >= UNWIND_MAX_FRAMES ? UNWIND_END_FRAME_LIMIT : UNWIND_END_STACK;
	st->flags = 0;
	st->pad = 0;
	return st;
}

// stack_interrupted_user reports whether the perf event's registers (ctx)
// are those of user mode: a sample that interrupted user code has no kernel
// stack, and asking bpf_get_stack for it anyway is one more helper call
// (0.5-1 us each on the VM the cost figures come from).
static __always_inline int stack_interrupted_user(void *ctx)
{
#if defined(__TARGET_ARCH_x86)
	return (((struct unwind_x86_regs *)ctx)->cs & 3) == 3; // CPL 3
#elif defined(__TARGET_ARCH_arm64)
	return (((__u64 *)ctx)[33] & 0xf) == 0; // user_pt_regs.pstate: EL0t
#else
	return 0;
#endif
}

// stack_native returns the current thread's native user stack; see above.
static __always_inline struct unwind_stack *stack_native(void *ctx, __u32 tgid, __u64 start_boottime_ns, long *err)
{
#if defined(__TARGET_ARCH_x86)
	if (stack_tables) {
		struct unwind_regs regs;

		*err = -EFAULT;
		if (unwind_user_regs(ctx, &regs) != 0)
			return 0;
		struct unwind_stack *st = unwind_user(&regs, tgid, start_boottime_ns);

		// A process whose tables are not loaded (new, just exec'd, or
		// in no job) is announced, at most once a second: user space
		// loads the ones it profiles at once rather than at its next
		// scan of /proc.
		if (st && !(st->flags & UNWIND_STACK_LOADED)) {
			struct task_struct___py *task = (void *)bpf_get_current_task();
			__u64 mm = (__u64)BPF_CORE_READ(task, mm);

			if (mm) // 0: exiting
				py_announce(tgid, start_boottime_ns, mm, PY_EVENT_NATIVE);
		}
		return st;
	}
#endif
	return stack_get(ctx, BPF_F_USER_STACK, err);
}

// stack_python_frames walks the current thread's CPython frames; 0 when
// that is off. task is bpf_get_current_task().
static __always_inline struct py_stack *stack_python_frames(void *task, __u64 pid_tgid, __u64 start_boottime_ns)
{
	__u32 slot = UNWIND_SLOT;

	if (!stack_python)
		return 0;
	struct py_stack *py = bpf_map_lookup_elem(&stack_py_scratch, &slot);

	if (!py)
		return 0;
	py_walk(task, pid_tgid, start_boottime_ns, py);
	return py;
}

#endif // SLURMSCOPE_STACK_H
