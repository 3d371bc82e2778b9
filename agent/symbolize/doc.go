// Package symbolize turns raw stack addresses collected by the agent's
// probes (the CPU sampler, the GPU launch marker) into function names on
// the node, before profiles leave it.
//
// Sources, in lookup order for a user address:
//   - the process's executable mappings from <proc-root>/<pid>/maps, each
//     resolved to an ELF file (read through map_files or the process's root
//     so that containers and deleted executables work);
//   - the Go pclntab of that file when it has one (stripped binaries too);
//   - the ELF .symtab, then .dynsym;
//   - the JIT perf map <proc-root>/<pid>/root/tmp/perf-<nspid>.map for
//     addresses in anonymous or unknown memory.
//
// Kernel addresses are resolved through kallsyms.
//
// Every file above is read through agent/procfs: maps and status by its
// parsers, and the mapped files and perf maps, which the job controls, by
// procfs's Open only (no links followed, regular files of a bounded size,
// owned by the process's user or root).
//
// # Hostile files
//
// A job writes its files, and so the sizes in them: every size and count
// (ELF section sizes, symbol counts, pclntab function counts, perf map and
// maps lengths) is checked against the file's real size and hard caps
// before anything is read (agent/elfcheck, the one check of every ELF
// file a job names); a file over a cap is left unsymbolised and counted
// (too_large). Tables are streamed, not held, and
// what is kept is charged to the job's share of the memory budget
// (agent/budget) as it is read, so a file that does not fit the share
// stops costing memory when it runs out of it (over_budget). The bytes read
// of a job's files are charged to its read allowance (work_limit), so a
// file replaced between two lookups cannot make every lookup a re-read.
// A job's file I/O runs under procfs's Guard: a file system that does not
// answer (FUSE, a hung NFS mount) holds its caller for at most the guard's
// timeout, once, and then refuses that job's further I/O until it answers
// (stalled_io). Every reason is counted in Stats and in
// slurmscope_agent_symbolize_errors_total.
//
// # Return addresses
//
// Callers pass stacks exactly as the sampler collected them: addrs[0] is the
// sampled instruction pointer (the leaf) and every later entry is a return
// address, which points after its call instruction. The symbolizer looks up
// addr-1 for every entry but the first so that a call at the very end of a
// function is not attributed to the next one. Frame.Address always carries the
// raw address that was passed in.
//
// # Unknown frames
//
// Lookups never fail as a whole: an address that cannot be resolved yields one
// Frame with an empty Function, its Module set when the mapping is known, and
// a counted error kind in Stats.
//
// # Caching and locking
//
// Parsed files are cached by file identity (device, inode, size, mtime),
// never by build id (which a job can copy), shared by every process that
// maps them, and evicted by the memory budget, least recently used by
// bytes. A root-owned file is the system's and is charged to the budget's
// shared owner; any other to the job that made it be read. Per-process
// mapping tables are cached per procfs.ID and re-read (at most once a
// second) when an address falls outside every known mapping. Nothing is
// re-read per sample.
//
// A Symbolizer is safe for concurrent use. Its own lock guards only its
// maps and counters and is never held during I/O or parsing: each process
// has a lock of its own, held while its files are read, and a file needed
// by several processes at once is parsed once while the others wait for
// that parse (not for a lock).
package symbolize
