// Package stackwalk is the user-stack capture that every probe shares: the
// CPU sampler (agent/cpu) and the GPU launch marker (agent/gputrace) both
// take a thread's stack with ../bpf/include/stack.h, and one Walker feeds
// the maps that code reads:
//
//   - native frames: agent/unwind's .eh_frame / .debug_frame tables, one
//     Loader for the agent, frame pointers where a file has no table
//     (--unwind=fp: frame pointers everywhere, through bpf_get_stack);
//   - CPython frames: agent/python's Tracker fills py_procs, and resolves
//     the frames a probe captured into functions, files and lines
//     (--python-frames).
//
// A probe's Go half asks Prepare for the constants and the shared maps its
// program is loaded with; its source hands the raw Python frames of each
// sample to Python, right after draining, and puts the result in
// source.Sample.Python, where the daemon splices them into the native
// frames (one place for every source).
//
// # Which processes get tables
//
// A process is loaded (tables built and pointed at, interpreter found) when
// it is profiled (Options.Profiled: in a job, or any with --all-processes)
// and one of these happens:
//
//   - a probe samples it while it has no tables (new, or just exec'd: the
//     sched_process_exec hook drops its entry) and announces it on
//     py_events, at most once a second;
//   - the daemon's rescan of /proc finds it (AttachProcess);
//   - its walks meet code in no loaded mapping (a library dlopened since,
//     a JIT's new region; unwind.Loader.UnknownFrames): it is loaded again,
//     with a backoff.
//
// A forked child runs its parent's image: the sched_process_fork hook points
// it at its parent's tables and interpreter from its first instruction, so
// short-lived workers are unwound and get Python frames before user space
// has looked at them. A process that exits is unloaded at once; its Python
// state is kept until the daemon forgets it (or Options.ExitGrace), so that
// its last samples still resolve.
//
// Everything read from a process or its files goes through agent/procfs
// (procfs.Mapped: maps, and each mapped file by procfs's one opener) and
// process_vm_readv, bounded by the unwinder's and the tracker's byte caps.
package stackwalk
