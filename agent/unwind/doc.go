// Package unwind unwinds user stacks without frame pointers, in BPF, from
// unwind tables built in user space: one unwinder for every probe that
// takes a user stack (the CPU sampler in agent/cpu, the GPU launch marker
// in agent/gputrace).
//
// # Pieces
//
//   - cfi (agent/unwind/cfi) turns a file's .eh_frame / .debug_frame into
//     8-byte rows: pc -> CFA rule and rbp rule.
//   - ../bpf/include/unwind.h is the BPF unwinder, included by each program
//     through stack.h (the user-stack capture that agent/stackwalk feeds):
//     it takes the user registers (from the context, or the task's saved
//     registers when the sample hit kernel mode) and walks up to 127 frames
//     with bpf_loop, from table rows, or by frame pointer where a file has
//     no usable table (Go binaries, JIT code in anonymous memory, code
//     built without unwind tables), ending each walk with a counted reason.
//   - Loader builds a table per file identity (device, inode, size, mtime),
//     shared by every process that maps the file, loads it into BPF maps,
//     points the process's mappings at it (an LPM trie keyed by pid and
//     address) and unloads it when no loaded process maps it any more.
//     Table memory is bounded by Options.MaxTableBytes, evicted by bytes,
//     least recently used first.
//
// # Using it
//
// agent/stackwalk owns the one Loader of the agent and decides when a
// process is loaded; a probe's program is loaded with its maps:
//
//	l, err := unwind.NewLoader(unwind.Options{Maps: procfs.Mapped{FS: fs}, Opener: procfs.Mapped{FS: fs}})
//	repl, err := l.Maps().Replace(spec) // add to CollectionOptions.MapReplacements
//	changed, err := l.SyncProcess(pid, startTicks) // a new process, or its mappings changed
//	l.RemoveProcess(pid)                // it exited
//	l.UnknownFrames()                   // processes whose walks met code mapped since
//	l.Stats(); l.Counters()             // gauges and counters for /metrics
//
// startTicks is field 22 of /proc/<pid>/stat; the BPF side checks it
// against the sampled task's start time, so a reused pid never gets
// another process's tables (its stacks fall back to frame pointers until it
// is synced). SyncProcess reads and parses files outside the loader's lock
// and may take a second for a large process (tens of files, libLLVM-sized
// ones included): call it off the sampling path. A process not synced yet
// is unwound by frame pointers (Counters.ProcessUnknown), except a forked
// child, which the sched_process_fork hook of agent/stackwalk points at its
// parent's mappings (unwind_proc.alias_tgid); frames in code mapped after
// the last sync are unwound by frame pointers too, and counted per process
// (UnknownFrames): the signal to sync again.
//
// MapsReader and FileOpener are the two narrow interfaces to /proc, which
// agent/procfs satisfies (procfs.Mapped: its maps parser, and its opener of
// files a job controls: no links followed, regular files owned by the
// process's uid or root, sizes capped).
//
// The interpreter frames of a sample (agent/interp) are walked beside the
// native ones by stack.h; the daemon replaces the native frames of an
// interpreter's eval loop, in order from the leaf, by the frames each was
// running. The unwinder keeps every native frame, in order, with its
// address, for that splice.
//
// # Kernels and architectures
//
// Linux 5.17 or later (bpf_loop). x86-64 only; arm64 is planned in
// agent/bpf/include/unwind.h and package cfi (link-register return
// addresses, pointer authentication) but not built.
package unwind
