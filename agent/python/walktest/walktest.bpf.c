//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// A test program for the CPython walk in ../python.bpf.h: on each cpu-clock
// sample it takes the user stack (frame pointers, as agent/cpu does) and the
// Python frames of the sampled thread, and sends both to user space as one
// ring buffer event. The integration tests and the BPF-time benchmark of
// package walktest run it against real interpreters; the CPU sampler and
// the GPU marker probe include the same header.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef signed long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "../python.bpf.h"

#define BPF_F_USER_STACK (1ULL << 8)
#define MAX_STACK_DEPTH 127

struct task_struct {
	struct task_struct *group_leader;
	__u64 start_boottime;
} __attribute__((preserve_access_index));

struct sample {
	__u64 pid_tgid;
	__u64 start_boottime_ns;
	__s64 user_stack_bytes; // bpf_get_stack: bytes, or -errno
	__u64 user_stack[MAX_STACK_DEPTH];
	struct py_stack py;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 * 1024 * 1024);
} samples SEC(".maps");

// Per-CPU: dropped samples (ring buffer full), and walk results by status.
enum stat_index {
	STAT_DROPPED = PY_STATUS_MAX,
	STAT_TRUNCATED,
	STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample);
} scratch SEC(".maps");

// 0: take the stacks but send nothing (the BPF-time benchmark).
volatile const __u32 emit = 1;

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		*v += 1;
}

SEC("perf_event")
int sample_walk(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u32 zero = 0;

	if ((__u32)pid_tgid == 0)
		return 0;
	struct sample *s = bpf_map_lookup_elem(&scratch, &zero);

	if (!s)
		return 0;
	s->pid_tgid = pid_tgid;
	s->start_boottime_ns = BPF_CORE_READ(task, group_leader, start_boottime);
	s->user_stack_bytes = bpf_get_stack(ctx, s->user_stack, sizeof(s->user_stack), BPF_F_USER_STACK);
	count(py_walk(task, pid_tgid, s->start_boottime_ns, &s->py) % PY_STATUS_MAX);
	if (s->py.flags & PY_STACK_TRUNCATED)
		count(STAT_TRUNCATED);
	if (emit && bpf_ringbuf_output(&samples, s, sizeof(*s), 0))
		count(STAT_DROPPED);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
