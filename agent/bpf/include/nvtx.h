// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The NVTX ranges open on the sampled thread, captured beside its native
// and interpreter frames (stack.h) as root frames of its struct
// interp_stack. NVTX is no interpreter: a C, C++ or Python thread can have
// ranges open, so the capture reads them for every process, interpreter or
// not.
//
// The injection library (gpuinject/nvtx.c) keeps each thread's open ranges
// in a fixed struct in the job's memory (gpuinject/slurmscope_nvtx.h, ABI
// version 1) and announces its address with the marker
// slurmscope_nvtx_thread(addr, tid); agent/nvtx's uprobe on it writes
// nvtx_threads, keyed by the caller's tgid (the kernel's) and the tid it
// names. At a sample, nvtx_frames looks up the current (tgid, tid), reads
// the head of the struct with one bounded bpf_probe_read_user, and keeps it
// only if magic, version, caps and the struct's own tid match (structs are
// pooled and reused by later threads). It appends up to INTERP_ROOT_FRAMES
// range ids, outermost first (start/end ranges, then push/pop ranges), as
// frames whose check is NVTX_ROOT_TAG; deeper ranges are cut and flagged
// (INTERP_STACK_ROOT_TRUNCATED). User space names the ids (agent/nvtx)
// from the names the library announces.
//
// Whatever a process writes there or registers is its own: the key's tgid
// and the start time guard come from the kernel, the struct is only ever
// read for a thread of the process that registered it, and an id is only
// a number that user space names from that process's own announcements.

#ifndef SLURMSCOPE_NVTX_H
#define SLURMSCOPE_NVTX_H

#ifndef BPF_MAP_TYPE_LRU_HASH
#define BPF_MAP_TYPE_LRU_HASH 9
#endif

// slurmscope_nvtx.h, ABI version 1.
#define NVTX_MAGIC 0x564e5353U
#define NVTX_VERSION 1
#define NVTX_STACK_CAP 32
#define NVTX_STARTED_CAP 8

// interp_frame.check of a root frame that is an NVTX range ("NVTX");
// its addr is the range id, its data 0.
#define NVTX_ROOT_TAG 0x5854564eULL

// Set by the loader (agent/stackwalk, from agent/nvtx): 1 reads the ranges.
volatile const __u32 stack_nvtx = 0;

struct nvtx_thread_key {
	__u32 tgid; // the registering process, from the kernel
	__u32 tid;  // the thread it named: looked up only for that tgid's own samples
};

struct nvtx_thread_val {
	__u64 addr;           // the thread's struct slurmscope_nvtx_thread, in the process's memory
	__u64 start_boottime; // the process's leader's start time: guards pid reuse
};

// Least recently used entries go first: an entry a flood of registrations
// pushed out comes back with the library's re-announcement (every second,
// 256 threads of a process), and the uprobe bounds each process's rate.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nvtx_thread_key);
	__type(value, struct nvtx_thread_val);
} nvtx_threads SEC(".maps");

// The head of struct slurmscope_nvtx_thread that a sample needs: the
// header, started[] and the outermost INTERP_ROOT_FRAMES entries of
// stack[] (216 of its 344 bytes), and the reader's own count.
struct nvtx_head {
	__u32 magic;
	__u16 version;
	__u16 stack_cap;
	__u32 tid;
	__u32 depth;
	__u16 started_cap;
	__u16 reserved0;
	__u32 reserved1;
	__u64 started[NVTX_STARTED_CAP];
	__u64 stack[INTERP_ROOT_FRAMES];
	__u32 seen; // not read: nvtx_frames' count of ranges met
	__u32 pad;
};

// What is read of the struct: all of nvtx_head before seen.
struct slurmscope_nvtx_head {
	__u8 b[24 + 8 * NVTX_STARTED_CAP + 8 * INTERP_ROOT_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UNWIND_SLOTS); // per kind of program, as unwind.h's
	__type(key, __u32);
	__type(value, struct nvtx_head);
} nvtx_scratch SEC(".maps");

// Outcomes of the reads at samples; read by agent/nvtx.
enum nvtx_stat {
	NVTX_STAT_READ = 0,  // a registered thread's struct read and valid
	NVTX_STAT_READ_FAILED, // unreadable at the registered address
	NVTX_STAT_INVALID,   // magic, version or caps wrong
	NVTX_STAT_OTHER_TID, // the struct belongs to another thread (reused or forged)
	NVTX_STAT_TRUNCATED, // more ranges open than INTERP_ROOT_FRAMES kept
	NVTX_STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NVTX_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} nvtx_stats SEC(".maps");

// nvtx_add appends range id (0: none) after base interpreter frames. The
// count of ranges met so far lives in the scratch map value (h->seen), not
// in a register: the verifier does not track map memory, so the paths of
// "zero or not" and "room or not" meet again in one state at each step,
// where a count in a register would double them at every one (2^24 paths
// over the 24 entries, past the instruction limit).
static __always_inline void nvtx_add(struct interp_stack *out, struct nvtx_head *h, __u32 base, __u64 id)
{
	if (!id)
		return;
	__u32 k = *(volatile __u32 *)&h->seen;

	*(volatile __u32 *)&h->seen = k + 1;
	if (k >= INTERP_ROOT_FRAMES)
		return;
	__u32 i = base + k;

	if (i >= INTERP_STACK_FRAMES)
		return;
	out->frames[i].addr = id;
	out->frames[i].check = NVTX_ROOT_TAG;
	out->frames[i].data = 0;
}

// nvtx_frames appends the current thread's open ranges to out (whose
// interpreter frames are filled). start is its process's start time.
static __always_inline void nvtx_frames(__u64 pid_tgid, __u64 start, struct interp_stack *out)
{
	struct nvtx_thread_key key = { .tgid = pid_tgid >> 32, .tid = (__u32)pid_tgid };
	struct nvtx_thread_val *v = bpf_map_lookup_elem(&nvtx_threads, &key);

	if (!v || v->start_boottime != start)
		return;
	__u32 slot = UNWIND_SLOT;
	struct nvtx_head *h = bpf_map_lookup_elem(&nvtx_scratch, &slot);

	if (!h)
		return;
	if (bpf_probe_read_user(h, sizeof(struct slurmscope_nvtx_head), (void *)v->addr)) {
		stat_inc(&nvtx_stats, NVTX_STAT_READ_FAILED);
		return;
	}
	if (h->magic != NVTX_MAGIC || h->version != NVTX_VERSION || h->stack_cap != NVTX_STACK_CAP ||
	    h->started_cap != NVTX_STARTED_CAP) {
		stat_inc(&nvtx_stats, NVTX_STAT_INVALID);
		return;
	}
	if (h->tid != key.tid) {
		stat_inc(&nvtx_stats, NVTX_STAT_OTHER_TID);
		return;
	}
	stat_inc(&nvtx_stats, NVTX_STAT_READ);
	__u32 base = out->len;

	if (base > INTERP_MAX_FRAMES) // never: a walk fills at most that many
		return;
	*(volatile __u32 *)&h->seen = 0;
	// Root-most first: the start/end ranges, in slot order...
	for (__u32 i = 0; i < NVTX_STARTED_CAP; i++)
		nvtx_add(out, h, base, h->started[i]);
	// ...then the push/pop ranges, outermost first, zeros (ranges closed
	// under another domain's) skipped. The library stores depth after
	// the entry: a sample sees a consistent prefix.
	__u32 depth = h->depth;
	__u32 stored = depth < NVTX_STACK_CAP ? depth : NVTX_STACK_CAP;

	for (__u32 i = 0; i < INTERP_ROOT_FRAMES; i++) {
		if (i >= stored)
			break;
		nvtx_add(out, h, base, h->stack[i]);
	}
	__u32 n = *(volatile __u32 *)&h->seen;
	// Entries beyond the head, or pushed past the library's cap, are not
	// shown; whether those beyond the head are open (not closed zeros) is
	// not read, so a deep stack is flagged as cut.
	__u32 cut = n > INTERP_ROOT_FRAMES || stored > INTERP_ROOT_FRAMES || depth > NVTX_STACK_CAP;

	if (n > INTERP_ROOT_FRAMES)
		n = INTERP_ROOT_FRAMES;
	if (cut)
		stat_inc(&nvtx_stats, NVTX_STAT_TRUNCATED);
	if (!n)
		return;
	out->len = base + n;
	out->flags |= (n << INTERP_STACK_ROOT_SHIFT) | (cut ? INTERP_STACK_ROOT_TRUNCATED : 0);
}

#endif // SLURMSCOPE_NVTX_H
