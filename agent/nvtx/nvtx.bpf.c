//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Uprobes on the two NVTX markers of libslurmscope_inject.so
// (gpuinject/slurmscope_nvtx.h). (The build constraint above keeps the go
// tool from taking this file for a cgo source; bpf2go compiles it.)
//
// slurmscope_nvtx_thread(addr, tid) writes the capture's nvtx_threads
// (../bpf/include/nvtx.h, shared through agent/stackwalk) under the
// caller's tgid, which the kernel gives: a process can only name structs
// for its own samples. slurmscope_nvtx_range_name(id, text, len,
// domain_len) becomes one ring buffer event of untrusted bytes that
// agent/nvtx validates (the id must be the text's hash). Both are exported
// and may be called in a loop by a hostile job: each process has a ration
// of calls a second (proc_calls_per_sec), past which its calls are dropped
// and counted; the library re-announces names and threads every second,
// so what is dropped comes back.
//
// Dual licensed, unlike the rest of the project (Apache-2.0), as the
// other probes: stack.h's helpers need a GPL-compatible program.

#include "common.h"
#include "regs.h"
// Uprobes run with interrupts on: their scratch slot is not the CPU
// sampler's (unwind.h).
#define UNWIND_SLOT 1
#include "stack.h"

// Bytes of a name's text copied: a domain (64), its 0x00 and a message
// (256), rounded up. Longer texts are never the library's: refused in Go.
#define NVTX_TEXT_MAX 328

struct nvtx_name_event {
	__u32 tgid; // from the kernel
	__u32 len;  // as the caller claimed
	__u64 start_boottime_ns;
	__u64 id;
	__u32 domain_len; // as the caller claimed
	__u32 copied;     // bytes of text valid: min(len, NVTX_TEXT_MAX)
	char text[NVTX_TEXT_MAX];
};

// Indexes into the per-CPU stats array; mirrored in Go.
enum nvtx_probe_stat {
	NVTX_PROBE_THREADS = 0,    // thread structs registered (or re-registered)
	NVTX_PROBE_NAMES,          // name events submitted
	NVTX_PROBE_RATE_LIMITED,   // calls dropped: their process past its ration
	NVTX_PROBE_LOST_RINGBUF,   // name events dropped: ring buffer full
	NVTX_PROBE_BAD_ARGS,       // calls dropped: tid 0, len 0
	NVTX_PROBE_READ_ERRORS,    // name text unreadable
	NVTX_PROBE_SKIPPED_SELF,   // calls by the excluded pid
	NVTX_PROBE_STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); // placeholder; the loader sets it
} nvtx_names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NVTX_PROBE_STAT_MAX);
	__type(key, enum nvtx_probe_stat); // also puts the enum into BTF for bpf2go
	__type(value, __u64);
} nvtx_probe_stats SEC(".maps");

// Set by the loader; 0 excludes nothing / no ration.
volatile const __u32 exclude_tgid = 0;
volatile const __u32 proc_calls_per_sec = 0;

const struct nvtx_name_event *unused_nvtx_name_event __attribute__((unused));

struct proc_rate {
	__u64 start_boottime; // the process the window counts: guards pid reuse
	__u64 window_ns;      // start of the current one-second window
	__u32 calls;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct proc_rate);
} nvtx_proc_rates SEC(".maps");

// skip reports a call not to take: the excluded process's, and one past
// its process's ration of the current second.
static __always_inline int skip(__u32 tgid, __u64 start)
{
	if (exclude_tgid != 0 && tgid == exclude_tgid) {
		stat_inc(&nvtx_probe_stats, NVTX_PROBE_SKIPPED_SELF);
		return 1;
	}
	if (!proc_calls_per_sec)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct proc_rate *r = bpf_map_lookup_elem(&nvtx_proc_rates, &tgid);

	if (!r || r->start_boottime != start || now - r->window_ns >= 1000000000ULL) {
		struct proc_rate fresh = { .start_boottime = start, .window_ns = now, .calls = 1 };

		bpf_map_update_elem(&nvtx_proc_rates, &tgid, &fresh, 0);
		return 0;
	}
	if (r->calls >= proc_calls_per_sec) {
		stat_inc(&nvtx_probe_stats, NVTX_PROBE_RATE_LIMITED);
		return 1;
	}
	__sync_fetch_and_add(&r->calls, 1);
	return 0;
}

static __always_inline __u64 leader_start(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	return BPF_CORE_READ(task, group_leader, start_boottime);
}

// slurmscope_nvtx_thread(u64 addr, u32 tid)
SEC("uprobe")
int nvtx_thread(struct pt_regs *ctx)
{
	__u64 addr = PT_REGS_PARM1(ctx);
	__u32 tid = (__u32)PT_REGS_PARM2(ctx);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 start = leader_start();

	if (tid == 0 || addr == 0) {
		stat_inc(&nvtx_probe_stats, NVTX_PROBE_BAD_ARGS);
		return 0;
	}
	struct nvtx_thread_key key = { .tgid = tgid, .tid = tid };
	struct nvtx_thread_val val = { .addr = addr, .start_boottime = start };
	struct nvtx_thread_val *old = bpf_map_lookup_elem(&nvtx_threads, &key);

	// A re-announcement of what is there costs nothing of the ration.
	if (old && old->addr == addr && old->start_boottime == start)
		return 0;
	if (skip(tgid, start))
		return 0;
	bpf_map_update_elem(&nvtx_threads, &key, &val, 0);
	stat_inc(&nvtx_probe_stats, NVTX_PROBE_THREADS);
	return 0;
}

// slurmscope_nvtx_range_name(u64 id, const char *text, u32 len, u32 domain_len)
SEC("uprobe")
int nvtx_range_name(struct pt_regs *ctx)
{
	__u64 id = PT_REGS_PARM1(ctx);
	const void *text = (const void *)PT_REGS_PARM2(ctx);
	__u32 len = (__u32)PT_REGS_PARM3(ctx);
	__u32 domain_len = (__u32)PT_REGS_PARM4(ctx);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 start = leader_start();

	if (len == 0) {
		stat_inc(&nvtx_probe_stats, NVTX_PROBE_BAD_ARGS);
		return 0;
	}
	if (skip(tgid, start))
		return 0;
	struct nvtx_name_event *e = bpf_ringbuf_reserve(&nvtx_names, sizeof(*e), 0);

	if (!e) {
		stat_inc(&nvtx_probe_stats, NVTX_PROBE_LOST_RINGBUF);
		return 0;
	}
	// 64-bit and clamped after a barrier: otherwise clang may hand the
	// helper the unclamped (or not zero-extended) register.
	__u64 copy = len;

	if (copy > NVTX_TEXT_MAX)
		copy = NVTX_TEXT_MAX;
	barrier_var(copy);
	e->tgid = tgid;
	e->len = len;
	e->start_boottime_ns = start;
	e->id = id;
	e->domain_len = domain_len;
	e->copied = (__u32)copy;
	if (copy > NVTX_TEXT_MAX || bpf_probe_read_user(e->text, copy, text) != 0) {
		stat_inc(&nvtx_probe_stats, NVTX_PROBE_READ_ERRORS);
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	stat_inc(&nvtx_probe_stats, NVTX_PROBE_NAMES);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
