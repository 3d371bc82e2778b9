// Package stackwalk is the user-stack capture that every probe shares: the
// CPU sampler (agent/cpu) and the GPU launch marker (agent/gputrace) both
// take a thread's stack with ../bpf/include/stack.h, and one Walker feeds
// the maps that code reads:
//
//   - native frames: agent/unwind's .eh_frame / .debug_frame tables, one
//     Loader for the agent, frame pointers where a file has no table
//     (--unwind=fp: frame pointers everywhere, through bpf_get_stack);
//   - interpreter frames: each interpreter of agent/interp (agent/python)
//     fills the capture's process table for its processes and names the
//     raw frames a probe captured (Resolve), which a source puts in
//     source.Sample.Interp for the daemon to splice in.
//
// A probe's Go half asks Prepare for the constants and the shared maps its
// program is loaded with.
//
// # Which processes get tables
//
// The lifecycle (lifecycle.go, no I/O) decides; the Walker reads and
// loads. A process is loaded (tables built and pointed at, interpreters
// asked) when it is profiled (Options.Profiled: in a job, or any with
// --all-processes) and one of these happens:
//
//   - a probe samples it while it has no tables or no interpreter entry
//     (new, or just exec'd) and announces it on stack_events, at most once
//     a second for each;
//   - the daemon's rescan of /proc finds it (AttachProcess);
//   - its walks meet code in no loaded mapping (a library dlopened since,
//     a JIT's new region; unwind.Loader.UnknownFrames): it is loaded again,
//     with a backoff.
//
// A forked child runs its parent's image: the sched_process_fork hook
// points it at its parent's tables and interpreter entry from its first
// instruction, so short-lived workers are unwound and get interpreter
// frames before user space has looked at them. A process that exits loses
// its tables at once; its interpreter state is kept until the daemon
// forgets it (or Options.ExitGrace), so that its last samples still
// resolve. agent_process_setup_seconds times how long after its start
// each process was set up.
//
// Everything read from a process or its files goes through agent/procfs
// (procfs.Mapped: maps, and each mapped file by procfs's one opener) and
// process_vm_readv, bounded by the unwinder's and the interpreters' caps.
package stackwalk
