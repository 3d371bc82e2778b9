// Package nvtx shows the NVTX ranges open on a thread as frames at the
// root side of its CPU samples (the CPU sampler, off-CPU's blocked
// switches) and of the GPU kernels it launches: "[nvtx] step", or
// "[nvtx] mydomain: step" for a range of a domain, so that a flame graph
// groups time by range.
//
// NVTX is not an interpreter (a Python or a C thread can have ranges
// open): it is an annotation the stack capture takes beside the native
// and interpreter frames, for every process, through the seam
// interp.Annotator.
//
//   - The injection library (gpuinject/nvtx.c, ABI gpuinject/slurmscope_nvtx.h)
//     keeps each thread's open ranges in a fixed struct in the job's memory
//     and announces, through two exported markers, each struct's address
//     and each range name.
//   - Tracker attaches uprobes (nvtx.bpf.c) on those markers, once per
//     library file for every process, as agent/gputrace does for its own
//     markers; it is a source.ProcessAttacher the daemon tells of every
//     profiled process (with a retry of its own for a library loaded
//     late). The thread marker's probe writes the capture's nvtx_threads
//     map, (tgid from the kernel, tid) -> (address, start time); the name
//     marker's probe sends the name's bytes on a ring buffer.
//   - At every sample, stack.h (../bpf/include/nvtx.h) looks up the current
//     thread, reads the head of its struct with one bounded
//     bpf_probe_read_user, keeps it only if magic, version, caps and the
//     struct's own tid match, and appends up to 16 range ids, outermost
//     first, to the sample's interp_stack as root frames (a truncation
//     flag beyond). They travel wherever interpreter frames travel, so the
//     CPU, off-CPU and GPU sources need no NVTX code.
//   - Names (the interp.Annotator) validates each announced name (lengths
//     within the ABI's caps, the domain's 0x00 where its length says, the
//     id the FNV-1a hash of the text; printable UTF-8) and keeps it per
//     process, bounded per process (4096) and in all (32 MiB), charged to
//     the job's memory budget (kind nvtx_names). stackwalk.Walker.Resolve
//     hands it a sample's root frames; it names them from that process's
//     own names, and interp.Splice puts them at the root of the stack.
//
// Hostile input: a process controls its structs, the addresses and tids it
// registers, the names it announces and how often it calls the markers.
// The map key's tgid and the start-time guard come from the kernel, so a
// registration is only ever looked up for that process's own samples; a
// struct is read with one fixed-size copy and refused unless its tid is the
// sampled thread's; ids are numbers named only from the same process's
// validated names. What it forges therefore lands only in its own samples.
// The probes give each process a ration of calls a second (4096; a
// re-registration of a known struct is free); the nvtx_threads LRU map and
// the names' ring buffer are still shared by all processes, so many
// processes calling in a loop can push out others' entries or names for a
// while (counted), which the library's re-announcement every second brings
// back: ranges then go missing, never wrong.
//
// Limits: 16 ranges a sample (the outermost; "[nvtx] (deeper ranges not
// shown)" beyond); off-CPU samples carry ranges for blocked switches
// only, where the capture walks interpreter frames; a range whose name the
// agent has not read yet shows as "[nvtx] (range <id>)"; --nvtx-ranges=false
// turns it all off.
package nvtx
