// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// What every slurmscope eBPF program needs before its own code: the kernel's
// fixed-width types, libbpf's helper declarations, the UAPI constants the
// programs use, and a minimal CO-RE view of task_struct. Dual licensed like
// the programs that include it (agent/cpu/sampler.bpf.c,
// agent/gputrace/markers.bpf.c).
//
// No vmlinux.h and no <linux/*.h>: the constants are spelt out here, so that
// the objects do not depend on the build host's kernel or multiarch headers
// and regenerate byte for byte anywhere. Shared probe code (the stack
// unwinders both programs will use) belongs beside this file; bpf2go finds
// it through -I../bpf/include.

#ifndef SLURMSCOPE_BPF_COMMON_H
#define SLURMSCOPE_BPF_COMMON_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef signed char __s8;
typedef signed short __s16;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef signed long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

// UAPI values (include/uapi/linux/bpf.h); they are ABI and never change.
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_ARRAY_OF_MAPS 12
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_F_USER_STACK (1ULL << 8)
#define BPF_RB_NO_WAKEUP (1ULL << 0)
#define BPF_RB_FORCE_WAKEUP (1ULL << 1)
#define BPF_RB_AVAIL_DATA 0

// include/uapi/asm-generic/errno-base.h
#define E2BIG 7
#define ENOMEM 12
#define EFAULT 14
#define EEXIST 17

// include/linux/sched.h; also ABI in practice (perf and BCC tools rely on it).
#define PF_KTHREAD 0x00200000

#define TASK_COMM_LEN 16
// Default kernel.perf_event_max_stack, and the most frames a stack keeps
// (bpf_get_stack returns the innermost ones). Mirrored in Go (stackDepth).
#define MAX_STACK_DEPTH 127

// Minimal CO-RE view of task_struct: libbpf/cilium relocate every field
// access against the running kernel's BTF, so the layout here is irrelevant.
struct task_struct {
	unsigned int flags;
	int pid;
	int tgid;
	struct task_struct *group_leader;
	// CLOCK_BOOTTIME in ns; the source of /proc/<pid>/stat field 22
	// (Linux >= 5.5; earlier kernels called it real_start_time). The agent
	// converts it to ticks at one place (procfs.StartFromBoottime).
	__u64 start_boottime;
	char comm[TASK_COMM_LEN];
} __attribute__((preserve_access_index));

// stat_inc adds one to slot idx of a per-CPU counter array. Programs of one
// kind do not nest on a CPU, so the slot needs no atomic.
static __always_inline void stat_inc(void *stats, __u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(stats, &idx);

	if (v)
		*v += 1;
}

#endif
