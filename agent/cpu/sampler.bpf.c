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
// sample adds one to a count keyed by (tgid, the process's start time, kernel
// stack hash, user stack hash). Two generations of (counts, stacks) maps
// exist; user space flips gen_switch to the other generation before it drains
// one, see sampler.go for why that is race free.
//
// Stacks are content addressed: the program hashes the frames itself and
// stores them in a plain hash map keyed by that hash. The kernel's
// STACK_TRACE map is not used because it keeps one stack per bucket of
// jhash(frames) & (size - 1) and fails (-EEXIST) for any other stack that
// lands in a taken bucket: a hot stack that collided lost every one of its
// samples for the whole generation, at any map size.

// Types, UAPI constants and the CO-RE task_struct view: ../bpf/include.
#include "common.h"

// The key and value layouts are mirrored in Go (bpf2go generates
// samplerCountKey and samplerCountVal); keep padding explicit so that the
// verifier never sees uninitialised key bytes.
struct count_key {
	__u32 tgid;
	__u32 pad;
	__u64 start_boottime_ns; // thread-group leader's start time
	__u64 kernel_stack;      // key into stacks_N; 0: no kernel stack (see stats)
	__u64 user_stack;        // key into stacks_N; 0: no user stack (kernel thread or loss)
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
	STAT_MAX,
};

// Sizes are placeholders; the loader sets max_entries from Options.
struct counts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct count_key);
	__type(value, struct count_val);
};

// Frames innermost first, zero filled after the last one. Mirrored in Go
// (stackDepth).
struct stack {
	__u64 ips[MAX_STACK_DEPTH];
};

// Kernel and user stacks share one map per generation, keyed by stack_hash;
// their hashes are domain separated, so the two never share a key.
// Preallocated (the default), so that an insert from the interrupt the
// program runs in never allocates; it fails (-E2BIG) when the map is full.
struct stacks_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct stack);
};

struct counts_map counts_0 SEC(".maps");
struct counts_map counts_1 SEC(".maps");
struct stacks_map stacks_0 SEC(".maps");
struct stacks_map stacks_1 SEC(".maps");

// gen_switch[0] holds one of gen_0 / gen_1, whose only element is 0 or 1: the
// generation the program writes to. User space flips it with a map-in-map
// update, and the kernel does not return from that update until every
// program that might still see the old inner map has finished.
struct gen_map {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
};

struct gen_map gen_0 SEC(".maps");
struct gen_map gen_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct gen_map);
} gen_switch SEC(".maps");

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

// Where bpf_get_stack writes before a stack is hashed and copied into a
// stacks map: 1 KiB is too much for the 512-byte BPF stack. One per CPU is
// enough, since perf_event programs do not nest on a CPU.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack);
} scratch SEC(".maps");

// Set by the loader before the program is loaded; 0 excludes nothing
// (pid 0 is the idle task, which is always skipped).
volatile const __u32 exclude_tgid = 0;

// Set by the loader to a random value per load, so that the stack hash is
// keyed (see stack_hash).
volatile const __u64 stack_hash_seed = 0;

// Domain constants mixed into the first hash state: a kernel and a user
// stack never share a key, even with the same frames.
#define HASH_DOMAIN_KERNEL 0x6b65726e656c0000ULL // "kernel"
#define HASH_DOMAIN_USER 0x7573657200000000ULL   // "user"

// splitmix64's finaliser (Stafford's Mix13, a retuned MurmurHash3 fmix64): a
// bijection on 64 bits in which every input bit flips each output bit with
// probability close to 1/2.
static __always_inline __u64 mix64(__u64 x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

// stack_hash returns the key of the first nr frames of s: h = mix64(h ^ frame)
// for each frame, from a state seeded with the frame count, the domain and a
// per-load random seed. 0 is reserved for "no stack".
//
// Each step is a bijection of the state, so two stacks of the same length
// that differ only in their innermost frames (the common case: same callers,
// different leaf) can never collide. Any other collision, two different
// stacks with one key, needs a 64-bit coincidence: about 1 in 2^64 per pair
// of stacks, under 1e-11 per generation even with a full map of 16384
// stacks. That is astronomically unlikely, which is why a hit does not
// compare frames (a collision would show one stack's frames for the other's
// samples, for one generation). The random seed keeps a job, which controls
// what its user stacks read as, from crafting frames that collide with
// another job's stack: the mixer is not cryptographic, but without the seed
// no key can be predicted.
static __always_inline __u64 stack_hash(const struct stack *s, __u32 nr, __u64 domain)
{
	__u64 h = mix64(stack_hash_seed ^ domain ^ nr);

	for (__u32 i = 0; i < MAX_STACK_DEPTH; i++) {
		if (i >= nr)
			break;
		h = mix64(h ^ s->ips[i]);
	}
	return h ? h : 1;
}

// get_stack returns the key of the current kernel or user stack in stacks,
// storing the stack there if it is new, or 0 when the sample keeps no stack.
// The sample is counted either way, so counts stay exact even when stacks are
// not.
static __always_inline __u64 get_stack(void *ctx, void *stats, void *stacks, __u64 flags, __u32 map_full, __u32 error)
{
	__u32 zero = 0;
	struct stack *buf = bpf_map_lookup_elem(&scratch, &zero);

	if (!buf)
		return 0; // never: a one-entry array always has its entry
	// Bytes copied; the helper zero fills the rest of buf.
	long n = bpf_get_stack(ctx, buf, sizeof(*buf), flags);

	// A kernel stack is empty (0, or -EFAULT) whenever the timer interrupted
	// user mode: that is the common case, not a loss. An empty or unreadable
	// user stack is an error.
	if (n <= 0) {
		if (flags & BPF_F_USER_STACK || (n != 0 && n != -EFAULT))
			stat_inc(stats, error);
		return 0;
	}

	__u64 h = stack_hash(buf, n / sizeof(__u64), flags & BPF_F_USER_STACK ? HASH_DOMAIN_USER : HASH_DOMAIN_KERNEL);

	if (bpf_map_lookup_elem(stacks, &h))
		return h;
	long err = bpf_map_update_elem(stacks, &h, buf, BPF_NOEXIST);
	// -EEXIST: another CPU stored the same stack in between.
	if (err == 0 || err == -EEXIST)
		return h;
	stat_inc(stats, err == -E2BIG || err == -ENOMEM ? map_full : error);
	return 0;
}

static __always_inline void record(void *ctx, void *counts, void *stacks, void *stats, __u32 tgid)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct task_struct *leader = BPF_CORE_READ(task, group_leader);
	struct count_key key = {};
	struct count_val *val;
	long err;

	key.tgid = tgid;
	key.start_boottime_ns = BPF_CORE_READ(leader, start_boottime);
	key.kernel_stack = get_stack(ctx, stats, stacks, 0, STAT_KSTACK_MAP_FULL, STAT_KSTACK_ERROR);
	// Kernel threads have no user stack: do not ask (and do not count it as an
	// error).
	if (!(BPF_CORE_READ(task, flags) & PF_KTHREAD))
		key.user_stack = get_stack(ctx, stats, stacks, BPF_F_USER_STACK, STAT_USTACK_MAP_FULL, STAT_USTACK_ERROR);

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
	__u32 zero = 0;

	// pid 0 is the per-CPU idle task; its "stack" is the idle loop.
	if ((__u32)pid_tgid == 0)
		return 0;

	// The loader fills gen_switch before it attaches, so gen is never NULL
	// in practice; the verifier wants the checks.
	void *gen_inner = bpf_map_lookup_elem(&gen_switch, &zero);
	__u32 *gen = gen_inner ? bpf_map_lookup_elem(gen_inner, &zero) : 0;

	if (!gen)
		return 0;

	if (*gen == 0) {
		if (exclude_tgid != 0 && tgid == exclude_tgid)
			stat_inc(&stats_0, STAT_SKIPPED_SELF);
		else
			record(ctx, &counts_0, &stacks_0, &stats_0, tgid);
	} else {
		if (exclude_tgid != 0 && tgid == exclude_tgid)
			stat_inc(&stats_1, STAT_SKIPPED_SELF);
		else
			record(ctx, &counts_1, &stacks_1, &stats_1, tgid);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
