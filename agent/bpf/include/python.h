// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The CPython frame walk: one interpreter of the stack capture (listed in
// interpreters.h, walked by stack.h for a process whose interp_procs entry
// is of kind INTERP_PYTHON). Its maps are placeholders, like every map of
// the capture: agent/stackwalk creates them once and hands them to every
// program that includes stack.h, so that one user-space tracker
// (agent/python) serves all of them. It needs no pt_regs and no target
// architecture: the thread pointer comes from task_struct through CO-RE,
// whichever of the x86-64 and arm64 fields the running kernel has.
//
//	void py_walk(struct interp_proc *ip, void *task, __u64 pid_tgid,
//	             __u64 start_boottime_ns, struct interp_stack *out);
//
// fills *out with the sampled thread's Python frames, innermost first. ip
// is the process's entry (its data a struct py_proc), task
// bpf_get_current_task(). Each frame is the code object's address, a check
// of it, and the raw instruction offset and frame bytes; agent/python turns
// them into functions, files and lines.
//
// # Which thread state
//
// Each sample reads its own thread's PyThreadState, never the GIL holder's:
// the interpreter's list of thread states is walked for the one whose
// thread_id (pthread_self, on 3.9 and 3.10; the thread pointer on x86-64
// glibc and musl) or native_thread_id (gettid in the thread's own pid
// namespace, on 3.11+) is the sampled thread's. The answer is cached per
// thread in py_threads and checked again on every hit (one 8-byte read), so
// a freed and reused thread state is not trusted; a thread with no thread
// state (a native thread of a Python process) is cached as such, checked
// against the list's head (where a new thread's state appears) on every
// sample and walked again after PY_RETRY_NS. Thread-local storage
// (_Py_tss_tstate) is not used: it exists only on 3.12+ and is a local
// symbol that stripped builds (Debian's) drop.
//
// # Frames
//
// 3.9 and 3.10 chain PyFrameObjects from tstate->frame; 3.11 and 3.12 chain
// _PyInterpreterFrames from tstate->cframe->current_frame, 3.13 from
// tstate->current_frame. Each frame is recorded as it is (shims too): user
// space works out which frames are shims and which began a C call of the
// eval loop (agent/python Decode), which keeps the loop body straight-line.
// At most INTERP_MAX_FRAMES frames are kept; every read is bounded, and a
// read that fails ends the walk with the frames so far.

#ifndef SLURMSCOPE_PYTHON_H
#define SLURMSCOPE_PYTHON_H

#include "interp.h"

#ifndef BPF_MAP_TYPE_PERCPU_ARRAY
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#endif
#ifndef BPF_MAP_TYPE_LRU_HASH
#define BPF_MAP_TYPE_LRU_HASH 9
#endif

// This interpreter's kind in interp_procs and interp_stack (agent/python
// registers it under the same value).
enum py_kind {
	INTERP_PYTHON = 1,
};

// Thread states visited per thread-list walk, over all interpreters.
#define PY_MAX_THREADS 128
// Bytes of a frame copied in one read (user space checks each layout fits).
#define PY_FRAME_READ 128
// How long a thread found to have no thread state is believed while the
// thread list's head stays the same (see py_thread_state).
#define PY_RETRY_NS 1000000000ULL
#define PY_NO_OFFSET 0xffff

// py_proc.flags
enum py_proc_flag {
	PY_PROC_NATIVE_TID = 1 << 0, // match native_thread_id to the pid-namespace tid
};

// interp_proc.data for a CPython process, written by agent/python. Offsets
// are bytes into each structure; frame_* are relative to frame_read_off,
// from where frame_read_len bytes of each frame are read.
struct py_proc {
	__u64 runtime; // address of _PyRuntime
	__u32 flags;   // PY_PROC_*
	__u16 runtime_interp_head;
	__u16 code_check; // co_filename, with co_name right after it
	__u16 interp_threads_head;
	__u16 tstate_next;
	__u16 tstate_frame;         // frame, cframe or current_frame
	__u16 cframe_current_frame; // PY_NO_OFFSET: tstate_frame is the frame
	__u16 tstate_id;            // thread_id or native_thread_id, see flags
	__u16 frame_read_off;
	__u16 frame_read_len; // <= PY_FRAME_READ
	__u16 frame_back;
	__u16 frame_code;
	__u16 frame_lasti;
	__u16 frame_is_entry; // any offset < frame_read_len where absent
	__u16 frame_owner;    // any offset < frame_read_len where absent
	__u64 lasti_base;     // ~0: lasti is a pointer into the code object; 0: an int
};

_Static_assert(sizeof(struct py_proc) <= INTERP_PROC_DATA, "struct py_proc must fit interp_proc.data");

struct py_thread_key {
	__u32 tgid;
	__u32 tid;
};

struct py_thread_val {
	__u64 tstate;         // 0: none found, until retry_ns
	__u64 start_boottime; // of the process: an entry of a dead one is ignored
	__u64 retry_ns;
	__u64 head; // head of the thread list when none was found
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct py_thread_key);
	__type(value, struct py_thread_val);
} py_threads SEC(".maps");

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
		return INTERP_STATUS_NO_THREAD;
	if (cached && cached->start_boottime == start) {
		if (cached->tstate) {
			__u64 id = py_read_ptr(cached->tstate + p->tstate_id, &err);

			if (!err && id == want) {
				*out = cached->tstate;
				return INTERP_STATUS_OK;
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
				return INTERP_STATUS_OK;
			}
			if (!err && head == cached->head)
				return INTERP_STATUS_NO_THREAD;
		}
		err = 0;
	}

	// Only the main interpreter's threads: subinterpreters are rare, and a
	// thread of one gets native frames only.
	__u32 status = INTERP_STATUS_NO_THREAD;
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
		status = INTERP_STATUS_THREAD_READ;
	else if (!found && ts)
		status = INTERP_STATUS_THREADS_MAX;

	struct py_thread_val val = { .tstate = found, .start_boottime = start, .head = head };

	if (!found)
		val.retry_ns = now + PY_RETRY_NS;
	bpf_map_update_elem(&py_threads, &key, &val, 0);
	if (!found)
		return status;
	*out = found;
	return INTERP_STATUS_OK;
}

static __always_inline void py_walk(struct interp_proc *ip, void *task_ptr, __u64 pid_tgid, __u64 start,
				    struct interp_stack *out)
{
	struct py_proc *p = (struct py_proc *)ip->data;
	struct task_struct___py *task = task_ptr;
	__u32 tgid = pid_tgid >> 32;
	__u32 tid = (__u32)pid_tgid;
	__u64 tstate = 0;
	__u32 status = py_thread_state(p, task, tgid, tid, start, &tstate);

	if (status != INTERP_STATUS_OK) {
		out->status = status;
		return;
	}

	int err = 0;
	__u64 frame = py_read_ptr(tstate + p->tstate_frame, &err);

	if (!err && frame && p->cframe_current_frame != PY_NO_OFFSET)
		frame = py_read_ptr(frame + p->cframe_current_frame, &err);
	if (err) {
		out->status = INTERP_STATUS_FRAME_READ;
		return;
	}

	__u32 slot = UNWIND_SLOT;
	struct py_frame_buf *buf = bpf_map_lookup_elem(&py_frame_scratch, &slot);

	if (!buf) {
		out->status = INTERP_STATUS_FRAME_READ;
		return;
	}

	__u32 len = p->frame_read_len;
	__u32 n = 0;

	if (len > PY_FRAME_READ)
		len = PY_FRAME_READ;
	// Every frame is recorded as it is, shims included: the meaning of the
	// owner and is_entry bytes, and of lasti, depends on the version and is
	// worked out in user space. This keeps the loop body free of branches
	// that continue on two paths (see py_thread_state).
	for (int i = 0; i < INTERP_MAX_FRAMES; i++) {
		if (!frame)
			break;
		if (py_read(buf->b, len, frame + p->frame_read_off)) {
			out->status = INTERP_STATUS_FRAME_READ;
			break;
		}
		struct interp_frame *f = &out->frames[i & (INTERP_MAX_FRAMES - 1)];
		__u64 code = *(__u64 *)&buf->b[p->frame_code & (PY_FRAME_READ - 8)];
		__u64 lasti = *(__u64 *)&buf->b[p->frame_lasti & (PY_FRAME_READ - 8)];

		f->addr = code;
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
		__u32 off = (__u32)(lasti - (code & p->lasti_base));
		__u64 owner = buf->b[p->frame_owner & (PY_FRAME_READ - 1)];
		__u64 is_entry = buf->b[p->frame_is_entry & (PY_FRAME_READ - 1)];

		f->data = (__u64)off | owner << 32 | is_entry << 40;
		frame = *(__u64 *)&buf->b[p->frame_back & (PY_FRAME_READ - 8)];
		n = i + 1;
	}
	out->len = n;
	if (frame && out->status == INTERP_STATUS_OK)
		out->flags |= INTERP_STACK_TRUNCATED;
}

#endif // SLURMSCOPE_PYTHON_H
