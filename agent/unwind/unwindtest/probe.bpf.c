//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The test probe of agent/unwind: a perf_event program and a uprobe that
// unwind the target process's user stack with unwind.h and send each stack
// to user space, and, for the cost comparison, a perf_event program that
// takes the same stack by frame pointers with bpf_get_stack, as stack.h
// does under --unwind=fp. Both perf programs do the same work around the
// stack (one ring buffer event), so their run times differ by unwinding.
// (The build constraint above keeps the go tool from taking this file for
// a cgo source; bpf2go compiles it.)

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef signed short __s16;
typedef signed int __s32;
typedef signed long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "unwind.h"

#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_F_USER_STACK (1ULL << 8)

struct task_struct {
	struct task_struct *group_leader;
	__u64 start_boottime;
} __attribute__((preserve_access_index));

// One sample. How: 1 unwinder (perf event), 2 bpf_get_stack, 3 unwinder (uprobe).
struct sample {
	__u32 how;
	__u32 len;
	__u32 end;
	__u32 pad;
	__u64 ips[UNWIND_MAX_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} samples SEC(".maps");

// The process sampled; the loader sets it.
volatile const __u32 target_tgid = 0;

const struct sample *unused_sample __attribute__((unused));
const enum unwind_stat *unused_stat __attribute__((unused));
const enum unwind_end *unused_end __attribute__((unused));
const enum unwind_kind *unused_kind __attribute__((unused));
const struct unwind_mapping_key *unused_key __attribute__((unused));
const struct unwind_mapping *unused_mapping __attribute__((unused));
const struct unwind_proc *unused_proc __attribute__((unused));
const struct unwind_table_header *unused_header __attribute__((unused));
const struct unwind_row *unused_row __attribute__((unused));

static __always_inline int unwind_and_send(void *ctx, __u32 how)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (tgid != target_tgid)
		return 0;
	struct unwind_regs regs;

	if (unwind_user_regs(ctx, &regs) != 0)
		return 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct unwind_stack *st = unwind_user(&regs, tgid, BPF_CORE_READ(task, group_leader, start_boottime));

	if (!st)
		return 0;
	struct sample *e = bpf_ringbuf_reserve(&samples, sizeof(*e), 0);

	if (!e)
		return 0;
	e->how = how;
	e->len = st->len;
	e->end = st->end;
	e->pad = 0;
	__builtin_memcpy(e->ips, st->ips, sizeof(e->ips));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("perf_event")
int sample_unwind(void *ctx)
{
	return unwind_and_send(ctx, 1);
}

SEC("uprobe")
int uprobe_unwind(void *ctx)
{
	return unwind_and_send(ctx, 3);
}

// Where bpf_get_stack writes first, as in stack.h.
struct {
	__uint(type, UNWIND_BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_stack);
} fp_scratch SEC(".maps");

SEC("perf_event")
int sample_fp(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 zero = 0;

	if (tgid != target_tgid)
		return 0;
	struct unwind_stack *st = bpf_map_lookup_elem(&fp_scratch, &zero);

	if (!st)
		return 0;
	long n = bpf_get_stack(ctx, st->ips, sizeof(st->ips), BPF_F_USER_STACK);

	if (n <= 0)
		return 0;
	struct sample *e = bpf_ringbuf_reserve(&samples, sizeof(*e), 0);

	if (!e)
		return 0;
	e->how = 2;
	e->len = n / 8;
	e->end = 0;
	e->pad = 0;
	__builtin_memcpy(e->ips, st->ips, sizeof(e->ips));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
