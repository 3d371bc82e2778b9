// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// What every interpreter walk shares with the stack capture (stack.h): the
// raw frames a walk records, its outcome, and the one table of the
// processes an interpreter was set up for. An interpreter's own header
// (python.h) includes this one and defines its walk; interpreters.h lists
// them. Go mirrors: generated once, in agent/bpf (bpf2go -type).
//
// An interpreter walk records each frame as three words whose meaning is
// the interpreter's own (for CPython: the code object, a check of it, and
// the instruction offset with two bytes of frame state); user space (the
// interpreter's package, through agent/interp) turns them into functions,
// files and lines after the fact.

#ifndef SLURMSCOPE_INTERP_H
#define SLURMSCOPE_INTERP_H

// Interpreter frames kept per stack, the innermost ones.
#define INTERP_MAX_FRAMES 64
// Root frames a stack can carry after its interpreter frames: annotations
// of the thread captured beside them (nvtx.h: its open NVTX ranges), not
// an interpreter's, resolved by their own resolver in user space.
#define INTERP_ROOT_FRAMES 16
// Frames a struct interp_stack holds: what its len is bounded by.
#define INTERP_STACK_FRAMES (INTERP_MAX_FRAMES + INTERP_ROOT_FRAMES)
// Bytes of an interpreter's own per-process data in interp_procs.
#define INTERP_PROC_DATA 64

#ifndef BPF_MAP_TYPE_HASH
#define BPF_MAP_TYPE_HASH 1
#endif

// Outcome of one walk.
enum interp_status {
	INTERP_STATUS_OK = 0,          // frames (possibly none: the thread runs no interpreted code now)
	INTERP_STATUS_NONE = 1,        // no (current) entry in interp_procs: not set up
	INTERP_STATUS_NO_THREAD = 2,   // the thread has no interpreter thread state: a native thread
	INTERP_STATUS_THREAD_READ = 3, // reading the runtime or the thread list failed
	INTERP_STATUS_THREADS_MAX = 4, // thread not found among the states a walk may visit
	INTERP_STATUS_FRAME_READ = 5,  // a frame read failed: the frames before it are kept
	INTERP_STATUS_MAX,
};

// interp_stack.flags
enum interp_stack_flag {
	INTERP_STACK_TRUNCATED = 1 << 0, // deeper than INTERP_MAX_FRAMES: outer frames cut
	INTERP_STACK_ROOT_TRUNCATED = 1 << 1, // more root frames than INTERP_ROOT_FRAMES: inner ones cut
	// Bits 8-15 (INTERP_STACK_ROOT_SHIFT): how many of the len frames are
	// root frames, the last ones, outermost first; the interpreter's are
	// frames[0 .. len - that).
	INTERP_STACK_ROOT_SHIFT = 8,
};

#define INTERP_STACK_ROOT_MASK (0xffU << INTERP_STACK_ROOT_SHIFT)

struct interp_frame {
	__u64 addr;  // what the frame runs (CPython: the code object)
	__u64 check; // tells that object from a later one at the same address; 0: unreadable
	__u64 data;  // the interpreter's own (CPython: lasti, owner << 32, is_entry << 40)
};

struct interp_stack {
	__u32 len;    // frames filled: the interpreter's, then the root frames (flags)
	__u32 status; // enum interp_status
	__u32 flags;  // INTERP_STACK_*
	__u32 kind;   // the interpreter (its enum in its header); 0 with INTERP_STATUS_NONE
	struct interp_frame frames[INTERP_STACK_FRAMES];
};

// A process an interpreter was set up for, keyed by tgid; written by user
// space (agent/stackwalk, for the interpreter's package), copied to a
// forked child by stack.h.
struct interp_proc {
	__u64 start_boottime; // thread-group leader's start time: guards pid reuse
	__u64 mm;             // task->mm when found: changes on exec
	__u32 kind;           // which interpreter's walk reads data
	__u32 origin;         // a forked copy: the tgid of the set-up process it descends from; 0: set up itself
	__u32 forks;          // a set-up process: its live forked copies (stack.h bounds them)
	__u32 group;          // user space's id of the process's job, for per-job shares; 0: none
	__u8 data[INTERP_PROC_DATA]; // the interpreter's own (python.h: struct py_proc)
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768); // freed at exit (stack.h), forks bounded per process
	__type(key, __u32);
	__type(value, struct interp_proc);
} interp_procs SEC(".maps");

// CO-RE view of the task fields the capture reads beside common.h's,
// flavoured so that it never clashes with an includer's own task_struct.
struct task_struct___stack {
	void *mm;
} __attribute__((preserve_access_index));

static __always_inline __u64 interp_task_mm(void *task)
{
	return (__u64)BPF_CORE_READ((struct task_struct___stack *)task, mm);
}

// An interpreter stack new to a probe's own map, as the probe announces it
// to user space (stackstore.h); generated once in Go (agent/bpf
// InterpNewEvent).
struct interp_new_event {
	__u32 tgid;
	__u32 pad;
	__u64 start_boottime_ns;
	__u64 key;
	struct interp_stack stack;
};

#endif // SLURMSCOPE_INTERP_H
