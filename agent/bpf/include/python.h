// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The CPython frame walk, shared by every probe that captures a stack (the
// CPU sampler, the GPU launch marker), through stack.h. The maps below are
// placeholders: agent/stackwalk creates them once and hands them to every
// program that includes this header (cilium/ebpf MapReplacements), so that
// one user-space tracker fills py_procs for all of them.
//
// Include it after common.h (or <bpf/bpf_helpers.h> and
// <bpf/bpf_core_read.h> with the __u8 .. __u64 types defined). It needs no pt_regs and no target
// architecture: the thread pointer comes from task_struct through CO-RE,
// whichever of the x86-64 and arm64 fields the running kernel has.
//
// # Interface
//
//	__u32 py_walk(void *task, __u64 pid_tgid, __u64 start_boottime_ns,
//	              struct py_stack *out);
//
// task is bpf_get_current_task(), pid_tgid bpf_get_current_pid_tgid(), and
// start_boottime_ns the thread-group leader's task->start_boottime (which the
// caller reads anyway for its own key). It fills *out with the Python frames
// of the sampled thread, innermost first, and returns out->status. out must
// point into a map value (a per-CPU scratch array): it is 1 KiB and more.
// Each frame is the code object's address, the raw instruction offset and
// flags; user space (agent/python) turns these into functions, files and
// lines. Where the process is not a known CPython process the walk costs one
// hash lookup and returns PY_STATUS_NOT_PYTHON, after announcing the process
// on py_events at most once a second, so that user space can look at it.
//
// # Which thread state
//
// Each sample reads its own thread's PyThreadState, never the GIL holder's:
// the interpreter's list of thread states is walked for the one whose
// thread_id (pthread_self, on 3.9 and 3.10; the thread pointer on x86-64
// glibc and musl) or native_thread_id (gettid in the thread's own pid
// namespace, on 3.11+) is the sampled thread's. The answer is cached per
// thread in py_threads and checked again on every hit (one 8-byte read), so a
// freed and reused thread state is not trusted; a thread with no thread state
// (a native thread of a Python process) is cached as such, checked against
// the list's head (where a new thread's state appears) on every sample and
// walked again after PY_RETRY_NS. Thread-local storage (_Py_tss_tstate) is not used: it exists
// only on 3.12+ and is a local symbol that stripped builds (Debian's) drop.
// A thread that released the GIL keeps its thread state and its frames, so
// it keeps its Python stack.
//
// # Frames
//
// 3.9 and 3.10 chain PyFrameObjects from tstate->frame; 3.11 and 3.12 chain
// _PyInterpreterFrames from tstate->cframe->current_frame, 3.13 from
// tstate->current_frame. Each frame is recorded as it is: the code object,
// the instruction offset (f_lasti, or the instruction pointer minus the code
// object's address), and the raw owner and is_entry bytes. User space works
// out which frames are shims (3.12+: FRAME_OWNED_BY_CSTACK) and which is the
// first frame of each C call of the eval loop (every frame on 3.9/3.10,
// is_entry on 3.11, the frame just inside a shim on 3.12+), see Decode in
// agent/python. Keeping that out of BPF keeps the loop body straight-line.
//
// At most PY_MAX_FRAMES frames (shims included) are kept, the innermost ones; a deeper stack
// sets PY_STACK_TRUNCATED. Every read is bounded; a read that fails ends the
// walk with the frames so far and PY_STATUS_FRAME_READ.

#ifndef SLURMSCOPE_PYTHON_BPF_H
#define SLURMSCOPE_PYTHON_BPF_H

// Mirrored in Go (agent/python: MaxFrames and the rest).
#define PY_MAX_FRAMES 64
// Thread states visited per thread-list walk, over all interpreters.
#define PY_MAX_THREADS 128
// Bytes of a frame copied in one read (user space checks each layout fits).
#define PY_FRAME_READ 128
// How long a thread found to have no thread state is believed while the
// thread list's head stays the same (see py_thread_state).
#define PY_RETRY_NS 1000000000ULL
// How often a process that is not (yet) known is announced again.
#define PY_ANNOUNCE_NS 1000000000ULL
#define PY_NO_OFFSET 0xffff

#ifndef BPF_MAP_TYPE_HASH
#define BPF_MAP_TYPE_HASH 1
#endif
#ifndef BPF_MAP_TYPE_PERCPU_ARRAY
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#endif
#ifndef BPF_MAP_TYPE_LRU_HASH
#define BPF_MAP_TYPE_LRU_HASH 9
#endif
#ifndef BPF_MAP_TYPE_RINGBUF
#define BPF_MAP_TYPE_RINGBUF 27
#endif

// Result of a walk; mirrored in Go (Status).
enum py_status {
	PY_STATUS_OK = 0,          // frames (possibly none: the thread runs no Python now)
	PY_STATUS_NOT_PYTHON = 1,  // no (current) entry in py_procs
	PY_STATUS_NO_TSTATE = 2,   // the thread has no thread state: a native thread
	PY_STATUS_THREAD_READ = 3, // reading the runtime or the thread list failed
	PY_STATUS_THREADS_MAX = 4, // thread not found in the first PY_MAX_THREADS states
	PY_STATUS_FRAME_READ = 5,  // a frame read failed: the frames before it are kept
	PY_STATUS_MAX,
};

// py_proc.flags
#define PY_PROC_NATIVE_TID (1U << 0) // match native_thread_id to the pid-namespace tid

// py_stack.flags
#define PY_STACK_TRUNCATED (1U << 0) // deeper than PY_MAX_FRAMES: outer frames cut

// Written by user space for each CPython process, keyed by tgid; mirrored in
// Go (ProcInfo). Offsets are bytes into each structure; frame_* are relative
// to frame_read_off, from where frame_read_len bytes of each frame are read.
struct py_proc {
	__u64 start_boottime; // thread-group leader's start time: guards pid reuse
	__u64 mm;             // task->mm when found: changes on exec
	__u64 runtime;        // address of _PyRuntime
	__u32 flags;          // PY_PROC_*
	__u16 runtime_interp_head;
	__u16 code_check;     // co_filename, with co_name right after it
	__u16 interp_threads_head;
	__u16 tstate_next;
	__u16 tstate_frame;          // frame, cframe or current_frame
	__u16 cframe_current_frame;  // PY_NO_OFFSET: tstate_frame is the frame
	__u16 tstate_id;             // thread_id or native_thread_id, see flags
	__u16 frame_read_off;
	__u16 frame_read_len;        // <= PY_FRAME_READ
	__u16 frame_back;
	__u16 frame_code;
	__u16 frame_lasti;
	__u16 frame_is_entry; // any offset < frame_read_len where absent
	__u16 frame_owner;    // any offset < frame_read_len where absent
	__u64 lasti_base;     // ~0: lasti is a pointer into the code object; 0: an int
};

struct py_frame {
	__u64 code;    // PyCodeObject * (f_code; f_executable on 3.13)
	__u64 check;   // co_filename ^ rotl(co_name, 1) at sample time, 0 if unreadable
	__s32 lasti;   // f_lasti (3.9, 3.10); instruction pointer - code (3.11+)
	__u8 owner;    // the frame's owner byte (3.11+), else junk
	__u8 is_entry; // is_entry (3.11), else junk
	__u16 pad;
};

struct py_stack {
	__u32 len;    // frames filled
	__u32 status; // enum py_status
	__u32 flags;  // PY_STACK_*
	__u32 pad;
	struct py_frame frames[PY_MAX_FRAMES];
};

struct py_thread_key {
	__u32 tgid;
	__u32 tid;
};

struct py_thread_val {
	__u64 tstate;         // 0: none found, until retry_ns
	__u64 start_boottime; // of the process: an entry of a dead one is ignored
	__u64 retry_ns;
	__u64 head;           // head of the thread list when none was found
};

// Sent to user space for a process not (or no longer) in py_procs, and for
// a forked child that py_fork set up from its parent's entry; mirrored in Go
// (Event).
struct py_event {
	__u32 tgid;
	__u32 parent_tgid; // py_fork: the parent whose entry the child has; else 0
	__u64 start_boottime;
	__u64 mm;
	__u64 parent_start_boottime;
	__u32 flags; // PY_EVENT_*: who asked (one event a second serves both)
	__u32 pad;
};

// py_event.flags
#define PY_EVENT_PYTHON (1U << 0) // no (current) py_procs entry
#define PY_EVENT_NATIVE (1U << 1) // the unwinder has no tables for it (stack.h)

struct py_seen_val {
	__u64 start_boottime;
	__u64 mm;
	__u64 next_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct py_thread_key);
	__type(value, struct py_thread_val);
} py_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct py_seen_val);
} py_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} py_events SEC(".maps");

struct py_frame_buf {
	__u8 b[PY_FRAME_READ];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UNWIND_SLOTS); // per kind of program: unwind.h
	__type(key, __u32);
	__type(value, struct py_frame_buf);
} py_frame_scratch SEC(".maps");

// CO-RE views, flavoured (___py) so that they never clash with the
// includer's own task_struct; relocation ignores the suffix. Only one of
// fsbase (x86-64) and uw.tp_value (arm64) exists on a given kernel, and
// bpf_core_field_exists picks it at load time.
struct py_arm64_uw___py {
	unsigned long tp_value;
};

struct thread_struct___py {
	unsigned long fsbase;
	struct py_arm64_uw___py uw;
} __attribute__((preserve_access_index));

struct upid___py {
	int nr;
} __attribute__((preserve_access_index));

struct pid___py {
	unsigned int level;
	struct upid___py numbers[1];
} __attribute__((preserve_access_index));

struct task_struct___py {
	struct thread_struct___py thread;
	struct pid___py *thread_pid;
	void *mm;
} __attribute__((preserve_access_index));

static __always_inline int py_read(void *dst, __u32 size, __u64 addr)
{
	return bpf_probe_read_user(dst, size, (const void *)addr);
}

static __always_inline __u64 py_read_ptr(__u64 addr, int *err)
{
	__u64 v = 0;

	if (py_read(&v, sizeof(v), addr))
		*err = 1;
	return v;
}

// The thread's identity as the interpreter records it.
static __always_inline __u64 py_thread_ident(struct py_proc *p, struct task_struct___py *task)
{
	if (p->flags & PY_PROC_NATIVE_TID) {
		// gettid() in the thread's own pid namespace: numbers[level].nr.
		struct pid___py *pid = BPF_CORE_READ(task, thread_pid);
		unsigned int level = BPF_CORE_READ(pid, level);
		int nr = 0;

		if (!pid || level > 32)
			return 0;
		bpf_probe_read_kernel(&nr, sizeof(nr),
				      (void *)pid + bpf_core_field_offset(struct pid___py, numbers) +
					      (__u64)level * bpf_core_type_size(struct upid___py));
		return (__u64)(__u32)nr;
	}
	if (bpf_core_field_exists(task->thread.fsbase))
		return BPF_CORE_READ(task, thread.fsbase);
	// arm64: user space does not set up 3.9/3.10 processes there (pthread_self
	// is not the thread pointer), so this is never compared.
	return 0;
}

// py_thread_state finds the sampled thread's PyThreadState. The loop body
// has no branch that continues on two paths, so that the verifier's work
// grows with PY_MAX_THREADS, not exponentially (bpf_loop would avoid the
// question but needs Linux 5.17; Ubuntu 22.04's 5.15 is common on GPU nodes).
static __always_inline __u32 py_thread_state(struct py_proc *p, struct task_struct___py *task, __u32 tgid, __u32 tid,
					     __u64 start, __u64 *out)
{
	struct py_thread_key key = { .tgid = tgid, .tid = tid };
	struct py_thread_val *cached = bpf_map_lookup_elem(&py_threads, &key);
	__u64 want = py_thread_ident(p, task);
	__u64 now = bpf_ktime_get_ns();
	int err = 0;

	if (want == 0)
		return PY_STATUS_NO_TSTATE;
	if (cached && cached->start_boottime == start) {
		if (cached->tstate) {
			__u64 id = py_read_ptr(cached->tstate + p->tstate_id, &err);

			if (!err && id == want) {
				*out = cached->tstate;
				return PY_STATUS_OK;
			}
			err = 0;
		} else if (now < cached->retry_ns) {
			// None last time. A new thread state goes at the head of the
			// list, and its thread sets its id itself, a little later:
			// look at the head only, unless the list changed otherwise.
			__u64 in = py_read_ptr(p->runtime + p->runtime_interp_head, &err);
			__u64 head = err || !in ? 0 : py_read_ptr(in + p->interp_threads_head, &err);
			__u64 id = err || !head ? 0 : py_read_ptr(head + p->tstate_id, &err);

			if (!err && head && id == want) {
				struct py_thread_val val = { .tstate = head, .start_boottime = start };

				bpf_map_update_elem(&py_threads, &key, &val, 0);
				*out = head;
				return PY_STATUS_OK;
			}
			if (!err && head == cached->head)
				return PY_STATUS_NO_TSTATE;
		}
		err = 0;
	}

	// Only the main interpreter's threads: subinterpreters are rare, and a
	// thread of one gets native frames only.
	__u32 status = PY_STATUS_NO_TSTATE;
	__u64 found = 0;
	__u64 interp = py_read_ptr(p->runtime + p->runtime_interp_head, &err);
	__u64 ts = 0;

	if (!err && interp)
		ts = py_read_ptr(interp + p->interp_threads_head, &err);
	__u64 head = ts;

	for (int i = 0; i < PY_MAX_THREADS; i++) {
		if (err || !ts)
			break;
		__u64 id = py_read_ptr(ts + p->tstate_id, &err);

		if (!err && id == want) {
			found = ts;
			break;
		}
		ts = py_read_ptr(ts + p->tstate_next, &err);
	}
	if (err)
		status = PY_STATUS_THREAD_READ;
	else if (!found && ts)
		status = PY_STATUS_THREADS_MAX;

	struct py_thread_val val = { .tstate = found, .start_boottime = start, .head = head };

	if (!found)
		val.retry_ns = now + PY_RETRY_NS;
	bpf_map_update_elem(&py_threads, &key, &val, 0);
	if (!found)
		return status;
	*out = found;
	return PY_STATUS_OK;
}

static __always_inline void py_announce(__u32 tgid, __u64 start, __u64 mm, __u32 flags)
{
	struct py_seen_val *seen = bpf_map_lookup_elem(&py_seen, &tgid);
	__u64 now = bpf_ktime_get_ns();

	if (seen && seen->start_boottime == start && seen->mm == mm && now < seen->next_ns)
		return;
	struct py_seen_val val = { .start_boottime = start, .mm = mm, .next_ns = now + PY_ANNOUNCE_NS };

	bpf_map_update_elem(&py_seen, &tgid, &val, 0);
	struct py_event ev = { .tgid = tgid, .start_boottime = start, .mm = mm, .flags = flags };

	bpf_ringbuf_output(&py_events, &ev, sizeof(ev), 0);
}

// py_fork gives a forked child (a new thread group) its parent's py_procs
// entry at once: a fork runs the same image with the same interpreter at the
// same addresses, and without this the child's samples until user space has
// looked at it (a PyTorch DataLoader's or a multiprocessing pool's workers
// may not live much longer) have native stacks only. The child's thread
// states are found by the walk as in any process; user space is told
// (py_event with parent_tgid) so that it resolves the child's frames.
// parent is the forking task, child the new one (sched_process_fork).
static __always_inline void py_fork(void *parent_ptr, void *child_ptr, __u32 parent_tgid, __u64 parent_start,
				    __u32 child_tgid, __u64 child_start)
{
	struct task_struct___py *parent = parent_ptr, *child = child_ptr;
	struct py_proc *p = bpf_map_lookup_elem(&py_procs, &parent_tgid);

	if (!p || p->start_boottime != parent_start || p->mm != (__u64)BPF_CORE_READ(parent, mm))
		return;
	struct py_proc c = *p;

	c.start_boottime = child_start;
	c.mm = (__u64)BPF_CORE_READ(child, mm);
	if (!c.mm || bpf_map_update_elem(&py_procs, &child_tgid, &c, 0))
		return;
	struct py_event ev = { .tgid = child_tgid, .parent_tgid = parent_tgid, .start_boottime = child_start,
			       .mm = c.mm, .parent_start_boottime = parent_start };

	bpf_ringbuf_output(&py_events, &ev, sizeof(ev), 0);
}

static __always_inline __u32 py_walk(void *task_ptr, __u64 pid_tgid, __u64 start, struct py_stack *out)
{
	struct task_struct___py *task = task_ptr;
	__u32 tgid = pid_tgid >> 32;
	__u32 tid = (__u32)pid_tgid;
	__u64 mm = (__u64)BPF_CORE_READ(task, mm);

	out->len = 0;
	out->flags = 0;
	out->status = PY_STATUS_OK;
	// No mm: the task is exiting (exit_mm ran), or a kernel thread. It is
	// not announced: its process is not another one.
	if (!mm)
		return out->status = PY_STATUS_NOT_PYTHON;
	struct py_proc *p = bpf_map_lookup_elem(&py_procs, &tgid);

	if (!p || p->start_boottime != start || p->mm != mm) {
		py_announce(tgid, start, mm, PY_EVENT_PYTHON);
		return out->status = PY_STATUS_NOT_PYTHON;
	}

	__u64 tstate = 0;
	__u32 status = py_thread_state(p, task, tgid, tid, start, &tstate);

	if (status != PY_STATUS_OK)
		return out->status = status;

	int err = 0;
	__u64 frame = py_read_ptr(tstate + p->tstate_frame, &err);

	if (!err && frame && p->cframe_current_frame != PY_NO_OFFSET)
		frame = py_read_ptr(frame + p->cframe_current_frame, &err);
	if (err)
		return out->status = PY_STATUS_FRAME_READ;

	__u32 slot = UNWIND_SLOT;
	struct py_frame_buf *buf = bpf_map_lookup_elem(&py_frame_scratch, &slot);

	if (!buf)
		return out->status = PY_STATUS_FRAME_READ;

	__u32 len = p->frame_read_len;
	__u32 n = 0;

	if (len > PY_FRAME_READ)
		len = PY_FRAME_READ;
	// Every frame is recorded as it is, shims included: the meaning of the
	// owner and is_entry bytes, and of lasti, depends on the version and is
	// worked out in user space. This keeps the loop body free of branches
	// that continue on two paths (see py_thread_state).
	for (int i = 0; i < PY_MAX_FRAMES; i++) {
		if (!frame)
			break;
		if (py_read(buf->b, len, frame + p->frame_read_off)) {
			out->status = PY_STATUS_FRAME_READ;
			break;
		}
		struct py_frame *f = &out->frames[i & (PY_MAX_FRAMES - 1)];
		__u64 code = *(__u64 *)&buf->b[p->frame_code & (PY_FRAME_READ - 8)];
		__u64 lasti = *(__u64 *)&buf->b[p->frame_lasti & (PY_FRAME_READ - 8)];

		f->code = code;
		// Two pointers that tell this code object from another one that
		// later takes its address: user space resolves frames after the
		// fact, and checks that the code object it reads is this one.
		// (A failed read leaves zeros, which user space trusts for nothing.)
		__u64 names[2] = {};

		py_read(names, sizeof(names), code + p->code_check);
		f->check = names[0] ^ (names[1] << 1 | names[1] >> 63);
		// lasti_base is ~0 where the frame holds an instruction pointer
		// (3.11+) and 0 where it holds f_lasti, an int (3.9, 3.10: the low
		// half of the 8 bytes read, little endian).
		f->lasti = (__s32)(lasti - (code & p->lasti_base));
		f->owner = buf->b[p->frame_owner & (PY_FRAME_READ - 1)];
		f->is_entry = buf->b[p->frame_is_entry & (PY_FRAME_READ - 1)];
		frame = *(__u64 *)&buf->b[p->frame_back & (PY_FRAME_READ - 8)];
		n = i + 1;
	}
	out->len = n;
	if (frame && out->status == PY_STATUS_OK)
		out->flags |= PY_STACK_TRUNCATED;
	return out->status;
}

#endif // SLURMSCOPE_PYTHON_BPF_H
