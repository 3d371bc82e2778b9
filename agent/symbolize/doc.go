// Package symbolize turns raw stack addresses collected by the eBPF sampler
// into function names on the node, before profiles leave it.
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
// # Caching
//
// Parsed files are cached by file identity (device, inode, size, mtime), and
// deduplicated by GNU build id, in an LRU bounded by Options.MaxCachedFiles.
// Per-process mapping tables are cached per procfs.ID and re-read when
// an address falls outside every known mapping. Nothing is re-read per sample.
//
// A Symbolizer is safe for concurrent use; calls are serialised.
package symbolize
