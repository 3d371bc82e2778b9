package symbolize

// ErrorKind names a class of symbolisation failure counted in Stats.
type ErrorKind string

// Error kinds. Each failure is counted once where it is detected; a file that
// fails to open is remembered so the same failure is not counted per sample.
const (
	ErrReadMaps       ErrorKind = "read_maps"        // /proc/<pid>/maps unreadable (process gone?)
	ErrNoMapping      ErrorKind = "no_mapping"       // address outside every executable mapping
	ErrOpenFile       ErrorKind = "open_file"        // mapped file could not be opened
	ErrFileIdentity   ErrorKind = "file_identity"    // file on disk is not the one mapped (replaced)
	ErrParseELF       ErrorKind = "parse_elf"        // malformed or truncated ELF
	ErrNoSymbol       ErrorKind = "no_symbol"        // mapped, but no symbol covers the address
	ErrPerfMap        ErrorKind = "perf_map"         // perf map unreadable or malformed lines
	ErrKallsyms       ErrorKind = "kallsyms"         // kallsyms unreadable
	ErrKallsymsHidden ErrorKind = "kallsyms_hidden"  // kptr_restrict zeroed every address
	ErrKernelNoSymbol ErrorKind = "kernel_no_symbol" // kernel address below the first symbol
	ErrPanic          ErrorKind = "panic"            // a parser panicked on hostile input
)

// Stats is a snapshot of the symbolizer's counters.
type Stats struct {
	FileCacheHits   uint64 // parsed file found in the cache
	FileCacheMisses uint64 // file parsed (or failed to parse)
	ProcessLoads    uint64 // maps tables read, first time or refresh
	AddrCacheHits   uint64 // address results served from a file's result cache
	FileEvictions   uint64 // parsed files dropped by the LRU
	Errors          map[ErrorKind]uint64
	CachedFiles     int
	CachedProcesses int
}

func (s *Symbolizer) countErr(k ErrorKind) {
	s.stats.Errors[k]++
}
