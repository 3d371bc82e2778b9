// Package unwind unwinds user stacks without frame pointers, in BPF, from
// unwind tables built in user space: one unwinder for every probe that
// takes a user stack (the CPU sampler in agent/cpu, the GPU launch marker
// in agent/gputrace), and the place where CPython frames are spliced in.
//
// # Pieces
//
//   - cfi (agent/unwind/cfi) turns a file's .eh_frame / .debug_frame into
//     8-byte rows: pc -> CFA rule and rbp rule.
//   - bpf/unwind.h is the BPF unwinder, included by each program: it takes
//     the user registers (from the context, or the task's saved registers
//     when the sample hit kernel mode) and walks up to 127 frames with
//     bpf_loop, from table rows, or by frame pointer where a file has no
//     usable table (Go binaries, JIT code in anonymous memory, code built
//     without unwind tables), ending each walk with a counted reason.
//   - Loader builds a table per file identity (device, inode, size, mtime),
//     shared by every process that maps the file, loads it into BPF maps,
//     points the process's mappings at it (an LPM trie keyed by pid and
//     address) and unloads it when no loaded process maps it any more.
//     Table memory is bounded by Options.MaxTableBytes, evicted by bytes,
//     least recently used first.
//
// # Phase B: wiring it into a probe
//
// A BPF program includes "../unwind/bpf/unwind.h" (it needs
// __TARGET_ARCH_x86: bpf2go -target amd64) and calls, for the current task:
//
//	struct unwind_regs regs;
//	if (unwind_user_regs(ctx, &regs) == 0) {
//		struct unwind_stack *st = unwind_user(&regs, tgid, leader_start_boottime_ns);
//		// st->ips[0..st->len): the sampled pc, then return addresses
//		// st->end: enum unwind_end; st->python: 0, or the Python walker's key
//	}
//
// In Go, one Loader per agent owns the maps; every program that includes
// the header is loaded with them:
//
//	l, err := unwind.NewLoader(unwind.Options{Maps: procfsMaps, Opener: procfsOpener})
//	repl, err := l.Maps().Replace(spec) // add to CollectionOptions.MapReplacements
//	l.SyncProcess(pid, startTicks)      // a new process, or its mappings changed
//	l.RemoveProcess(pid)                // it exited
//	l.Stats(); l.Counters()             // gauges and counters for /metrics
//
// startTicks is field 22 of /proc/<pid>/stat; the BPF side checks it
// against the sampled task's start time, so a reused pid never gets
// another process's tables (its stacks fall back to frame pointers until it
// is synced). SyncProcess reads and parses files outside the loader's lock
// and may take a second for a large process (tens of files, libLLVM-sized
// ones included): call it off the sampling path. A process not synced yet
// is unwound by frame pointers, as today (Counters.ProcessUnknown), and
// frames in code mapped after the last sync are too
// (Counters.FramesUnknownMapping): that counter going up is the signal to
// sync again.
//
// MapsReader and FileOpener are the two narrow interfaces to /proc:
// ProcFS implements both for now; agent/procfs's opener (no links
// followed, regular files owned by the process's uid or root, sizes
// capped) replaces its OpenMapping.
//
// # The Python walker (issue 13)
//
// The walker is a BPF function of its own, called by the probe after
// unwind_user with the same struct unwind_regs and the current task: it
// reads the thread's CPython frame chain and stores the frames (code
// object, instruction offset) in its own map, putting their key in
// st->python. User space then replaces the native frames of the
// interpreter's eval loop in st->ips (_PyEval_EvalFrameDefault), in order
// from the leaf, by the Python frames each was running. The unwinder keeps
// every native frame, in order, with its address, for that splice.
//
// # Kernels and architectures
//
// Linux 5.17 or later (bpf_loop). x86-64 only; arm64 is planned in
// bpf/unwind.h and package cfi (link-register return addresses, pointer
// authentication) but not built.
package unwind
