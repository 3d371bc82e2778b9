//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Uprobes on the marker functions of libslurmscope_inject.so (see
// gpuinject/slurmscope_inject.h). (The build constraint above keeps the go tool
// from taking this file for a cgo source; bpf2go compiles it.)
//
// Dual licensed, unlike the rest of the project (Apache-2.0): the kernel only
// lets GPL-compatible programs call bpf_get_stack and bpf_probe_read_kernel.
//
// Every argument of a marker is controlled by the traced process, which may be
// hostile. The programs therefore take the process's identity (tgid, tid,
// start time) from the kernel, never from the arguments, bound every copy,
// and hand everything else to user space as untrusted bytes to validate.
//
// Each marker call becomes one self-contained ring buffer event. The launch
// stack (native frames from the table unwinder or frame pointers, and the
// thread's interpreter frames: stack.h) is copied into the event rather than
// interned in a stack map: a stack map needs clearing, can collide (-EEXIST) and can reuse
// an id for a different stack between capture and read, while an event that
// carries its stack is exact and needs no second lookup. Launch markers are
// rate-limited by the library, so the extra ring buffer bytes are bounded.

// Types, UAPI constants, the CO-RE task_struct view, the uprobe's
// registers and the user-stack capture shared with agent/cpu (stack.h: the
// table unwinder and the interpreter walks): ../bpf/include.
#include "common.h"
#include "regs.h"
// Uprobes run with interrupts on: their scratch slot is not the CPU
// sampler's (unwind.h).
#define UNWIND_SLOT 1
#include "stack.h"

// slurmscope_inject.h: SLURMSCOPE_RECORDS_MAX.
#define RECORDS_MAX 64
// Bytes of a kernel name copied; longer names arrive truncated (and say so).
#define NAME_MAX 512

// Event kinds; mirrored in Go (bpf2go -type event_kind).
enum event_kind {
	EVENT_LAUNCH = 1,
	EVENT_RECORDS = 2,
	EVENT_NAME = 3,
	EVENT_STATE = 4,
};

// Every event starts with this header. tgid and start time come from the
// kernel: a process cannot claim to be another.
struct event_header {
	__u32 kind;
	__u32 tgid;
	__u64 start_boottime_ns; // thread-group leader's start time
};

struct launch_event {
	struct event_header hdr;
	__u64 correlation_id;
	__u64 name_id;
	__u32 tid;
	__u32 device;
	__u32 flags;
	__s32 stack_bytes; // bytes of stack filled (8 a frame), or -errno: no stack
	// The return address at the marker's entry ([sp] on x86-64, the link
	// register on arm64), 0 if unreadable. A frame-pointer unwind from a
	// function's first instruction skips the direct caller, because its
	// frame is not set up yet; kernels that fix this up report it as the
	// second frame, and user space inserts it where they do not (the table
	// unwinder finds it from the marker's entry row).
	__u64 return_address;
	__u32 stack_end; // enum unwind_end: why the native walk stopped
	__u32 setup;     // STACK_SETUP_* (stack.h): what was loaded for the process
	__u64 stack[MAX_STACK_DEPTH]; // user stack, innermost first; stale beyond stack_bytes
	// The launching thread's interpreter frames (stack.h), interp.len 0 for none.
	struct interp_stack interp;
};

// struct slurmscope_kernel_record, 56 bytes; copied verbatim and decoded (and
// validated) in Go.
struct kernel_record {
	__u64 correlation_id;
	__u64 start_ns;
	__u64 end_ns;
	__u64 name_id;
	__u32 device_id;
	__u32 context_id;
	__u32 stream_id;
	__u32 gpu_instance_id;
	__u32 sampled;
	__u32 pad;
};

struct records_event {
	struct event_header hdr;
	__u32 n; // records copied, 1..RECORDS_MAX; the rest of recs is garbage
	__u32 pad;
	struct kernel_record recs[RECORDS_MAX];
};

struct name_event {
	struct event_header hdr;
	__u64 name_id;
	__u32 len;    // length the caller claimed
	__u32 copied; // bytes of name valid: min(len, NAME_MAX)
	char name[NAME_MAX];
};

// The library stepped aside for, or came back from, the process's own CUPTI
// client (slurmscope_trace_state). The time is the kernel's, so that the
// time aside is exact whenever the reader gets to it.
struct state_event {
	struct event_header hdr;
	__u64 ktime_ns; // CLOCK_MONOTONIC
	__u32 tid;
	__u32 state;  // as the process passed it: validated in Go
	__u32 reason; // likewise
	__u32 pad;
};

// Indexes into the per-CPU stats array; mirrored in Go.
enum stat_index {
	STAT_LAUNCHES = 0,      // launch events submitted
	STAT_RECORD_BATCHES,    // records events submitted
	STAT_NAMES,             // name events submitted
	STAT_STACK_ERRORS,      // launch submitted without a user stack
	STAT_LOST_RINGBUF,      // events dropped: ring buffer full
	STAT_BAD_ARGS,          // calls dropped: n or len out of range
	STAT_READ_ERRORS,       // calls dropped: user memory unreadable
	STAT_SKIPPED_SELF,      // calls by the excluded pid
	STAT_RATE_LIMITED,      // calls dropped: their user past its ration, the ring half full
	STAT_STATES,            // state events submitted
	STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); // placeholder; the loader sets it
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, enum stat_index); // also puts the enum into BTF for bpf2go
	__type(value, __u64);
} stats SEC(".maps");

// Set by the loader; 0 excludes nothing.
volatile const __u32 exclude_tgid = 0;
// Wake the reader only once this many bytes wait: a wakeup is an irq_work
// (a self-IPI, a VM exit under virtualisation) that would otherwise cost
// every launch microseconds. The reader also polls on a timer.
volatile const __u64 wakeup_bytes = 1;

static __always_inline __u64 submit_flags(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

// Unused, but referenced so that bpf2go generates the Go types.
const struct launch_event *unused_launch __attribute__((unused));
const struct records_event *unused_records __attribute__((unused));
const struct name_event *unused_name __attribute__((unused));
const struct state_event *unused_state __attribute__((unused));
const enum event_kind *unused_kind __attribute__((unused));

// The ring buffer is every job's: when the reader falls behind (the ring
// half full), the calls of users who used more than half their ration (a
// token bucket per uid) are dropped, so that one user calling the exported
// markers in a loop fills at most half the ring and never crowds out
// another user's events. While the ring has room nobody is dropped. Set by
// the loader; 0: no ration.
volatile const __u64 user_calls_per_sec = 0;
volatile const __u64 user_calls_burst = 0;

// UAPI; here, not in ../bpf/include, as only this program needs them.
#define BPF_MAP_TYPE_LRU_HASH 9
#define BPF_RB_RING_SIZE 1

struct user_rate {
	__u64 at_ns;
	__s64 tokens; // signed: CPUs racing past zero leave it a little below
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct user_rate);
} user_rates SEC(".maps");

static __always_inline int over_rate(void)
{
	if (user_calls_per_sec == 0)
		return 0;
	__u32 uid = (__u32)bpf_get_current_uid_gid();
	__u64 now = bpf_ktime_get_ns();
	struct user_rate *r = bpf_map_lookup_elem(&user_rates, &uid);
	if (!r) {
		struct user_rate fresh = {.at_ns = now, .tokens = (__s64)user_calls_burst};
		bpf_map_update_elem(&user_rates, &uid, &fresh, BPF_NOEXIST);
		return 0;
	}
	__u64 idle = now - r->at_ns;
	if (idle > 1000000000000ULL) // 1000 s: full anyway, and no overflow
		idle = 1000000000000ULL;
	__s64 add = (__s64)(idle * user_calls_per_sec / 1000000000ULL);
	if (add > 0) {
		__s64 t = r->tokens + add;
		r->tokens = t < (__s64)user_calls_burst ? t : (__s64)user_calls_burst;
		r->at_ns = now;
	}
	// Every call takes a token, dropped ones too, down to one burst of
	// debt: a user calling in a loop stays heavy for as long as it does.
	// Atomic: calls of one user on other CPUs take from the same bucket.
	__s64 left = r->tokens;
	if (left > -(__s64)user_calls_burst)
		__sync_fetch_and_add(&r->tokens, -1);
	// Past half of the ring, only users with more than half their burst
	// left get in: the light ones.
	if (left <= (__s64)(user_calls_burst / 2) &&
	    bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 2) {
		stat_inc(&stats, STAT_RATE_LIMITED);
		return 1;
	}
	return 0;
}

// skip reports a call not to trace: the agent's own (it never loads the
// library, but a test binary that does must not trace itself), and a
// user's over its ration.
static __always_inline int skip(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (exclude_tgid != 0 && tgid == exclude_tgid) {
		stat_inc(&stats, STAT_SKIPPED_SELF);
		return 1;
	}
	return over_rate();
}

static __always_inline void header(struct event_header *h, __u32 kind)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	h->kind = kind;
	h->tgid = bpf_get_current_pid_tgid() >> 32;
	h->start_boottime_ns = BPF_CORE_READ(task, group_leader, start_boottime);
}

// slurmscope_kernel_launch(u64 correlation_id, u64 name_id, u32 device, u32 flags)
SEC("uprobe")
int kernel_launch(struct pt_regs *ctx)
{
	if (skip())
		return 0;
	struct launch_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_inc(&stats, STAT_LOST_RINGBUF);
		return 0;
	}
	header(&e->hdr, EVENT_LAUNCH);
	e->correlation_id = PT_REGS_PARM1(ctx);
	e->name_id = PT_REGS_PARM2(ctx);
	e->device = (__u32)PT_REGS_PARM3(ctx);
	e->flags = (__u32)PT_REGS_PARM4(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	e->tid = (__u32)pid_tgid;
	long err = 0;
	struct unwind_stack *st = stack_native(ctx, e->hdr.tgid, e->hdr.start_boottime_ns, &err);

	e->stack_end = UNWIND_END_STACK;
	e->setup = stack_setup(st, 0);
	if (st && st->len > 0) {
		__u32 n = st->len > MAX_STACK_DEPTH ? MAX_STACK_DEPTH : st->len;

		__builtin_memcpy(e->stack, st->ips, sizeof(e->stack));
		e->stack_bytes = (__s32)(n * sizeof(__u64));
		e->stack_end = st->end;
	} else {
		e->stack_bytes = err < 0 ? (__s32)err : -EFAULT;
		stat_inc(&stats, STAT_STACK_ERRORS);
	}
	struct interp_stack *in = stack_interp_frames((void *)bpf_get_current_task(), pid_tgid, e->hdr.start_boottime_ns);

	e->setup |= stack_setup(0, in) & STACK_SETUP_INTERP;
	e->interp.len = 0;
	e->interp.status = INTERP_STATUS_NONE;
	e->interp.flags = 0;
	e->interp.kind = 0;
	// Too large for an inlined copy; in is a map value, kernel memory.
	if (in && in->len > 0 && bpf_probe_read_kernel(&e->interp, sizeof(e->interp), in) != 0)
		e->interp.len = 0;
#if defined(__TARGET_ARCH_x86)
	if (bpf_probe_read_user(&e->return_address, sizeof(e->return_address), (void *)PT_REGS_SP(ctx)) != 0)
		e->return_address = 0;
#else
	e->return_address = PT_REGS_RET(ctx);
#endif
	stat_inc(&stats, STAT_LAUNCHES);
	bpf_ringbuf_submit(e, submit_flags());
	return 0;
}

// slurmscope_kernel_records(const struct slurmscope_kernel_record *recs, u32 n)
SEC("uprobe")
int kernel_records(struct pt_regs *ctx)
{
	const void *recs = (const void *)PT_REGS_PARM1(ctx);
	__u32 n = (__u32)PT_REGS_PARM2(ctx);

	// The library never passes more than RECORDS_MAX: anything else is a
	// broken or hostile caller, and the whole call is dropped.
	if (skip())
		return 0;
	if (n == 0 || n > RECORDS_MAX) {
		stat_inc(&stats, STAT_BAD_ARGS);
		return 0;
	}
	struct records_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_inc(&stats, STAT_LOST_RINGBUF);
		return 0;
	}
	header(&e->hdr, EVENT_RECORDS);
	e->n = n;
	e->pad = 0;
	// One bounded copy of exactly n records; the verifier sees size <= sizeof(recs).
	__u64 size = (__u64)n * sizeof(struct kernel_record);
	barrier_var(size);
	if (size > sizeof(e->recs) ||
	    bpf_probe_read_user(e->recs, size, recs) != 0) {
		stat_inc(&stats, STAT_READ_ERRORS);
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	stat_inc(&stats, STAT_RECORD_BATCHES);
	bpf_ringbuf_submit(e, submit_flags());
	return 0;
}

// slurmscope_kernel_name(u64 name_id, const char *name, u32 len)
SEC("uprobe")
int kernel_name(struct pt_regs *ctx)
{
	__u64 id = PT_REGS_PARM1(ctx);
	const void *name = (const void *)PT_REGS_PARM2(ctx);
	__u32 len = (__u32)PT_REGS_PARM3(ctx);

	if (skip())
		return 0;
	if (len == 0) {
		stat_inc(&stats, STAT_BAD_ARGS);
		return 0;
	}
	struct name_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_inc(&stats, STAT_LOST_RINGBUF);
		return 0;
	}
	header(&e->hdr, EVENT_NAME);
	// 64-bit and clamped after a barrier: otherwise clang may hand the
	// helper the unclamped (or not zero-extended) register.
	__u64 copy = len;
	if (copy > NAME_MAX)
		copy = NAME_MAX;
	barrier_var(copy);
	e->name_id = id;
	e->len = len;
	e->copied = (__u32)copy;
	if (copy > NAME_MAX || bpf_probe_read_user(e->name, copy, name) != 0) {
		stat_inc(&stats, STAT_READ_ERRORS);
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	stat_inc(&stats, STAT_NAMES);
	bpf_ringbuf_submit(e, submit_flags());
	return 0;
}

// slurmscope_trace_state(u32 state, u32 reason): optional (libraries built
// before it lack it), attached where the library has it.
SEC("uprobe")
int trace_state(struct pt_regs *ctx)
{
	if (skip())
		return 0;
	struct state_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_inc(&stats, STAT_LOST_RINGBUF);
		return 0;
	}
	header(&e->hdr, EVENT_STATE);
	e->ktime_ns = bpf_ktime_get_ns();
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->state = (__u32)PT_REGS_PARM1(ctx);
	e->reason = (__u32)PT_REGS_PARM2(ctx);
	e->pad = 0;
	stat_inc(&stats, STAT_STATES);
	bpf_ringbuf_submit(e, submit_flags());
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
