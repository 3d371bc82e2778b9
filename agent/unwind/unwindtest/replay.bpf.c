//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The replay probe of agent/unwind/replay: one walk of unwind.h from
// registers user space passes in (a recorded snapshot's), over this
// process's memory (where the test mapped the snapshot's stack at its
// recorded address), through the tables agent/unwind's Loader loaded for
// this process (the snapshot's mappings). Run by BPF_PROG_TEST_RUN, which
// runs a raw_tp program in the calling thread: no event, no timing. (The
// build constraint above keeps the go tool from taking this file for a cgo
// source; bpf2go compiles it.)

#include "common.h"
#include "unwind.h"

// The walk's result, read back by user space.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_stack);
} replay_out SEC(".maps");

const struct unwind_stack *unused_stack __attribute__((unused));

// ctx: the raw_tp test run's arguments, pc, sp and rbp.
SEC("raw_tp")
int replay_walk(__u64 *ctx)
{
	struct unwind_regs regs = { .pc = ctx[0], .sp = ctx[1], .bp = ctx[2] };
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct unwind_stack *st = unwind_user(&regs, tgid, BPF_CORE_READ(task, group_leader, start_boottime));
	__u32 zero = 0;

	if (!st)
		return 1;
	return bpf_map_update_elem(&replay_out, &zero, st, 0) ? 1 : 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
