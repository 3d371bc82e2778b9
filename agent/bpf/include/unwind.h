// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The user-stack unwinder of slurmscope, for every BPF program that takes a
// user stack (the CPU sampler's perf_event program, the GPU marker uprobes).
// It walks the native frames of the current thread from the unwind tables
// that agent/unwind builds from each mapped file's .eh_frame / .debug_frame
// and loads into the maps below, and from frame pointers where a file has
// no usable table (Go binaries, JIT code, files built without unwind
// tables). Dual licensed like its includers: bpf_probe_read_user and
// bpf_task_pt_regs are GPL-only helpers.
//
// Kernels: 5.17 or later (bpf_loop; bpf_task_pt_regs is 5.15, inner maps
// of different sizes 5.10). x86-64 only for now: on other targets only the
// types below are defined (stack.h then takes frame pointers), see the end
// of the file for arm64.
//
// # Interface
//
// The includer includes common.h (or defines the __u8..__u64 typedefs and
// includes <bpf/bpf_helpers.h>) before this file, and is compiled for
// __TARGET_ARCH_x86 (bpf2go -target amd64). Most programs do not call it
// directly but through stack.h, which also walks interpreter frames. Then:
//
//	struct unwind_regs regs;
//	if (unwind_user_regs(ctx, &regs) == 0) {               // 1
//		struct unwind_stack *st = unwind_user(&regs, tgid, start_boottime_ns); // 2
//		// st->ips[0 .. st->len) innermost first, st->end says why it stopped,
//		// st->flags & UNWIND_STACK_LOADED whether the process's tables applied
//	}
//
// 1. unwind_user_regs takes the user registers at the sample: from ctx (a
//    perf_event or uprobe program's context) when the program interrupted
//    user mode, else from bpf_task_pt_regs of the current task (a sample in
//    a system call or a fault: the registers saved at kernel entry). It
//    returns -1 for a task without user registers (kernel threads).
// 2. unwind_user walks at most UNWIND_MAX_FRAMES frames and returns a
//    per-CPU buffer, valid until the program returns (copy or hash it, as
//    the sampler does). ips[0] is the sampled pc; every later entry is a
//    return address (symbolise addr-1), except an entry right after a
//    signal frame, which is the interrupted pc itself.
//
// The interpreter walks (interpreters.h) walk the same thread's
// interpreter frames separately (stack.h calls both). User space then
// replaces each native frame of an interpreter's eval loop, in order from
// the leaf, by the frames it was running: native frames keep their order
// and addresses here for that reason, and unwinding never skips one.
//
// A forked child runs the image its parent ran: until user space loads
// the child's own mappings, the sched_process_fork program of
// agent/stackwalk points its unwind_procs entry at the parent's
// (alias_tgid), and the child is unwound from the parent's tables.
//
// Tables, mappings and processes live in maps that agent/unwind creates
// once and hands to every program that includes this file (cilium/ebpf
// MapReplacements), so the CPU sampler and the GPU probe share one copy.
// The definitions here are placeholders for that: their types, key and
// value sizes and flags must match agent/unwind's MapSpecs.

#ifndef SLURMSCOPE_UNWIND_H
#define SLURMSCOPE_UNWIND_H

// UAPI values (include/uapi/linux/bpf.h).
#define UNWIND_BPF_MAP_TYPE_HASH 1
#define UNWIND_BPF_MAP_TYPE_ARRAY 2
#define UNWIND_BPF_MAP_TYPE_PERCPU_ARRAY 6
#define UNWIND_BPF_MAP_TYPE_LPM_TRIE 11
#define UNWIND_BPF_MAP_TYPE_ARRAY_OF_MAPS 12
#define UNWIND_BPF_F_NO_PREALLOC (1U << 0)
#define UNWIND_BPF_F_INNER_MAP (1U << 12)

// Default kernel.perf_event_max_stack, as in agent/cpu.
#define UNWIND_MAX_FRAMES 127
// A table is indexed by pages of 1 << UNWIND_PAGE_SHIFT bytes of text; a
// page holds at most that many rows (one per byte), so the binary search
// within one converges in UNWIND_SEARCH_STEPS steps. Small pages keep a
// search within a cache line or two (code has 10 to 20 rows per KiB) for an
// index of under 1% of the text's size.
#define UNWIND_PAGE_SHIFT 9
#define UNWIND_SEARCH_STEPS 10
// Stack memory is copied UNWIND_WINDOW bytes at a time into the walk's
// scratch (a power of two): every bpf_probe_read_user is a helper call that
// costs far more than the bytes it copies (0.7 us each on the VM the cost
// figures come from, where a walk read each return address and saved rbp
// by itself), and a caller's frame is almost always just above its
// callee's, so one copy serves several frames.
#define UNWIND_WINDOW 1024
// Per-CPU scratch buffers (the walk's, stack.h's and the interpreters') have one
// slot per kind of program: a uprobe program (the GPU launch marker) runs
// with interrupts on, and a perf_event sample that lands in it walks the
// same thread on the same CPU; on one slot it overwrote the uprobe walk's
// state halfway (launch stacks jumping to _start under load). A program
// that includes this file sets UNWIND_SLOT before it: 0 for the perf_event
// sampler, 1 for uprobes, 2 for the sched_switch tracepoint (agent/offcpu),
// which a uprobe program preempted on its CPU runs inside.
#define UNWIND_SLOTS 3
#ifndef UNWIND_SLOT
#define UNWIND_SLOT 0
#endif

// Row kinds (agent/unwind/cfi Kind) and rbp rules (cfi RBPRule): ABI with Go.
enum unwind_kind {
	UNWIND_KIND_GAP = 0,
	UNWIND_KIND_RSP,
	UNWIND_KIND_RBP,
	UNWIND_KIND_PLT,
	UNWIND_KIND_DEREF_RBP,
	UNWIND_KIND_SIGNAL,
	UNWIND_KIND_FRAME_POINTER,
	UNWIND_KIND_END,
	UNWIND_KIND_UNSUPPORTED,
};

enum unwind_rbp_rule {
	UNWIND_RBP_SAME = 0,
	UNWIND_RBP_AT_CFA,
	UNWIND_RBP_AT_RBP,
	UNWIND_RBP_UNDEFINED,
};

#define UNWIND_ROW_KIND_MASK 0x0f
#define UNWIND_ROW_RBP_SHIFT 4
#define UNWIND_ROW_RBP_MASK 0x30
#define UNWIND_ROW_CFA_SCALED 0x40

// One row, 8 bytes (cfi.Row): from pc to the next row's pc, relative to the
// table's base.
struct unwind_row {
	__u32 pc;
	__s16 cfa;  // CFA offset, bytes (x8 with UNWIND_ROW_CFA_SCALED)
	__u8 flags; // kind | rbp rule << 4 | UNWIND_ROW_CFA_SCALED
	__s8 rbp;   // rbp offset / 8; UNWIND_KIND_PLT: the threshold
};

// A table's inner map is an array of 8-byte elements: [0] the header, then
// the page index, pages + 1 __u32 entries two to an element, then the rows.
// Entry p (p < pages) is the row covering page p's first byte; entry pages
// is the last row. Rows index[p] .. index[p + 1] are the only ones that can
// cover a pc in page p; a pc beyond the last page is the last row's (a gap
// row).
struct unwind_table_header {
	__u32 pages;
	__u32 rows;
};

// What a mapping of a process is, for the unwinder.
enum unwind_mapping_kind {
	UNWIND_MAPPING_TABLE = 1,         // unwind with table `table`
	UNWIND_MAPPING_FRAME_POINTER = 2, // no usable table: frame pointers
};

// LPM trie key: the process and an address, both big endian so that the
// trie's bit order is numeric order. prefixlen counts the 32 tgid bits and
// the address bits that matter.
struct unwind_mapping_key {
	__u32 prefixlen;
	__u32 tgid_be;
	__u64 addr_be;
};

struct unwind_mapping {
	__u64 start, end; // the whole mapping: consecutive frames in it skip the trie
	__u64 bias;       // table pc = address - bias (load bias plus table base)
	__u32 table;      // index into unwind_tables
	__u32 kind;       // enum unwind_mapping_kind
	__u32 pages;      // the table's pages (its header's), to skip reading it
	__u32 pad;
};

// Processes whose mappings are loaded. start_ticks (field 22 of
// /proc/<pid>/stat: the leader's start_boottime in USER_HZ ticks, which is
// 100 on every Linux architecture) tells a reused pid from the process
// that was loaded: a mismatch unwinds by frame pointers. A forked child not
// loaded yet names its parent in alias_tgid (alias_start_ticks: the
// parent's start_ticks), whose mappings it shares until it maps anything
// else. unknown counts the frames of this process that fell in no loaded
// mapping (code mapped since it was loaded): user space loads it again when
// that grows. forks counts, in a loaded process's entry, the live forked
// descendants that alias it (stack.h's fork hook bounds it). group is the
// process's job group (as interp_proc's), which a forked child's entry
// copies from its origin: the fork hook bounds a job's forks too.
struct unwind_proc {
	__u64 start_ticks;
	__u32 alias_tgid; // 0: the process's own mappings
	__u32 unknown;    // added to atomically by every walk
	__u64 alias_start_ticks;
	__u32 forks; // added to atomically by the fork and exit hooks
	__u32 group; // user space's id of the process's job; 0: none
};

// NSEC_PER_SEC / USER_HZ: how the kernel turns start_boottime into ticks
// for /proc (nsec_to_clock_t).
#define UNWIND_NSEC_PER_TICK 10000000ULL

// Why a walk ended, one counter each in unwind_stats.
enum unwind_end {
	UNWIND_END_STACK = 0,     // the outermost frame (return address 0 or undefined)
	UNWIND_END_FRAME_LIMIT,   // UNWIND_MAX_FRAMES frames and more to go
	UNWIND_END_NO_ROW,        // a pc no row describes, where frame pointers are not assumed
	UNWIND_END_UNSUPPORTED,   // a rule the unwinder does not implement
	UNWIND_END_READ_ERROR,    // stack memory not readable (or paged out)
	UNWIND_END_BAD_CFA,       // a CFA that does not move up the stack, or rbp unknown
	UNWIND_END_LOOP_LIMIT,    // the row search did not converge (a corrupt table)
	UNWIND_END_NO_REGS,       // no user registers (never returned by unwind_user)
	UNWIND_END_MAX,
};

// Counters in unwind_stats; mirrored in Go (agent/unwind Stat*).
enum unwind_stat {
	// UNWIND_STAT_END + enum unwind_end: walks by how they ended.
	UNWIND_STAT_END = 0,
	UNWIND_STAT_WALKS = UNWIND_END_MAX, // walks started
	UNWIND_STAT_FRAMES_TABLE,           // frames unwound from a table row
	UNWIND_STAT_FRAMES_FP,              // frames unwound by frame pointer: the file has no table, or a gap
	UNWIND_STAT_FRAMES_UNKNOWN,         // frames by frame pointer: no mapping known (JIT code mapped since, or garbage)
	UNWIND_STAT_FRAMES_EVICTED,         // frames by frame pointer: the file's table is not loaded (budget)
	UNWIND_STAT_FRAMES_SIGNAL,          // signal frames crossed
	UNWIND_STAT_PROC_UNKNOWN,           // walks of processes not loaded (or a reused pid): frame pointers only
	UNWIND_STAT_KERNEL_REGS,            // walks whose user registers came from the task (sample in kernel mode)
	UNWIND_STAT_CACHE_HITS,             // frames whose row came from the per-CPU row cache
	UNWIND_STAT_FORKED,                 // walks of forked children through their parent's mappings
	UNWIND_STAT_MAX,
};

struct unwind_regs {
	__u64 pc;
	__u64 sp;
	__u64 bp;
};

// unwind_stack.flags
#define UNWIND_STACK_LOADED (1U << 0) // the process's tables applied (else frame pointers only)
#define UNWIND_STACK_NEW_UNKNOWN (1U << 1) // the first walk since the process's load to meet code in no loaded mapping

struct unwind_stack {
	__u64 ips[UNWIND_MAX_FRAMES]; // innermost first
	__u32 len;                    // frames in ips
	__u32 end;                    // enum unwind_end
	__u32 flags;                  // UNWIND_STACK_*
	__u32 pad;
};

// The walk's state, beside its output in one per-CPU buffer per kind of
// program (UNWIND_SLOT): a perf_event sample can interrupt a uprobe
// program on its CPU (on a preemptible kernel, a uprobe preempted by
// another task's uprobe still shares its slot).
struct unwind_scratch {
	struct unwind_stack stack;
	__u64 pc, sp, bp;
	__u32 tgid;
	__u8 bp_valid; // rbp holds the caller's value (not lost to a rule)
	__u8 exact;    // pc is not a return address: look it up as is
	__u8 table_ok; // the process is loaded: tables apply
	__u8 pad;
	__u32 gen;               // unwind_gen at the walk's start
	__u32 unknown;           // frames in no loaded mapping, this walk
	struct unwind_mapping m; // the last frame's mapping (m.end == 0: none)
	__u64 win_base;          // user address of win[0]
	__u64 win_len;           // valid bytes in win: 0 or UNWIND_WINDOW
	__u8 win[UNWIND_WINDOW]; // a copy of the stack from win_base
};

// The per-CPU row cache: the rows of recently unwound (process, pc)
// pairs. A program's stacks repeat from sample to sample above the leaf
// (main, the loop that calls the hot function), and a hit costs one cache
// line where a miss reads the trie, the table's page index and its rows,
// each cold by the next sample. Entries are valid only for the generation
// of the mappings they were made under: agent/unwind bumps unwind_gen
// whenever it changes any process's mappings.
#define UNWIND_CACHE_BITS 10
struct unwind_cache_entry {
	__u64 pc;
	__u32 tgid;
	__u32 gen;
	struct unwind_row row;
};

#if defined(__TARGET_ARCH_x86)

// The user-space image of the kernel's struct pt_regs on x86-64 (UAPI
// <asm/ptrace.h> layout, which perf_event and uprobe contexts both are).
struct unwind_x86_regs {
	unsigned long r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8;
	unsigned long rax, rcx, rdx, rsi, rdi, orig_rax, rip, cs, eflags, rsp, ss;
};

// Offsets in the kernel's rt_sigframe at __restore_rt: rsp points at the
// struct ucontext (pretcode was popped by the handler's ret), whose
// uc_mcontext (struct sigcontext) starts at 40. x86-64 kernel ABI.
#define UNWIND_SIGCTX_RBP (40 + 80)
#define UNWIND_SIGCTX_RSP (40 + 120)
#define UNWIND_SIGCTX_RIP (40 + 128)

struct unwind_table_map {
	__uint(type, UNWIND_BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); // each table's own size (BPF_F_INNER_MAP)
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, UNWIND_BPF_F_INNER_MAP);
};

struct {
	__uint(type, UNWIND_BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__array(values, struct unwind_table_map);
} unwind_tables SEC(".maps");

struct {
	__uint(type, UNWIND_BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__type(key, struct unwind_mapping_key);
	__type(value, struct unwind_mapping);
	__uint(map_flags, UNWIND_BPF_F_NO_PREALLOC);
} unwind_mappings SEC(".maps");

struct {
	__uint(type, UNWIND_BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

struct {
	__uint(type, UNWIND_BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UNWIND_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} unwind_stats SEC(".maps");

struct {
	__uint(type, UNWIND_BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UNWIND_SLOTS);
	__type(key, __u32);
	__type(value, struct unwind_scratch);
} unwind_scratch_map SEC(".maps");

struct {
	__uint(type, UNWIND_BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << UNWIND_CACHE_BITS);
	__type(key, __u32);
	__type(value, struct unwind_cache_entry);
} unwind_cache SEC(".maps");

struct {
	__uint(type, UNWIND_BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} unwind_gen SEC(".maps");

static __always_inline void unwind_stat(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&unwind_stats, &idx);

	if (v)
		*v += 1; // per-CPU slot; a sample interrupting a uprobe may lose one count
}

// unwind_task_regs takes the current task's user registers as they were
// saved at kernel entry (bpf_task_pt_regs): for a program whose context
// holds no registers (a tracepoint), or one that interrupted the kernel.
static __always_inline int unwind_task_regs(struct unwind_regs *regs)
{
	// rip, cs, eflags, rsp: what is read of pt_regs besides rbp (the
	// whole struct would take a third of the BPF stack).
	unsigned long u[4];
	void *task = bpf_get_current_task_btf();
	void *pt = (void *)bpf_task_pt_regs(task);

	if (!pt || bpf_probe_read_kernel(u, sizeof(u), pt + __builtin_offsetof(struct unwind_x86_regs, rip)) != 0 ||
	    (u[1] & 3) != 3 ||
	    bpf_probe_read_kernel(&regs->bp, sizeof(regs->bp), pt + __builtin_offsetof(struct unwind_x86_regs, rbp)) != 0)
		return -1; // a kernel thread, or no user frame saved
	regs->pc = u[0];
	regs->sp = u[3];
	unwind_stat(UNWIND_STAT_KERNEL_REGS);
	return regs->pc ? 0 : -1;
}

// unwind_user_regs: see the interface above.
static __always_inline int unwind_user_regs(void *ctx, struct unwind_regs *regs)
{
	struct unwind_x86_regs *r = ctx;

	// CPL 3 in cs: the program interrupted user mode (always so in a uprobe).
	if ((r->cs & 3) != 3)
		return unwind_task_regs(regs);
	regs->pc = r->rip;
	regs->sp = r->rsp;
	regs->bp = r->rbp;
	return regs->pc ? 0 : -1;
}

// unwind_find_row returns the row covering table pc off in the table map
// tab of the given pages, or 0 with *end set.
static __always_inline struct unwind_row *unwind_find_row(void *tab, __u32 pages, __u64 off, __u32 *end)
{
	__u64 page = off >> UNWIND_PAGE_SHIFT;

	if (page > pages)
		page = pages; // the last entry: the last row
	__u32 p = page, e = 1 + p / 2;
	__u32 *ix = bpf_map_lookup_elem(tab, &e);

	if (!ix)
		return 0;
	__u32 lo = ix[p & 1], hi = lo;

	if (p < pages) {
		if (p & 1) {
			e++;
			ix = bpf_map_lookup_elem(tab, &e);
			if (!ix)
				return 0;
			hi = ix[0];
		} else {
			hi = ix[1];
		}
	}
	__u32 first = 1 + (pages + 2) / 2;
	struct unwind_row *row;

	for (int i = 0; i < UNWIND_SEARCH_STEPS; i++) {
		if (lo >= hi)
			break;
		__u32 mid = lo + (hi - lo + 1) / 2;
		__u32 idx = first + mid;

		row = bpf_map_lookup_elem(tab, &idx);
		if (!row)
			return 0;
		if (row->pc <= off)
			lo = mid;
		else
			hi = mid - 1;
	}
	if (lo < hi) {
		*end = UNWIND_END_LOOP_LIMIT;
		return 0;
	}
	__u32 idx = first + lo;

	row = bpf_map_lookup_elem(tab, &idx);
	if (!row)
		return 0;
	// Row 0 is at pc 0 (agent/unwind puts a gap row there), so a pc
	// before a page's first row cannot happen in a table it built.
	if (row->pc > off) {
		*end = UNWIND_END_NO_ROW;
		return 0;
	}
	return row;
}

// unwind_read8 reads the 8 bytes at user address addr, from the stack
// window where it holds them, else by refilling the window from addr
// (callers lie above: stacks grow down), else, where that copy faults (the
// window would run past the end of the stack's mapping), by itself.
// Returns 0 on success, like bpf_probe_read_user. The thread is stopped in
// the probe while it is walked, so the copy is what a read would see; a
// job that rewrites its stack from another thread spoils only its own
// stack, as it could with single reads.
static __always_inline long unwind_read8(struct unwind_scratch *s, __u64 addr, __u64 *out)
{
	__u64 off = addr - s->win_base;

	if (s->win_len && off <= UNWIND_WINDOW - 8 && !(off & 7)) {
		*out = *(__u64 *)&s->win[off & (UNWIND_WINDOW - 8)];
		return 0;
	}
	if (!(addr & 7)) {
		if (bpf_probe_read_user(s->win, UNWIND_WINDOW, (void *)addr) == 0) {
			s->win_base = addr;
			s->win_len = UNWIND_WINDOW;
			*out = *(__u64 *)&s->win[0];
			return 0;
		}
		// A failed copy zeroes its destination: the old window is gone
		// too (keeping it made a read just below the end of a stack
		// mapping, a saved rbp beside the return address, read zeros).
		s->win_len = 0;
	}
	return bpf_probe_read_user(out, sizeof(*out), (void *)addr);
}

// unwind_fp unwinds one frame by frame pointer. Returns 1 to stop.
static __always_inline long unwind_fp(struct unwind_scratch *s)
{
	__u64 frame[2]; // saved rbp, return address

	if (!s->bp_valid || s->bp == 0) {
		s->stack.end = UNWIND_END_STACK;
		return 1;
	}
	// A frame below the stack pointer is not a caller's.
	if (s->bp < s->sp) {
		s->stack.end = UNWIND_END_BAD_CFA;
		return 1;
	}
	if (unwind_read8(s, s->bp, &frame[0]) != 0 || unwind_read8(s, s->bp + 8, &frame[1]) != 0) {
		s->stack.end = UNWIND_END_READ_ERROR;
		return 1;
	}
	if (frame[1] == 0) {
		s->stack.end = UNWIND_END_STACK;
		return 1;
	}
	s->sp = s->bp + 16;
	s->pc = frame[1];
	s->bp = frame[0];
	s->exact = 0;
	return 0;
}

// unwind_step is the bpf_loop callback: it records the current frame and
// moves to its caller. Returns 1 to stop.
static long unwind_step(__u32 i, void *ctx)
{
	// bpf_loop passes only stack pointers as ctx; the per-CPU lookup is
	// inlined by the verifier and costs a few instructions.
	__u32 slot = UNWIND_SLOT;
	struct unwind_scratch *s = bpf_map_lookup_elem(&unwind_scratch_map, &slot);

	if (!s)
		return 1;
	__u32 n = s->stack.len;

	if (n >= UNWIND_MAX_FRAMES) {
		s->stack.end = UNWIND_END_FRAME_LIMIT;
		return 1;
	}
	s->stack.ips[n] = s->pc;
	s->stack.len = n + 1;

	if (!s->table_ok) {
		unwind_stat(UNWIND_STAT_FRAMES_UNKNOWN);
		return unwind_fp(s);
	}

	__u64 look = s->exact ? s->pc : s->pc - 1;
	__u32 ci = (__u32)(((look ^ ((__u64)s->tgid << 40)) * 0x9e3779b97f4a7c15ULL) >> (64 - UNWIND_CACHE_BITS));
	struct unwind_cache_entry *ce = bpf_map_lookup_elem(&unwind_cache, &ci);
	struct unwind_row r;

	if (ce && ce->pc == look && ce->tgid == s->tgid && ce->gen == s->gen) {
		r = ce->row;
		unwind_stat(UNWIND_STAT_CACHE_HITS);
		goto have_row;
	}
	// Callers are often in the same file as their callee: the trie, whose
	// walk costs a cache miss per level, is asked only on a change.
	if (look < s->m.start || look >= s->m.end) {
		struct unwind_mapping_key key = {
			.prefixlen = 96,
			.tgid_be = __builtin_bswap32(s->tgid),
			.addr_be = __builtin_bswap64(look),
		};
		struct unwind_mapping *m = bpf_map_lookup_elem(&unwind_mappings, &key);

		if (!m) {
			s->m.end = 0;
			s->unknown++;
			unwind_stat(UNWIND_STAT_FRAMES_UNKNOWN);
			return unwind_fp(s);
		}
		s->m = *m;
	}
	if (s->m.kind != UNWIND_MAPPING_TABLE) {
		unwind_stat(UNWIND_STAT_FRAMES_FP);
		return unwind_fp(s);
	}
	__u32 tid = s->m.table;
	void *tab = bpf_map_lookup_elem(&unwind_tables, &tid);

	if (!tab) {
		// Evicted for the budget, or its build put off: counted as
		// unknown too, so that user space loads the process again (with
		// a backoff) and the table is built back.
		s->unknown++;
		unwind_stat(UNWIND_STAT_FRAMES_EVICTED);
		return unwind_fp(s);
	}
	__u32 end = UNWIND_END_NO_ROW;
	struct unwind_row *row = unwind_find_row(tab, s->m.pages, look - s->m.bias, &end);

	if (!row) {
		s->stack.end = end;
		return 1;
	}
	r = *row;
	if (ce) {
		ce->pc = look;
		ce->tgid = s->tgid;
		ce->gen = s->gen;
		ce->row = r;
	}
have_row:;
	__u8 flags = r.flags;
	__s64 off = r.cfa;
	__u64 cfa;

	if (flags & UNWIND_ROW_CFA_SCALED)
		off *= 8;
	switch (flags & UNWIND_ROW_KIND_MASK) {
	case UNWIND_KIND_RSP:
		cfa = s->sp + off;
		break;
	case UNWIND_KIND_RBP:
		if (!s->bp_valid) {
			s->stack.end = UNWIND_END_BAD_CFA;
			return 1;
		}
		cfa = s->bp + off;
		break;
	case UNWIND_KIND_PLT:
		// The pc itself: a PLT entry is only ever a leaf.
		cfa = s->sp + off + ((s->pc & 15) >= (__u64)r.rbp ? 8 : 0);
		break;
	case UNWIND_KIND_DEREF_RBP:
		if (!s->bp_valid || unwind_read8(s, s->bp + off, &cfa) != 0) {
			s->stack.end = s->bp_valid ? UNWIND_END_READ_ERROR : UNWIND_END_BAD_CFA;
			return 1;
		}
		break;
	case UNWIND_KIND_SIGNAL: {
		__u64 pc, sp, bp;

		if (unwind_read8(s, s->sp + UNWIND_SIGCTX_RIP, &pc) != 0 ||
		    unwind_read8(s, s->sp + UNWIND_SIGCTX_RSP, &sp) != 0 ||
		    unwind_read8(s, s->sp + UNWIND_SIGCTX_RBP, &bp) != 0) {
			s->stack.end = UNWIND_END_READ_ERROR;
			return 1;
		}
		unwind_stat(UNWIND_STAT_FRAMES_SIGNAL);
		if (pc == 0) {
			s->stack.end = UNWIND_END_STACK;
			return 1;
		}
		// The handler may have run on an alternate stack: the interrupted
		// sp can be anywhere, so it is not held to moving up.
		s->pc = pc;
		s->sp = sp;
		s->bp = bp;
		s->bp_valid = 1;
		s->exact = 1;
		return 0;
	}
	case UNWIND_KIND_FRAME_POINTER:
		unwind_stat(UNWIND_STAT_FRAMES_FP);
		return unwind_fp(s);
	case UNWIND_KIND_END:
		s->stack.end = UNWIND_END_STACK;
		return 1;
	case UNWIND_KIND_GAP:
		s->stack.end = UNWIND_END_NO_ROW;
		return 1;
	default:
		s->stack.end = UNWIND_END_UNSUPPORTED;
		return 1;
	}
	// Every caller's frame is above its callee's: this also bounds a
	// hostile table to moving up the stack.
	if (cfa <= s->sp) {
		s->stack.end = UNWIND_END_BAD_CFA;
		return 1;
	}
	__u64 ra;

	if (unwind_read8(s, cfa - 8, &ra) != 0) {
		s->stack.end = UNWIND_END_READ_ERROR;
		return 1;
	}
	switch ((flags & UNWIND_ROW_RBP_MASK) >> UNWIND_ROW_RBP_SHIFT) {
	case UNWIND_RBP_AT_CFA:
		if (unwind_read8(s, cfa + (__s64)r.rbp * 8, &s->bp) != 0)
			s->bp_valid = 0;
		break;
	case UNWIND_RBP_AT_RBP:
		if (!s->bp_valid || unwind_read8(s, s->bp + (__s64)r.rbp * 8, &s->bp) != 0)
			s->bp_valid = 0;
		break;
	case UNWIND_RBP_UNDEFINED:
		s->bp_valid = 0;
		break;
	}
	unwind_stat(UNWIND_STAT_FRAMES_TABLE);
	if (ra == 0) {
		s->stack.end = UNWIND_END_STACK;
		return 1;
	}
	s->pc = ra;
	s->sp = cfa;
	s->exact = 0;
	return 0;
}

// unwind_user: see the interface above. start_boottime_ns is the
// thread-group leader's (task->group_leader->start_boottime).
static __always_inline struct unwind_stack *unwind_user(const struct unwind_regs *regs, __u32 tgid, __u64 start_boottime_ns)
{
	__u32 slot = UNWIND_SLOT;
	struct unwind_scratch *s = bpf_map_lookup_elem(&unwind_scratch_map, &slot);

	if (!s)
		return 0; // never: an array always has its entries
	s->stack.len = 0;
	s->stack.end = UNWIND_END_FRAME_LIMIT;
	s->stack.flags = 0;
	s->stack.pad = 0;
	s->pc = regs->pc;
	s->sp = regs->sp;
	s->bp = regs->bp;
	s->tgid = tgid;
	s->bp_valid = 1;
	s->exact = 1;
	s->unknown = 0;
	s->m.start = 0;
	s->m.end = 0;
	s->win_len = 0;
	__u32 zero = 0;
	__u32 *gen = bpf_map_lookup_elem(&unwind_gen, &zero);

	s->gen = gen ? *gen : 0;
	struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &tgid);

	s->table_ok = p && p->start_ticks == start_boottime_ns / UNWIND_NSEC_PER_TICK;
	if (s->table_ok && p->alias_tgid) {
		// A forked child: its parent's mappings, while the parent is
		// the process that was loaded (not a later one with its pid).
		__u32 parent = p->alias_tgid;
		struct unwind_proc *q = bpf_map_lookup_elem(&unwind_procs, &parent);

		s->table_ok = q && q->alias_tgid == 0 && q->start_ticks == p->alias_start_ticks;
		s->tgid = parent; // the trie and the row cache are keyed by it
		if (s->table_ok)
			unwind_stat(UNWIND_STAT_FORKED);
	}
	unwind_stat(UNWIND_STAT_WALKS);
	if (!s->table_ok)
		unwind_stat(UNWIND_STAT_PROC_UNKNOWN);
	else
		s->stack.flags = UNWIND_STACK_LOADED;
	// One more iteration than frames, so that a walk with more to go after
	// the last frame ends as UNWIND_END_FRAME_LIMIT.
	bpf_loop(UNWIND_MAX_FRAMES + 1, unwind_step, &slot, 0);
	if (s->stack.end < UNWIND_END_MAX)
		unwind_stat(UNWIND_STAT_END + s->stack.end);
	// Told to user space through the process's own entry (the child's,
	// for an alias): code mapped since it was loaded.
	if (s->unknown && p) {
		// The first since its load is told to the caller, which wakes
		// user space: a process synced before its libraries were mapped
		// (just after its exec) is synced again within milliseconds, not
		// at the next poll a quarter second later. Two CPUs may both see
		// zero: a second wake-up is harmless.
		if (p->unknown == 0)
			s->stack.flags |= UNWIND_STACK_NEW_UNKNOWN;
		__sync_fetch_and_add(&p->unknown, s->unknown);
	}
	return &s->stack;
}

#endif // __TARGET_ARCH_x86

// arm64 (planned, not built): struct user_pt_regs gives pc, sp and x29;
// user mode is pstate & PSR_MODE_MASK == 0. The leaf's return address is in
// x30 (the link register) until the prologue saves it, so a row also needs
// an RA rule (in lr, or at CFA + off; the PLT threshold byte is free for
// it), the initial CFA is sp+0, x29 takes rbp's place, and return
// addresses are stripped of pointer-authentication bits (PAC mask from
// the kernel's NT_ARM_PAC_MASK, applied where the CIE says
// DW_CFA_AARCH64_negate_ra_state). There is no PLT expression or
// __restore_rt pattern to recognise: __kernel_rt_sigreturn's CFI in the
// vdso describes the sigframe with plain rules.

#endif // SLURMSCOPE_UNWIND_H
