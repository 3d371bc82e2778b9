// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// One piece of code that captures a user thread's stack for every probe
// (the CPU sampler's perf_event program, the GPU launch marker's uprobe):
// its native frames and its interpreter frames. Include after common.h.
//
//	long err;
//	struct unwind_stack *st = stack_native(ctx, tgid, start_boottime_ns, &err);
//	// st->ips[0 .. st->len), innermost first; st->end: enum unwind_end.
//	// 0 with err < 0: no user stack (a kernel thread, an unreadable stack).
//	struct interp_stack *in = stack_interp_frames(task, pid_tgid, start_boottime_ns);
//	// 0 when neither interpreters nor NVTX ranges are on; else in->len
//	// frames: those of in->kind (in->status), then the thread's open NVTX
//	// ranges as root frames (nvtx.h, counted in in->flags).
//	__u32 setup = stack_setup(st, in); // STACK_SETUP_*: what was loaded
//
// Both return per-CPU buffers, valid until the program returns: copy or
// hash what is kept. The two buffers are distinct, and kernel stacks
// (stack_get with flags 0) share the native one, so take a kernel stack
// before the user stack or copy it first.
//
// Native frames come from agent/unwind's tables (unwind.h: .eh_frame rows,
// frame pointers for files without them) when the loader sets
// stack_tables, on x86-64; otherwise, and on other architectures, from the
// kernel's frame-pointer walk (bpf_get_stack, --unwind=fp). Interpreter
// frames come from the walk of the process's interpreter (interpreters.h),
// chosen by its interp_procs entry. A process that has state in neither
// the unwinder's maps nor interp_procs is announced on stack_events, which
// agent/stackwalk reads to load the processes it profiles; its fork hook
// (stack_fork) gives a forked child its parent's state. Every map here is
// agent/stackwalk's, created once and shared by every program.

#ifndef SLURMSCOPE_STACK_H
#define SLURMSCOPE_STACK_H

#include "unwind.h"
#include "interp.h"
#include "interpreters.h"
#include "nvtx.h"

#ifndef BPF_MAP_TYPE_LRU_HASH
#define BPF_MAP_TYPE_LRU_HASH 9
#endif

// Set by the loader (agent/stackwalk, Walker.Prepare).
volatile const __u32 stack_tables = 0;       // 1: table unwinder (x86-64 only)
volatile const __u32 stack_interpreters = 0; // bit 1 << kind: that interpreter's walk is on
volatile const __u32 stack_fork_job_share = 0; // live forks one job group is handed, per table; 0: no bound

// How often a process that is not (yet) known is announced again.
#define STACK_ANNOUNCE_NS 1000000000ULL

// stack_event.flags: why the process was announced, or that it forked.
enum stack_event_flag {
	STACK_EVENT_NO_TABLES = 1 << 0, // the unwinder has no tables for it
	STACK_EVENT_NO_INTERP = 1 << 1, // no (current) interp_procs entry
	STACK_EVENT_FORK = 1 << 2,      // a forked child given its parent's interpreter entry
	STACK_EVENT_UNKNOWN_CODE = 1 << 3, // its loaded tables miss code it runs (mapped since its load)
};

// stack_setup's bits: what of the capture was set up for the sampled
// process. The stack tests judge the samples that have what their
// workload needs.
enum stack_setup_flag {
	STACK_SETUP_NATIVE = 1 << 0, // its tables applied (or frame pointers are the only way)
	STACK_SETUP_INTERP = 1 << 1, // an interpreter entry was found for it
};

// Sent to user space; see STACK_EVENT_*.
struct stack_event {
	__u32 tgid;
	__u32 parent_tgid; // STACK_EVENT_FORK: the parent whose entry the child has; else 0
	__u64 start_boottime;
	__u64 mm;
	__u64 parent_start_boottime;
	__u32 flags; // STACK_EVENT_*
	__u32 kind;  // STACK_EVENT_FORK: the interpreter of the entry copied
};

struct stack_seen_val {
	__u64 start_boottime;
	__u64 mm;
	__u64 next_ns;
	__u32 flags; // announced since next_ns - STACK_ANNOUNCE_NS
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} stack_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct stack_seen_val);
} stack_seen SEC(".maps");

// Counters of the capture's own hooks; read by agent/stackwalk.
enum stack_stat {
	STACK_STAT_FORK_SHARE = 0, // forks not handed their origin's state: it had STACK_FORK_SHARE live
	STACK_STAT_FORK_JOB_SHARE, // forks not handed their origin's state: its job had stack_fork_job_share live
	STACK_STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STACK_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stack_stats SEC(".maps");

static __always_inline void stack_stat(__u32 idx)
{
	stat_inc(&stack_stats, idx);
}

// The live forked descendants handed over, by job group and table
// (STACK_JOB_KEY). Least recently used groups go first: a job's count
// lost so starts again from zero.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u32);
} stack_fork_jobs SEC(".maps");

enum stack_fork_table {
	STACK_FORK_UNWIND = 0,
	STACK_FORK_INTERP = 1,
};

#define STACK_JOB_KEY(group, table) (((__u64)(table) << 32) | (group))

// stack_job_take counts one more live fork of group in table, unless the
// group has its share (counted): then it reports 0. No group, or no
// bound: always 1.
static __always_inline int stack_job_take(__u32 group, __u32 table)
{
	if (!stack_fork_job_share || !group)
		return 1;
	__u64 key = STACK_JOB_KEY(group, table);
	__u32 *n = bpf_map_lookup_elem(&stack_fork_jobs, &key);

	if (!n) {
		__u32 zero = 0;

		bpf_map_update_elem(&stack_fork_jobs, &key, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&stack_fork_jobs, &key);
		if (!n)
			return 0;
	}
	if (*n >= stack_fork_job_share) {
		stack_stat(STACK_STAT_FORK_JOB_SHARE);
		return 0;
	}
	__sync_fetch_and_add(n, 1);
	return 1;
}

// stack_job_give gives one of group's places in table back.
static __always_inline void stack_job_give(__u32 group, __u32 table)
{
	if (!stack_fork_job_share || !group)
		return;
	__u64 key = STACK_JOB_KEY(group, table);
	__u32 *n = bpf_map_lookup_elem(&stack_fork_jobs, &key);

	if (n && *n > 0)
		__sync_fetch_and_add(n, -1);
}

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
	__type(value, struct interp_stack);
} stack_interp_scratch SEC(".maps");

// stack_announce tells user space of a process it has no state for, at
// most once a second for each reason.
static __always_inline void stack_announce(__u32 tgid, __u64 start, __u64 mm, __u32 flags)
{
	struct stack_seen_val *seen = bpf_map_lookup_elem(&stack_seen, &tgid);
	__u64 now = bpf_ktime_get_ns();
	__u32 sent = 0;

	if (seen && seen->start_boottime == start && seen->mm == mm && now < seen->next_ns) {
		if ((seen->flags & flags) == flags)
			return;
		sent = seen->flags;
	}
	struct stack_seen_val val = { .start_boottime = start, .mm = mm, .next_ns = now + STACK_ANNOUNCE_NS,
				      .flags = sent | flags };

	if (sent)
		val.next_ns = seen->next_ns;
	bpf_map_update_elem(&stack_seen, &tgid, &val, 0);
	struct stack_event ev = { .tgid = tgid, .start_boottime = start, .mm = mm, .flags = flags };

	bpf_ringbuf_output(&stack_events, &ev, sizeof(ev), 0);
}

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
// from_task: ctx holds no registers (a tracepoint's arguments), take the
// ones saved at kernel entry.
static __always_inline struct unwind_stack *stack_native_regs(void *ctx, int from_task, __u32 tgid,
							      __u64 start_boottime_ns, long *err)
{
#if defined(__TARGET_ARCH_x86)
	if (stack_tables) {
		struct unwind_regs regs;

		*err = -EFAULT;
		if ((from_task ? unwind_task_regs(&regs) : unwind_user_regs(ctx, &regs)) != 0)
			return 0;
		struct unwind_stack *st = unwind_user(&regs, tgid, start_boottime_ns);

		// A process whose tables are not loaded (new, just exec'd, or
		// in no job) is announced: user space loads the ones it
		// profiles at once rather than at its next scan of /proc.
		if (st && (!(st->flags & UNWIND_STACK_LOADED) || (st->flags & UNWIND_STACK_NEW_UNKNOWN))) {
			__u64 mm = interp_task_mm((void *)bpf_get_current_task());

			if (mm) // 0: exiting
				stack_announce(tgid, start_boottime_ns, mm,
					       (st->flags & UNWIND_STACK_LOADED) ? STACK_EVENT_UNKNOWN_CODE : STACK_EVENT_NO_TABLES);
		}
		return st;
	}
#endif
	return stack_get(ctx, BPF_F_USER_STACK, err);
}

static __always_inline struct unwind_stack *stack_native(void *ctx, __u32 tgid, __u64 start_boottime_ns, long *err)
{
	return stack_native_regs(ctx, 0, tgid, start_boottime_ns, err);
}

// stack_native_task is stack_native for a program whose context holds no
// registers (tp_btf): the current task's user registers saved at kernel
// entry.
static __always_inline struct unwind_stack *stack_native_task(void *ctx, __u32 tgid, __u64 start_boottime_ns, long *err)
{
	return stack_native_regs(ctx, 1, tgid, start_boottime_ns, err);
}

// stack_interp_walk fills out with the current thread's interpreter
// frames. A process with no entry (or one left by an earlier image) costs
// one lookup, and is announced.
static __always_inline void stack_interp_walk(void *task, __u64 pid_tgid, __u64 start, __u64 mm,
					      struct interp_stack *out)
{
	__u32 tgid = pid_tgid >> 32;
	struct interp_proc *p = bpf_map_lookup_elem(&interp_procs, &tgid);

	if (!p || p->start_boottime != start || p->mm != mm || p->kind >= 32 ||
	    !(stack_interpreters & (1U << p->kind))) {
		stack_announce(tgid, start, mm, STACK_EVENT_NO_INTERP);
		return;
	}
	out->status = INTERP_STATUS_OK;
	out->kind = p->kind;
	switch (p->kind) {
#define STACK_WALK(kind, walk)                          \
	case kind:                                      \
		walk(p, task, pid_tgid, start, out);    \
		break;
		STACK_INTERPRETERS(STACK_WALK)
#undef STACK_WALK
	default:
		out->status = INTERP_STATUS_NONE;
	}
}

// stack_interp_frames walks the current thread's interpreter frames and
// appends its open NVTX ranges as root frames (nvtx.h); 0 when neither is
// on. task is bpf_get_current_task(). in->status and in->kind are the
// interpreter walk's alone: a thread with ranges and no interpreter has
// INTERP_STATUS_NONE and only root frames.
static __always_inline struct interp_stack *stack_interp_frames(void *task, __u64 pid_tgid, __u64 start)
{
	__u32 slot = UNWIND_SLOT;

	if (!stack_interpreters && !stack_nvtx)
		return 0;
	struct interp_stack *out = bpf_map_lookup_elem(&stack_interp_scratch, &slot);

	if (!out)
		return 0;
	out->len = 0;
	out->flags = 0;
	out->kind = 0;
	out->status = INTERP_STATUS_NONE;
	// No mm: the task is exiting (exit_mm ran), or a kernel thread. It is
	// not announced: its process is not another one.
	__u64 mm = interp_task_mm(task);

	if (!mm)
		return out;
	if (stack_interpreters)
		stack_interp_walk(task, pid_tgid, start, mm, out);
	if (stack_nvtx)
		nvtx_frames(pid_tgid, start, out);
	return out;
}

// stack_interp_group is the job group (interp_proc.group) of a process set
// up for an interpreter, 0 for none: what per-job shares of a probe's own
// tables are counted by.
static __always_inline __u32 stack_interp_group(__u32 tgid, __u64 start)
{
	struct interp_proc *p = bpf_map_lookup_elem(&interp_procs, &tgid);

	return p && p->start_boottime == start ? p->group : 0;
}

// stack_setup says what of the capture was set up for the sample that
// took st (0 for none) and in.
static __always_inline __u32 stack_setup(struct unwind_stack *st, struct interp_stack *in)
{
	__u32 setup = 0;

	if (!stack_tables || (st && (st->flags & UNWIND_STACK_LOADED)))
		setup |= STACK_SETUP_NATIVE;
	if (in && in->status != INTERP_STATUS_NONE)
		setup |= STACK_SETUP_INTERP;
	return setup;
}

// How many live forked descendants of one set-up process get its state at
// their fork; the rest are set up by user space when first sampled, as any
// process. It bounds what one fork storm takes of the shared tables (one
// process's share: STACK_FORK_SHARE of the 32768 entries).
#define STACK_FORK_SHARE 256

// stack_fork gives a forked child (a new thread group) its parent's state
// at once, before user space has looked at it: a fork runs the same image,
// with the same interpreter at the same addresses, and short-lived workers
// (a multiprocessing pool, a DataLoader) may not live much longer. The
// child's unwind_procs entry points at the mappings of the process that
// was loaded (unwind.h, alias_tgid), and its interp_procs entry is a copy
// of its parent's; user space is told of the latter (STACK_EVENT_FORK) so
// that it resolves the child's frames. At most STACK_FORK_SHARE live
// descendants of one set-up process are handed over (counted in its entry;
// stack_exit gives the place back). parent and child are
// sched_process_fork's tasks.
static __always_inline void stack_fork(struct task_struct *parent, struct task_struct *child)
{
	__u32 tgid = BPF_CORE_READ(child, tgid);

	// A new thread shares its process's state already.
	if ((__u32)BPF_CORE_READ(child, pid) != tgid)
		return;
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u64 pstart = BPF_CORE_READ(parent, group_leader, start_boottime);
	__u64 cstart = BPF_CORE_READ(child, start_boottime);

#if defined(__TARGET_ARCH_x86)
	if (stack_tables) {
		struct unwind_proc *up = bpf_map_lookup_elem(&unwind_procs, &ptgid);

		if (up && up->start_ticks == pstart / UNWIND_NSEC_PER_TICK) {
			// A fork of a fork names the process that was loaded.
			__u32 origin = up->alias_tgid ? up->alias_tgid : ptgid;
			struct unwind_proc *o = up->alias_tgid ? bpf_map_lookup_elem(&unwind_procs, &origin) : up;
			struct unwind_proc c = {
				.start_ticks = cstart / UNWIND_NSEC_PER_TICK,
				.alias_tgid = origin,
				.alias_start_ticks = up->alias_tgid ? up->alias_start_ticks : up->start_ticks,
			};

			if (o && o->forks < STACK_FORK_SHARE) {
				c.group = o->group;
				if (stack_job_take(c.group, STACK_FORK_UNWIND)) {
					if (bpf_map_update_elem(&unwind_procs, &tgid, &c, 0) == 0)
						__sync_fetch_and_add(&o->forks, 1);
					else
						stack_job_give(c.group, STACK_FORK_UNWIND);
				}
			} else {
				stack_stat(STACK_STAT_FORK_SHARE);
			}
		}
	}
#endif
	if (!stack_interpreters)
		return;
	struct interp_proc *p = bpf_map_lookup_elem(&interp_procs, &ptgid);

	if (!p || p->start_boottime != pstart || p->mm != interp_task_mm(parent))
		return;
	__u32 origin = p->origin ? p->origin : ptgid;
	struct interp_proc *o = p->origin ? bpf_map_lookup_elem(&interp_procs, &origin) : p;

	if (!o || o->forks >= STACK_FORK_SHARE) {
		stack_stat(STACK_STAT_FORK_SHARE);
		return;
	}
	struct interp_proc c = *p;

	c.start_boottime = cstart;
	c.mm = interp_task_mm(child);
	c.origin = origin;
	c.forks = 0;
	if (!c.mm || !stack_job_take(c.group, STACK_FORK_INTERP))
		return;
	if (bpf_map_update_elem(&interp_procs, &tgid, &c, 0)) {
		stack_job_give(c.group, STACK_FORK_INTERP);
		return;
	}
	__sync_fetch_and_add(&o->forks, 1);
	struct stack_event ev = { .tgid = tgid, .parent_tgid = ptgid, .start_boottime = cstart, .mm = c.mm,
				  .parent_start_boottime = pstart, .flags = STACK_EVENT_FORK, .kind = c.kind };

	bpf_ringbuf_output(&stack_events, &ev, sizeof(ev), 0);
}

// CO-RE view of what stack_exit reads: whether the exiting thread is its
// process's last (do_exit drops signal->live before the tracepoint).
struct stack_atomic___stack {
	int counter;
};

struct signal_struct___stack {
	struct stack_atomic___stack live;
} __attribute__((preserve_access_index));

struct task_struct___exit {
	struct signal_struct___stack *signal;
} __attribute__((preserve_access_index));

// stack_drop_fork gives a forked entry's place back to its origin, whose
// count a re-load by user space may have reset (so never below zero).
static __always_inline void stack_drop_fork(__u32 *forks)
{
	if (*forks > 0)
		__sync_fetch_and_add(forks, -1);
}

// stack_exit frees a process's entries when its last thread exits
// (sched_process_exit): forked children that never exec would otherwise
// fill the shared tables for good. User space forgets the process itself
// later, after its last samples are drained; it keeps what it needs for
// them in its own state.
static __always_inline void stack_exit(struct task_struct *task)
{
	if (BPF_CORE_READ((struct task_struct___exit *)task, signal, live.counter) != 0)
		return;
	__u32 tgid = BPF_CORE_READ(task, tgid);
	__u64 start = BPF_CORE_READ(task, group_leader, start_boottime);

#if defined(__TARGET_ARCH_x86)
	if (stack_tables) {
		struct unwind_proc *up = bpf_map_lookup_elem(&unwind_procs, &tgid);

		if (up && up->start_ticks == start / UNWIND_NSEC_PER_TICK) {
			if (up->alias_tgid) {
				__u32 origin = up->alias_tgid;
				struct unwind_proc *o = bpf_map_lookup_elem(&unwind_procs, &origin);

				if (o && o->start_ticks == up->alias_start_ticks)
					stack_drop_fork(&o->forks);
				stack_job_give(up->group, STACK_FORK_UNWIND);
			}
			bpf_map_delete_elem(&unwind_procs, &tgid);
		}
	}
#endif
	if (!stack_interpreters)
		return;
	struct interp_proc *p = bpf_map_lookup_elem(&interp_procs, &tgid);

	if (!p || p->start_boottime != start)
		return;
	if (p->origin) {
		__u32 origin = p->origin;
		struct interp_proc *o = bpf_map_lookup_elem(&interp_procs, &origin);

		if (o)
			stack_drop_fork(&o->forks);
		stack_job_give(p->group, STACK_FORK_INTERP);
	}
	bpf_map_delete_elem(&interp_procs, &tgid);
}

// stack_exec forgets the image a process ran before its exec
// (sched_process_exec): its unwind_procs entry goes (its mappings are gone,
// and its start time does not change, so the unwinder could not tell), and
// a forked entry's place goes back to its origin, in both tables: the
// process no longer runs its origin's image, and a process that spawns
// many programs (a shell loop, subprocess.run) would otherwise use up its
// share for good. The interp_procs entry stays (it names the old mm, which
// no sample matches) until user space sets the new image up.
static __always_inline void stack_exec(struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	__u64 start = BPF_CORE_READ(task, group_leader, start_boottime);

#if defined(__TARGET_ARCH_x86)
	if (stack_tables) {
		struct unwind_proc *up = bpf_map_lookup_elem(&unwind_procs, &tgid);

		if (up && up->alias_tgid && up->start_ticks == start / UNWIND_NSEC_PER_TICK) {
			__u32 origin = up->alias_tgid;
			struct unwind_proc *o = bpf_map_lookup_elem(&unwind_procs, &origin);

			if (o && o->start_ticks == up->alias_start_ticks)
				stack_drop_fork(&o->forks);
			stack_job_give(up->group, STACK_FORK_UNWIND);
		}
		bpf_map_delete_elem(&unwind_procs, &tgid);
	}
#endif
	if (!stack_interpreters)
		return;
	struct interp_proc *p = bpf_map_lookup_elem(&interp_procs, &tgid);

	if (!p || p->start_boottime != start || !p->origin)
		return;
	__u32 origin = p->origin;
	struct interp_proc *o = bpf_map_lookup_elem(&interp_procs, &origin);

	if (o)
		stack_drop_fork(&o->forks);
	stack_job_give(p->group, STACK_FORK_INTERP);
	p->origin = 0;
}

#endif // SLURMSCOPE_STACK_H
