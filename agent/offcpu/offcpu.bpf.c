//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Off-CPU time of the profiled jobs' threads, for slurmscope (agent/offcpu).
// Dual licensed like the other probes: the kernel lets only GPL-compatible
// programs call bpf_get_stack and bpf_probe_read_kernel.
//
// One program on the sched_switch tracepoint (tp_btf). There, current is
// still the task switching out (prev), so its stacks are the ones it
// leaves the CPU in: the kernel stack says why (futex_wait_queue,
// do_nanosleep, pipe_read, or preempt_schedule_irq for a preemption), the
// user stack where. For prev the program
//   1. skips the idle task, kernel threads and any task outside a profiled
//      job's cgroup, as cheaply as it can (a verdict cached per cgroup);
//   2. samples: each job has a rate of switches it records per second;
//      above it, a switch is recorded with probability num/den, set per
//      window from the previous window's switches, and its time scaled by
//      den/num so that the totals stay right (each switch's probability is
//      fixed before it happens);
//   3. captures the stacks (stack.h, the same capture as the CPU sampler's)
//      into maps that outlive generations, and keeps the count key and the
//      time in the task's own storage.
// For next, the task switching in, it adds the time since its switch-out to
// its count key in the current generation.
//
// A blocked switch (the task sleeps: TASK_INTERRUPTIBLE, UNINTERRUPTIBLE,
// stopped) and a runnable one (preempted, still TASK_RUNNING) are counted
// under keys that say which, never summed. A runnable switch keeps its
// native and kernel frames, not its interpreter's (see switch_out).
//
// Counts are per generation, drained like the CPU sampler's (gen_switch).
// Stacks are not: a thread that sleeps for minutes is counted when it
// wakes, generations after its stacks were captured, so stacks live in
// least-recently-used maps that user space reads by key and never clears.
// A stack evicted before its count was drained is counted missing.

#include "common.h"
#define UNWIND_SLOT 2
#include "stack.h"
#include "stackstore.h"
#include "generations.h"

#define BPF_MAP_TYPE_TASK_STORAGE 29
#define BPF_LOCAL_STORAGE_GET_F_CREATE (1ULL << 0)

// Mirrored in Go (offcpuCountKey, offcpuCountVal).
struct count_key {
	__u32 tgid;
	__u32 setup;             // STACK_SETUP_*
	__u64 start_boottime_ns; // thread-group leader's start time
	__u64 kernel_stack;      // key into stacks; 0: none
	__u64 user_stack;        // key into stacks; 0: none
	__u64 interp_stack;      // key into interp_stacks; 0: none
	__u32 state;             // enum offcpu_state
	__u32 pad;
};

struct count_val {
	__u64 switches; // switches recorded
	__u64 ns;       // their time off the CPU, scaled by the sampling
};

enum offcpu_state {
	OFFCPU_BLOCKED = 0,
	OFFCPU_RUNNABLE = 1,
};

// Indexes into the per-CPU stats arrays; mirrored in Go.
enum stat_index {
	STAT_SWITCHES = 0,     // switch-outs of a profiled job's thread
	STAT_SAMPLED_OUT,      // of those, not recorded (sampling above the rate)
	STAT_CAPTURED,         // of those, captured (stacks taken)
	STAT_RECORDED,         // switch-ins counted into the counts map
	STAT_LOST_MAP_FULL,    // switch-ins dropped: counts map full
	STAT_LOST_SHARE,       // captures dropped: their job had its share of counts or stacks
	STAT_NO_STORAGE,       // captures dropped: no task storage
	STAT_KSTACK_MAP_FULL,  // kernel stack not stored: stacks map full
	STAT_KSTACK_ERROR,     // any other kernel stack error
	STAT_USTACK_MAP_FULL,  // user stack not stored: stacks map full
	STAT_USTACK_ERROR,     // any other user stack error
	STAT_INTERP_MAP_FULL,  // interpreter frames not stored: map full
	STAT_INTERP_NEW_LOST,  // a new interpreter stack not announced: ring buffer full
	STAT_MAX,
};

// Sizes are placeholders; the loader sets them.
struct counts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct count_key);
	__type(value, struct count_val);
};

struct counts_map counts_0 SEC(".maps");
struct counts_map counts_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct unwind_stack);
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct interp_stack);
} interp_stacks SEC(".maps");

// How many new count keys and new stacks each job group made in the
// generation (key: group << 1 | what): one job fills at most its share of
// either map.
struct quota_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2048);
	__type(key, __u64);
	__type(value, __u32);
};

struct quota_map quota_0 SEC(".maps");
struct quota_map quota_1 SEC(".maps");

// Set by the loader: a job group's share of the counts map and of the
// stacks maps per generation; the switches recorded per second per job
// before sampling starts; the v1 controller whose cgroups name jobs
// (its index in /proc/cgroups), ~0 for none.
volatile const __u32 count_share = 0;
volatile const __u32 stack_share = 0;
volatile const __u32 job_rate = 1000;
volatile const __u32 v1_subsys = ~0U;

// The job cgroups profiled, by cgroup id (the directory's inode): written
// by user space, which bumps jobs_gen[0] at every change.
struct offcpu_job {
	__u32 group; // the job group (agent/stackwalk's), for the shares
	__u32 num;   // this window's recording probability num/den; den 0: all
	__u32 den;
	__u32 pad;
	__u64 window_start;
	__u64 seen; // switches in the window
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct offcpu_job);
} jobs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} jobs_gen SEC(".maps");

// A cgroup's verdict: the job cgroup it is in (0: none), as of jobs_gen.
struct verdict {
	__u64 job;
	__u32 gen;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct verdict);
} verdicts SEC(".maps");

// A task switched out and captured, until it switches in.
struct offcpu_task {
	__u64 at; // switch-out time; 0: nothing pending
	__u32 num, den;
	__u32 group; // the job group, for the shares
	__u32 pad;
	struct count_key key;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_task);
} pending SEC(".maps");

struct stats_map {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, enum stat_index);
	__type(value, __u64);
};

struct stats_map stats_0 SEC(".maps");
struct stats_map stats_1 SEC(".maps");

volatile const __u32 exclude_tgid = 0;

// How long a sampling window lasts: short, so that a burst of switches
// after a quiet spell is recorded in full for at most this long.
#define WINDOW_NS 20000000ULL
#define WINDOWS_PER_SECOND (1000000000ULL / WINDOW_NS)
// How far up from a task's cgroup a job's may be (job_N/step_M/user/task_K).
#define CGROUP_UP 8
// Marks a v1 cgroup's id in jobs and verdicts (user space's v1Key): v1
// and v2 ids are numbered apart.
#define V1_KEY (1ULL << 63)

// CO-RE views of what the cgroup checks read.
struct kernfs_node___offcpu {
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup___offcpu;

struct cgroup_subsys_state___offcpu {
	struct cgroup___offcpu *cgroup;
	struct cgroup_subsys_state___offcpu *parent;
} __attribute__((preserve_access_index));

struct cgroup___offcpu {
	struct cgroup_subsys_state___offcpu self;
	struct kernfs_node___offcpu *kn;
} __attribute__((preserve_access_index));

struct css_set___offcpu {
	struct cgroup_subsys_state___offcpu *subsys[16];
	struct cgroup___offcpu *dfl_cgrp;
} __attribute__((preserve_access_index));

struct task_struct___offcpu {
	unsigned int __state;
	struct css_set___offcpu *cgroups;
} __attribute__((preserve_access_index));

struct task_struct___offcpu_old {
	long state; // before Linux 5.14
} __attribute__((preserve_access_index));

// job_of walks up from cgroup cg to a profiled job's cgroup: its key in
// jobs (the id, with V1_KEY in a v1 hierarchy), or 0.
static __always_inline __u64 job_of(struct cgroup___offcpu *cg, __u64 v1)
{
	for (int i = 0; i < CGROUP_UP; i++) {
		if (!cg)
			break;
		__u64 id = BPF_CORE_READ(cg, kn, id) | v1;

		if (bpf_map_lookup_elem(&jobs, &id))
			return id;
		cg = BPF_CORE_READ(cg, self.parent, cgroup);
	}
	return 0;
}

// verdict_of returns the job cgroup of the cgroup with id leaf (read from
// cg when it is not cached, or cached before the jobs last changed).
static __always_inline __u64 verdict_of(__u64 leaf, struct cgroup___offcpu *cg, __u32 gen)
{
	struct verdict *v = bpf_map_lookup_elem(&verdicts, &leaf);

	if (v && v->gen == gen)
		return v->job;
	struct verdict nv = { .job = job_of(cg, leaf & V1_KEY), .gen = gen };

	bpf_map_update_elem(&verdicts, &leaf, &nv, 0);
	return nv.job;
}

// job_cgroup is the profiled job cgroup the task (current) is in, or 0.
static __always_inline __u64 job_cgroup(struct task_struct___offcpu *task)
{
	__u32 zero = 0;
	__u32 *g = bpf_map_lookup_elem(&jobs_gen, &zero);
	__u32 gen = g ? *g : 0;
	struct cgroup___offcpu *dfl = 0;
	__u64 id = bpf_get_current_cgroup_id();
	__u64 job = 0;

	if (id) {
		struct verdict *v = bpf_map_lookup_elem(&verdicts, &id);

		if (v && v->gen == gen)
			job = v->job;
		else {
			dfl = BPF_CORE_READ(task, cgroups, dfl_cgrp);
			job = verdict_of(id, dfl, gen);
		}
	}
	if (job || v1_subsys >= 16)
		return job;
	struct cgroup___offcpu *cg = BPF_CORE_READ(task, cgroups, subsys[v1_subsys & 15], cgroup);

	if (!cg)
		return 0;
	__u64 v1id = BPF_CORE_READ(cg, kn, id);

	return v1id ? verdict_of(v1id | V1_KEY, cg, gen) : 0;
}

// take counts one more new entry of group (what: 0 counts, 1 stacks) in
// the generation's quota, unless it has its share: then 0.
static __always_inline int take(void *quota, __u32 group, __u32 what, __u32 share)
{
	if (!share || !group)
		return 1;
	__u64 k = ((__u64)group << 1) | what;
	__u32 *n = bpf_map_lookup_elem(quota, &k);

	if (!n) {
		__u32 one = 1;

		bpf_map_update_elem(quota, &k, &one, BPF_NOEXIST);
		return 1;
	}
	if (*n >= share)
		return 0;
	__sync_fetch_and_add(n, 1);
	return 1;
}

// store_new stores a stack unless it is there; a new one takes from its
// job's share.
static __always_inline __u64 store_new(void *stats, void *quota, __u32 group, struct unwind_stack *st, __u64 domain,
				       __u32 map_full, __u32 error)
{
	__u32 n = st->len > MAX_STACK_DEPTH ? MAX_STACK_DEPTH : st->len;
	__u64 h = stack_hash(st, n, domain);

	if (bpf_map_lookup_elem(&stacks, &h))
		return h;
	if (!take(quota, group, 1, stack_share)) {
		stat_inc(stats, STAT_LOST_SHARE);
		return 0;
	}
	return store(stats, &stacks, st, domain, map_full, error);
}

static __always_inline __u64 interp_key(void *stats, void *quota, __u32 group, void *task, __u64 pid_tgid, __u64 start,
					__u32 *setup)
{
	struct interp_stack *in = stack_interp_frames(task, pid_tgid, start);

	if (!in)
		return 0;
	*setup |= stack_setup(0, in) & STACK_SETUP_INTERP;
	__u32 n = in->len;

	if (n == 0)
		return 0;
	if (n > INTERP_STACK_FRAMES)
		n = INTERP_STACK_FRAMES;
	__u64 h = interp_stack_hash(in, n, pid_tgid >> 32, start);

	if (bpf_map_lookup_elem(&interp_stacks, &h))
		return h;
	if (!take(quota, group, 1, stack_share)) {
		stat_inc(stats, STAT_LOST_SHARE);
		return 0;
	}
	long err = bpf_map_update_elem(&interp_stacks, &h, in, BPF_NOEXIST);

	if (err == -EEXIST)
		return h;
	if (err) {
		stat_inc(stats, STAT_INTERP_MAP_FULL);
		return 0;
	}
	stack_interp_announce(stats, STAT_INTERP_NEW_LOST, pid_tgid >> 32, start, h, in);
	return h;
}

// sample decides whether this switch of job j is recorded, and with what
// probability (num/den; den 0: always).
static __always_inline int sample(struct offcpu_job *j, __u64 now, __u32 *num, __u32 *den)
{
	__u64 per_window = job_rate / WINDOWS_PER_SECOND;

	if (per_window == 0)
		per_window = 1;
	if (now - j->window_start >= WINDOW_NS) {
		__u64 seen = j->seen;

		// Windows not seen (quiet ones) count as empty.
		if (now - j->window_start >= 2 * WINDOW_NS || seen <= per_window) {
			j->num = 0;
			j->den = 0;
		} else {
			j->num = per_window;
			j->den = seen > 0xffffffffULL ? 0xffffffffU : seen;
		}
		j->window_start = now;
		j->seen = 0;
	}
	__sync_fetch_and_add(&j->seen, 1);
	*num = j->num;
	*den = j->den;
	if (*den && *num < *den && bpf_get_prandom_u32() % *den >= *num)
		return 0;
	return 1;
}

static __always_inline void switch_out(void *ctx, struct task_struct *prev, int runnable, void *stats, void *quota)
{
	struct task_struct___offcpu *t = (void *)prev;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	__u64 job = job_cgroup(t);

	if (!job)
		return;
	struct offcpu_job *j = bpf_map_lookup_elem(&jobs, &job);

	if (!j)
		return;
	stat_inc(stats, STAT_SWITCHES);
	__u64 now = bpf_ktime_get_ns();
	__u32 num, den;

	if (!sample(j, now, &num, &den)) {
		stat_inc(stats, STAT_SAMPLED_OUT);
		return;
	}
	__u32 group = j->group;
	struct offcpu_task *p = bpf_task_storage_get(&pending, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (!p) {
		stat_inc(stats, STAT_NO_STORAGE);
		return;
	}
	p->at = 0;
	struct count_key *key = &p->key;
	long err;

	key->tgid = tgid;
	key->start_boottime_ns = prev->group_leader->start_boottime;
	key->state = runnable ? OFFCPU_RUNNABLE : OFFCPU_BLOCKED;
	key->pad = 0;
	key->kernel_stack = 0;
	struct unwind_stack *ks = stack_get(ctx, 0, &err);

	if (ks)
		key->kernel_stack =
			store_new(stats, quota, group, ks, HASH_DOMAIN_KERNEL, STAT_KSTACK_MAP_FULL, STAT_KSTACK_ERROR);
	else if (err != 0 && err != -EFAULT)
		stat_inc(stats, STAT_KSTACK_ERROR);
	__u32 setup = 0;
	struct unwind_stack *us = stack_native_task(ctx, tgid, key->start_boottime_ns, &err);

	setup |= stack_setup(us, 0);
	key->user_stack = 0;
	if (us && us->len)
		key->user_stack =
			store_new(stats, quota, group, us, HASH_DOMAIN_USER, STAT_USTACK_MAP_FULL, STAT_USTACK_ERROR);
	else
		stat_inc(stats, STAT_USTACK_ERROR);
	// Interpreter frames for blocked switches only: a preemption lands
	// anywhere in the code, as a CPU sample does, and naming those frames
	// again would spend the job's frame-resolution allowance that its CPU
	// profile needs (a forking Python pool under load lost its CPU
	// frames so).
	// Read back from the map value: a branch on the register would have
	// the verifier walk the interpreter path once per way runnable was
	// computed, past its instruction limit.
	key->interp_stack = 0;
	if (*(volatile __u32 *)&key->state == OFFCPU_BLOCKED)
		key->interp_stack = interp_key(stats, quota, group, prev, pid_tgid, key->start_boottime_ns, &setup);
	key->setup = setup;
	p->group = group;
	p->pad = 0;
	p->num = num;
	p->den = den;
	p->at = now;
	stat_inc(stats, STAT_CAPTURED);
}

static __always_inline void switch_in(struct task_struct *next, void *counts, void *stats, void *quota)
{
	struct offcpu_task *p = bpf_task_storage_get(&pending, next, 0, 0);

	if (!p || !p->at)
		return;
	__u64 d = bpf_ktime_get_ns() - p->at;

	p->at = 0;
	if (p->den && p->num)
		d = d * p->den / p->num;
	struct count_val *v = bpf_map_lookup_elem(counts, &p->key);

	if (v) {
		__sync_fetch_and_add(&v->switches, 1);
		__sync_fetch_and_add(&v->ns, d);
		stat_inc(stats, STAT_RECORDED);
		return;
	}
	struct count_val init = { .switches = 1, .ns = d };

	if (!take(quota, p->group, 0, count_share)) {
		stat_inc(stats, STAT_LOST_SHARE);
		return;
	}
	long err = bpf_map_update_elem(counts, &p->key, &init, BPF_NOEXIST);

	if (err == -EEXIST) {
		v = bpf_map_lookup_elem(counts, &p->key);
		if (v) {
			__sync_fetch_and_add(&v->switches, 1);
			__sync_fetch_and_add(&v->ns, d);
			err = 0;
		}
	}
	stat_inc(stats, err ? STAT_LOST_MAP_FULL : STAT_RECORDED);
}

static __always_inline int task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(struct task_struct___offcpu, __state))
		return BPF_CORE_READ((struct task_struct___offcpu *)t, __state);
	return BPF_CORE_READ((struct task_struct___offcpu_old *)t, state);
}

SEC("tp_btf/sched_switch")
int on_switch(__u64 *ctx)
{
	int preempt = (int)ctx[0];
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	int gen = gen_current();

	if (gen < 0)
		return 0;
	void *counts = gen ? (void *)&counts_1 : (void *)&counts_0;
	void *stats = gen ? (void *)&stats_1 : (void *)&stats_0;
	void *quota = gen ? (void *)&quota_1 : (void *)&quota_0;

	if (next->pid != 0 && !(next->flags & PF_KTHREAD))
		switch_in(next, counts, stats, quota);
	// The idle task, kernel threads and the agent itself pay nothing
	// more; a dying task never switches in.
	if (prev->pid == 0 || (prev->flags & PF_KTHREAD) || (exclude_tgid && prev->tgid == exclude_tgid))
		return 0;
	int state = task_state(prev);

	if (state & 0x80) // TASK_DEAD
		return 0;
	switch_out(ctx, prev, preempt || state == 0, stats, quota);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
