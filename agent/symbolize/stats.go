package symbolize

// ErrorKind names a class of symbolisation failure counted in Stats.
type ErrorKind string

// Error kinds. A file's failure is counted once each time it is found (a
// file that fails to open or parse is remembered, so the same failure is
// not counted per sample; a transient one is tried again later, and
// counted again if it fails again); a frame's (no_symbol, no_mapping) per
// frame.
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
	// A job's file refused by procfs's rules (see procfs.Open).
	ErrNotRegular   ErrorKind = "not_regular" // a FIFO, device, directory...
	ErrOwnerRefused ErrorKind = "owner"       // owned by neither the process's user nor root
	ErrLink         ErrorKind = "link"        // reached through a symbolic link
	// Sizes that lie: a file, a table or a count over the file's real size
	// or a hard cap. The file is left unsymbolised for good.
	ErrTooLarge ErrorKind = "too_large"
	// Transient: tried again later.
	ErrOverBudget ErrorKind = "over_budget" // the job's share of the memory budget is full
	ErrWorkLimit  ErrorKind = "work_limit"  // the job used its file read allowance
	ErrStalledIO  ErrorKind = "stalled_io"  // the job's file system did not answer in time
)

// ErrorKinds lists every kind, for metrics that show zeros too.
var ErrorKinds = []ErrorKind{ErrReadMaps, ErrNoMapping, ErrOpenFile, ErrFileIdentity, ErrParseELF, ErrNoSymbol,
	ErrPerfMap, ErrKallsyms, ErrKallsymsHidden, ErrKernelNoSymbol, ErrPanic, ErrNotRegular, ErrOwnerRefused, ErrLink,
	ErrTooLarge, ErrOverBudget, ErrWorkLimit, ErrStalledIO}

// Stats is a snapshot of the symbolizer's counters.
type Stats struct {
	FileCacheHits   uint64 // parsed file found in the cache
	FileCacheMisses uint64 // file parsed (or failed to parse)
	ProcessLoads    uint64 // maps tables read, first time or refresh
	AddrCacheHits   uint64 // address results served from a file's result cache
	FileEvictions   uint64 // parsed files evicted by the memory budget
	Errors          map[ErrorKind]uint64
	CachedFiles     int
	CachedProcesses int
}

func (s *Symbolizer) countErr(k ErrorKind) {
	s.mu.Lock()
	s.stats.Errors[k]++
	s.mu.Unlock()
}

// count updates the counters under the symbolizer's lock.
func (s *Symbolizer) count(fn func(*Stats)) {
	s.mu.Lock()
	fn(&s.stats)
	s.mu.Unlock()
}
