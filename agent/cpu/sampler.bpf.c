//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// CPU stack sampler for slurmscope. (The build constraint above keeps the go
// tool from taking this file for a cgo source; bpf2go compiles it.)
//
// This file is dual licensed, unlike the rest of the project (Apache-2.0): the
// kernel only lets GPL-compatible programs call bpf_get_stack and
// bpf_probe_read_kernel, and it checks the license string at load time.
//
// The program runs on a software cpu-clock perf event on every CPU. Each
// sample adds one to a count keyed by (tgid, what of the capture was set up
// for the process, the process's start time, kernel stack hash, user stack
// hash, interpreter stack hash). User stacks come from stack.h: the table
// unwinder (or frame pointers) and the process's interpreter walk. Two
// generations of (counts, stacks) maps exist; user space flips gen_switch to
// the other generation before it drains one, see sampler.go for why that is
// race free.
//
// Stacks are content addressed: the program hashes the frames itself and
// stores them in a plain hash map keyed by that hash. The kernel's
// STACK_TRACE map is not used because it keeps one stack per bucket of
// jhash(frames) & (size - 1) and fails (-EEXIST) for any other stack that
// lands in a taken bucket: a hot stack that collided lost every one of its
// samples for the whole generation, at any map size.

// Types, UAPI constants, the CO-RE task_struct view and the user-stack
// capture shared with agent/gputrace (stack.h: the table unwinder and the
// interpreter walks): ../bpf/include.
#include "common.h"
#include "stack.h"
#include "stackstore.h"
#include "generations.h"

// The key and value layouts are mirrored in Go (bpf2go generates
// samplerCountKey and samplerCountVal); keep padding explicit so that the
// verifier never sees uninitialised key bytes.
struct count_key {
	__u32 tgid;
	__u32 setup;             // STACK_SETUP_* (stack.h): what was loaded for the process
	__u64 start_boottime_ns; // thread-group leader's start time
	__u64 kernel_stack;      // key into stacks_N; 0: no kernel stack (see stats)
	__u64 user_stack;        // key into stacks_N; 0: no user stack (kernel thread or loss)
	__u64 interp_stack;      // key into interp_stacks_N; 0: no interpreter frames
};

struct count_val {
	__u64 count;
	char comm[TASK_COMM_LEN]; // thread-group leader's comm at first sample
};

// Indexes into the per-CPU stats array; mirrored in Go (stat* constants).
enum stat_index {
	STAT_SAMPLES = 0,      // samples counted into a counts map
	STAT_LOST_MAP_FULL,    // samples dropped: counts map update failed
	STAT_KSTACK_MAP_FULL,  // kernel stack not stored: stacks map full
	STAT_KSTACK_ERROR,     // any other kernel stack error except -EFAULT (see below)
	STAT_USTACK_MAP_FULL,  // user stack not stored: stacks map full
	STAT_USTACK_ERROR,     // any other user stack error (-EFAULT: not readable)
	STAT_SKIPPED_SELF,     // samples of the excluded pid
	STAT_INTERP_MAP_FULL,  // interpreter frames not stored: interp_stacks map full
	STAT_INTERP_NEW_LOST,  // a new interpreter stack not announced: ring buffer full
	STAT_INTERP_SHARE,     // interpreter frames not stored: their job had its share of interp_stacks
	// STAT_INTERP_STATUS + enum interp_status: interpreter walks by outcome.
	STAT_INTERP_STATUS,
	STAT_MAX = STAT_INTERP_STATUS + INTERP_STATUS_MAX,
};

// Sizes are placeholders; the loader sets max_entries from Options.
struct counts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct count_key);
	__type(value, struct count_val);
};

// Kernel and user stacks share one map per generation, keyed by stack_hash;
// their hashes are domain separated, so the two never share a key. A value
// is the capture as it was (struct unwind_stack, stack.h): ips[0 .. len)
// innermost first (what lies beyond len is stale), and why the walk ended.
// Preallocated (the default), so that an insert from the interrupt the
// program runs in never allocates; it fails (-E2BIG) when the map is full.
struct stacks_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct unwind_stack);
};

// The interpreter frames of samples (struct interp_stack, interp.h),
// content addressed like the native stacks, with the process in the hash:
// user space resolves them against that process's memory.
struct interp_stacks_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct interp_stack);
};

struct counts_map counts_0 SEC(".maps");
struct counts_map counts_1 SEC(".maps");
struct stacks_map stacks_0 SEC(".maps");
struct stacks_map stacks_1 SEC(".maps");
struct interp_stacks_map interp_stacks_0 SEC(".maps");
struct interp_stacks_map interp_stacks_1 SEC(".maps");

// How many interpreter stacks each job group (stack.h,
// stack_interp_group) has stored in the generation: one job with many
// distinct stacks fills only its share (interp_share) of interp_stacks,
// not every job's room.
struct interp_quota_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
};

struct interp_quota_map interp_quota_0 SEC(".maps");
struct interp_quota_map interp_quota_1 SEC(".maps");

// Set by the loader: a job group's share of interp_stacks; 0: none.
volatile const __u32 interp_share = 0;

// Counters are per generation too, so that a drain reports exactly what
// happened to the samples it returns.
struct stats_map {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, enum stat_index); // also puts the enum into BTF for bpf2go
	__type(value, __u64);
};

struct stats_map stats_0 SEC(".maps");
struct stats_map stats_1 SEC(".maps");

// Set by the loader before the program is loaded; 0 excludes nothing
// (pid 0 is the idle task, which is always skipped).
volatile const __u32 exclude_tgid = 0;

// kernel_stack returns the key of the current kernel stack, or 0. A kernel
// stack is empty (0, or -EFAULT) whenever the timer interrupted user mode:
// that is the common case, not a loss.
static __always_inline __u64 kernel_stack(void *ctx, void *stats, void *stacks)
{
	long err;

	if (stack_interrupted_user(ctx))
		return 0;
	struct unwind_stack *st = stack_get(ctx, 0, &err);

	if (!st) {
		if (err != 0 && err != -EFAULT)
			stat_inc(stats, STAT_KSTACK_ERROR);
		return 0;
	}
	return store(stats, stacks, st, HASH_DOMAIN_KERNEL, STAT_KSTACK_MAP_FULL, STAT_KSTACK_ERROR);
}

// user_stack returns the key of the current user stack, or 0 (an empty
// or unreadable user stack is an error), and in *setup whether the
// process's tables applied.
static __always_inline __u64 user_stack(void *ctx, void *stats, void *stacks, __u32 tgid, __u64 start, __u32 *setup)
{
	long err;
	struct unwind_stack *st = stack_native(ctx, tgid, start, &err);

	*setup |= stack_setup(st, 0);
	if (!st || st->len == 0) {
		stat_inc(stats, STAT_USTACK_ERROR);
		return 0;
	}
	return store(stats, stacks, st, HASH_DOMAIN_USER, STAT_USTACK_MAP_FULL, STAT_USTACK_ERROR);
}

// interp_stack returns the key of the sampled thread's interpreter frames
// in interp_stacks, or 0 where there are none (no interpreter on, a
// process with none, a native thread, no interpreted code running now),
// and in *setup whether the process's interpreter was set up.
// over_share counts a new stack against its process's job group, and
// reports whether the group had its share already. A group the quota map
// has no room for is not held back.
static __always_inline int over_share(void *quota, __u32 tgid, __u64 start)
{
	__u32 group = interp_share ? stack_interp_group(tgid, start) : 0;

	if (!group)
		return 0;
	__u32 *n = bpf_map_lookup_elem(quota, &group);

	if (!n) {
		__u32 one = 1;

		bpf_map_update_elem(quota, &group, &one, BPF_NOEXIST);
		return 0;
	}
	if (*n >= interp_share)
		return 1;
	__sync_fetch_and_add(n, 1);
	return 0;
}

static __always_inline __u64 interp_stack(void *stats, void *interp_stacks, void *quota, void *task, __u64 pid_tgid,
					  __u64 start, __u32 *setup)
{
	struct interp_stack *in = stack_interp_frames(task, pid_tgid, start);

	if (!in)
		return 0;
	*setup |= stack_setup(0, in) & STACK_SETUP_INTERP;
	__u32 status = in->status;

	stat_inc(stats, STAT_INTERP_STATUS + (status < INTERP_STATUS_MAX ? status : INTERP_STATUS_FRAME_READ));
	__u32 n = in->len;

	if (n == 0)
		return 0;
	if (n > INTERP_STACK_FRAMES)
		n = INTERP_STACK_FRAMES;
	__u64 h = interp_stack_hash(in, n, pid_tgid >> 32, start);

	if (bpf_map_lookup_elem(interp_stacks, &h))
		return h;
	if (over_share(quota, pid_tgid >> 32, start)) {
		stat_inc(stats, STAT_INTERP_SHARE);
		return 0;
	}
	long err = bpf_map_update_elem(interp_stacks, &h, in, BPF_NOEXIST);

	if (err == -EEXIST)
		return h;
	if (err) {
		stat_inc(stats, err == -E2BIG || err == -ENOMEM ? STAT_INTERP_MAP_FULL : STAT_INTERP_STATUS + INTERP_STATUS_FRAME_READ);
		return 0;
	}
	stack_interp_announce(stats, STAT_INTERP_NEW_LOST, pid_tgid >> 32, start, h, in);
	return h;
}

static __always_inline void record(void *ctx, void *counts, void *stacks, void *interp_stacks, void *quota,
				   void *stats, __u64 pid_tgid)
{
	// A BTF pointer: its fields are plain loads, where BPF_CORE_READ
	// makes a helper call for each (about 0.6 us apiece on the VM the
	// cost figures come from).
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	struct task_struct *leader = task->group_leader;
	struct count_key key = {};
	struct count_val *val;
	__u32 tgid = pid_tgid >> 32;
	long err;

	key.tgid = tgid;
	key.start_boottime_ns = leader->start_boottime;
	// The kernel stack first: it shares its buffer with a frame-pointer
	// user stack (stack.h).
	key.kernel_stack = kernel_stack(ctx, stats, stacks);
	// Kernel threads have no user stack: do not ask (and do not count it as an
	// error).
	if (!(task->flags & PF_KTHREAD)) {
		__u32 setup = 0;

		key.user_stack = user_stack(ctx, stats, stacks, tgid, key.start_boottime_ns, &setup);
		key.interp_stack = interp_stack(stats, interp_stacks, quota, task, pid_tgid, key.start_boottime_ns, &setup);
		key.setup = setup;
	}

	val = bpf_map_lookup_elem(counts, &key);
	if (val) {
		__sync_fetch_and_add(&val->count, 1);
		stat_inc(stats, STAT_SAMPLES);
		return;
	}

	struct count_val init = { .count = 1 };
	BPF_CORE_READ_STR_INTO(&init.comm, leader, comm);
	err = bpf_map_update_elem(counts, &key, &init, BPF_NOEXIST);
	if (err == -EEXIST) {
		// Another CPU inserted the same key in between.
		val = bpf_map_lookup_elem(counts, &key);
		if (val) {
			__sync_fetch_and_add(&val->count, 1);
			err = 0;
		}
	}
	stat_inc(stats, err ? STAT_LOST_MAP_FULL : STAT_SAMPLES);
}

SEC("perf_event")
int sample_cpu(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;

	// pid 0 is the per-CPU idle task; its "stack" is the idle loop.
	if ((__u32)pid_tgid == 0)
		return 0;

	int gen = gen_current();

	if (gen < 0)
		return 0;

	if (gen == 0) {
		if (exclude_tgid != 0 && tgid == exclude_tgid)
			stat_inc(&stats_0, STAT_SKIPPED_SELF);
		else
			record(ctx, &counts_0, &stacks_0, &interp_stacks_0, &interp_quota_0, &stats_0, pid_tgid);
	} else {
		if (exclude_tgid != 0 && tgid == exclude_tgid)
			stat_inc(&stats_1, STAT_SKIPPED_SELF);
		else
			record(ctx, &counts_1, &stacks_1, &interp_stacks_1, &interp_quota_1, &stats_1, pid_tgid);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
