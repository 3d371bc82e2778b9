package unwind

import (
	"bytes"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/unwind/cfi"
)

// ErrJobShare: the process's job has loaded its share of processes.
var ErrJobShare = errors.New("the job's share of the unwinder is used")

// DefaultMaxTableBytes is the default budget of table memory in BPF maps:
// the tables of a node running a typical training job's libraries, with
// room for a few jobs. Tables take 140 to 230 KiB per MiB of .text
// (libLLVM-15: 6.9 MiB; a Python process with numpy, its BLAS and LAPACK,
// 33 files: 3.4 MiB).
const DefaultMaxTableBytes = 256 << 20

// Options configures a Loader. Zero fields take defaults.
type Options struct {
	// MaxTableBytes bounds the bytes of tables loaded (rows and page index
	// in BPF maps). Over it, the least recently used tables are evicted,
	// even of files still mapped: their frames are unwound by frame
	// pointers, and counted (Counters.FramesEvictedTable).
	MaxTableBytes int64
	// IdleTableBytes keeps, within MaxTableBytes, the tables of files no
	// loaded process maps any more, loaded and charged to no job, up to
	// this many bytes (default MaxTableBytes/4; negative: none): the next
	// process that maps the file (a pipeline's next tool, a workflow's
	// next python3) is unwound through it at once, without a rebuild.
	// They go first when room is needed.
	IdleTableBytes int64
	MaxTables      int // files with a table at once (default 4096)
	MaxMappings    int // LPM entries in all (default 512Ki)
	// MaxMappingsPerProcess bounds one process's LPM entries, so that a
	// process with thousands of executable mappings cannot take the map
	// from the others (default 8192).
	MaxMappingsPerProcess int
	MaxProcesses          int // default 32768
	// Owner names a process's job (the memory budget's owner key), for the
	// per-job shares below; nil: no shares. It must not do I/O.
	Owner func(procfs.ID) string
	// Group is a process's job group, written into its entry, which its
	// forked children copy (stack.h bounds a group's forks); nil: 0.
	Group func(procfs.ID) uint32
	// A job's shares of what every job's processes share: table bytes it
	// loads (default MaxTableBytes/4), LPM entries (default
	// MaxMappings/8) and processes (default MaxProcesses/8). A job over a
	// share loses only its own unwinding (frame pointers, counted in
	// ShareRefusals); a table the job cannot load is built again at a
	// later sync of one of its processes, once it has room.
	MaxTableBytesPerJob int64
	MaxMappingsPerJob   int
	MaxProcessesPerJob  int
	Limits              cfi.Limits
	Maps                MapsReader // required (agent/stackwalk: procfs)
	Opener              FileOpener // required (agent/stackwalk: procfs.FS.Open)
	// NoVDSO leaves the vDSO to frame pointers instead of reading the
	// agent's own (the same image in every 64-bit process of this kernel).
	NoVDSO bool
}

func (o Options) withDefaults() Options {
	if o.MaxTableBytes <= 0 {
		o.MaxTableBytes = DefaultMaxTableBytes
	}
	if o.MaxTables <= 0 {
		o.MaxTables = 4096
	}
	if o.IdleTableBytes == 0 {
		o.IdleTableBytes = o.MaxTableBytes / 4
	}
	if o.MaxMappings <= 0 {
		o.MaxMappings = 512 << 10
	}
	if o.MaxMappingsPerProcess <= 0 {
		o.MaxMappingsPerProcess = 8192
	}
	if o.MaxProcesses <= 0 {
		o.MaxProcesses = 32768
	}
	// A BPF map's size is a u32; far below that the kernel refuses the
	// memory anyway.
	o.MaxTables, o.MaxMappings, o.MaxProcesses = min(o.MaxTables, maxMapEntries), min(o.MaxMappings, maxMapEntries), min(o.MaxProcesses, maxMapEntries)
	if o.MaxTableBytesPerJob <= 0 {
		o.MaxTableBytesPerJob = o.MaxTableBytes / 4
	}
	if o.MaxMappingsPerJob <= 0 {
		o.MaxMappingsPerJob = o.MaxMappings / 8
	}
	if o.MaxProcessesPerJob <= 0 {
		o.MaxProcessesPerJob = max(o.MaxProcesses/8, 1)
	}
	return o
}

// fileID identifies file contents without reading them (as in
// agent/symbolize): a file replaced on disk gets a new inode or mtime. Never
// a build id, which a job can copy into a file of its own.
type fileID struct {
	dev, ino    uint64
	size, mtime int64
}

// vdsoID stands for the vDSO, which is no file.
var vdsoID = fileID{dev: ^uint64(0), ino: ^uint64(0)}

// file is one file mapped by loaded processes.
type file struct {
	id   fileID
	refs int // loaded processes mapping it
	// fp: unwound by frame pointers as a whole (no table, or it failed).
	fp       bool
	base     uint64
	segs     []cfi.Segment
	pages    uint32 // of its encoded table
	slot     uint32
	hasSlot  bool
	loaded   bool
	bytes    int64
	lruElem  *list.Element // in Loader.lru while loaded
	idleElem *list.Element // in Loader.idle while no process maps it
	needLoad bool          // evicted, or never loaded: load when next built
	owner    string        // the job whose share its loaded bytes count in
}

type proc struct {
	start uint64
	owner string
	files map[fileID]bool
	keys  map[[mappingKeySize]byte]bool
}

// jobUse is what one job's processes hold of the shared maps.
type jobUse struct {
	procs, mappings int
	bytes           int64
}

// Share names what a job's share bounds, for ShareRefusals.
type Share string

// The shares.
const (
	ShareProcesses Share = "processes"
	ShareMappings  Share = "mappings"
	ShareTables    Share = "table_bytes"
)

// ShareKey is a job (an Options.Owner key) and one of its shares.
type ShareKey struct {
	Owner string
	Share Share
}

// Loader builds the unwind tables of processes' mapped files, loads them
// into the shared BPF maps, and keeps them while a process maps them (and
// after, idle, within Options.IdleTableBytes).
// It is safe for concurrent use; files are read and tables built outside
// its lock, so one process's large or slow file does not hold up another.
type Loader struct {
	opts Options
	maps *Maps

	mu       sync.Mutex
	files    map[fileID]*file
	lru      *list.List // loaded files, front = most recently used
	idle     *list.List // loaded files no process maps, front = newest
	idleB    int64      // their bytes
	free     []uint32
	next     uint32
	procs    map[int]*proc
	jobs     map[string]*jobUse
	refused  map[ShareKey]uint64
	stats    Stats
	vdso     *cfi.Table // built once; nil until then
	vdsoSize int64
	gen      uint32 // unwind_gen: bumped on every change of mappings
	// flights holds the files a sync is building, until that sync ends:
	// another process mapping the file meanwhile (eight ranks of one job
	// starting at once, all mapping libtorch) takes that build rather
	// than parsing the file again.
	flights map[fileID]*flight
	// bigBuild: one build of a file over bigBuildBytes at a time.
	bigBuild sync.Mutex
}

// flight is one file's build; done is closed when b is set.
type flight struct {
	done chan struct{}
	b    *built
}

// bumpGen invalidates the BPF row cache: its entries name (process, pc)
// pairs, whose rows are stale once a mapping changed.
func (l *Loader) bumpGen() {
	l.gen++
	l.maps.gen.Update(uint32(0), l.gen, ebpf.UpdateAny)
}

// NewLoader creates the BPF maps (it needs CAP_BPF) and an empty loader.
func NewLoader(o Options) (*Loader, error) {
	o = o.withDefaults()
	if o.Maps == nil || o.Opener == nil {
		return nil, errors.New("unwind: Options.Maps and Options.Opener are required")
	}
	m, err := newMaps(o)
	if err != nil {
		return nil, err
	}
	return &Loader{
		opts: o, maps: m, files: map[fileID]*file{}, lru: list.New(), idle: list.New(), procs: map[int]*proc{}, flights: map[fileID]*flight{},
		jobs: map[string]*jobUse{}, refused: map[ShareKey]uint64{},
		stats: Stats{TableBudgetBytes: o.MaxTableBytes},
	}, nil
}

// Maps returns the shared maps, for Maps.Replace.
func (l *Loader) Maps() *Maps { return l.maps }

// Close closes the maps (loaded programs keep them alive).
func (l *Loader) Close() { l.maps.Close() }

// Stats returns the loader's gauges and counters.
func (l *Loader) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Processes = len(l.procs)
	s.Files = len(l.files)
	s.Tables = l.lru.Len()
	s.IdleTables, s.IdleTableBytes = l.idle.Len(), l.idleB
	return s
}

// ShareRefusals returns, by job and share, what was refused because the
// job had used its share: processes not loaded, LPM entries not written,
// tables not loaded. Monotonic, ready for a _total metric.
func (l *Loader) ShareRefusals() map[ShareKey]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[ShareKey]uint64, len(l.refused))
	for k, v := range l.refused {
		out[k] = v
	}
	return out
}

// job returns owner's use, made on first use; dropJobLocked deletes it
// once it holds nothing.
func (l *Loader) job(owner string) *jobUse {
	j := l.jobs[owner]
	if j == nil {
		j = &jobUse{}
		l.jobs[owner] = j
	}
	return j
}

func (l *Loader) dropJobLocked(owner string) {
	if j := l.jobs[owner]; j != nil && j.procs <= 0 && j.mappings <= 0 && j.bytes <= 0 {
		delete(l.jobs, owner)
	}
}

// refuse counts n of owner's share refused. With no Owner, no shares.
func (l *Loader) refuse(owner string, share Share, n int) {
	l.refused[ShareKey{owner, share}] += uint64(n) // #nosec G115 -- a count, not negative
}

// UnknownFrames returns, for each loaded process whose walks met frames in
// no loaded mapping since it was last synced (code mapped since: a library
// dlopened, a JIT's new region), how many. Syncing the process again resets
// its count.
func (l *Loader) UnknownFrames() map[int]uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]uint32{}
	// One batch read of the whole map rather than a lookup per process:
	// this runs four times a second, and with 32 loaded processes a lookup
	// each is 128 system calls a second.
	_ = bpf.EachEntry(l.maps.procs, false, func(k *uint32, v *[procValSize]byte) {
		pid := int(*k)
		if p := l.procs[pid]; p != nil {
			if n := binary.LittleEndian.Uint32(v[12:]); n > 0 && binary.LittleEndian.Uint64(v[:]) == p.start {
				out[pid] = n
			}
		}
	})
	return out
}

// Loaded reports whether pid is loaded as the process started at
// startTicks.
func (l *Loader) Loaded(pid int, startTicks uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.procs[pid]
	return p != nil && p.start == startTicks
}

// Files is how many files pid, as the process started at startTicks, has
// tables of; 0 when it is not loaded (or unwinds through its fork
// origin's).
func (l *Loader) Files(pid int, startTicks uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.procs[pid]; p != nil && p.start == startTicks {
		return len(p.files)
	}
	return 0
}

// Aliased reports whether pid, as the process started at startTicks, has
// the entry its fork gave it: its origin's tables (stack.h, stack_fork).
func (l *Loader) Aliased(pid int, startTicks uint64) bool {
	var v [procValSize]byte
	key := uint32(pid) // #nosec G115 -- a pid is below pid_max (at most 2^22)
	if err := l.maps.procs.Lookup(key, &v); err != nil {
		return false
	}
	return binary.LittleEndian.Uint64(v[0:]) == startTicks && binary.LittleEndian.Uint32(v[8:]) != 0
}

// Counters reads the BPF side's counters.
func (l *Loader) Counters() (Counters, error) { return readCounters(l.maps.stats) }

// built is a table built outside the lock, ready to load.
type built struct {
	id    fileID
	table *cfi.Table // nil: frame pointers, or (later) a retry
	// later: the build read too much of its job's allowance, and the
	// file is built again at a later sync rather than left to frame
	// pointers.
	later bool
	inner *ebpf.Map // filled inner map, nil for frame pointers
	bytes int64
	pages uint32
	users int // syncs holding it (under Loader.mu); the last closes inner
}

// entry is an LPM entry to insert.
type entry struct {
	key [mappingKeySize]byte
	val [mappingValSize]byte
}

// SyncProcess loads (or reloads) the tables of every executable mapping of
// pid. startTicks is field 22 of /proc/<pid>/stat (the process's start
// time in clock ticks, as agent/symbolize takes it): it ties the loaded
// mappings to this process and not to a later one with the same pid.
// changed reports that what is loaded for pid differs from before (a new
// process, code mapped or unmapped since): a sync that changed nothing
// was asked for code no table covers (JIT), and asking again soon is
// wasted.
func (l *Loader) SyncProcess(pid int, startTicks uint64) (changed bool, err error) {
	// A forked child that has not exec'd unwinds through the tables of the
	// process it was forked from. Loading its own would cost a read of
	// every file it maps and take away the entry that gives its origin's
	// share of forks back at its exit.
	if l.Aliased(pid, startTicks) {
		return false, nil
	}
	owner := ""
	if l.opts.Owner != nil {
		owner = l.opts.Owner(procfs.ID{PID: pid, Start: startTicks})
	}
	ms, err := l.opts.Maps.Mappings(pid)
	if err != nil {
		l.count(func(s *Stats) { s.MapsErrors++ })
		return false, fmt.Errorf("unwind: maps of %d: %w", pid, err)
	}
	type target struct {
		m  Mapping
		id fileID
		fp bool
	}
	var targets []target
	var builds []*built
	var led []fileID
	defer func() { l.land(led, builds) }()
	seen := map[fileID]bool{} // a file with two executable mappings is built once
	prep := func(id fileID, build func() (*cfi.Table, error)) {
		if seen[id] {
			return
		}
		seen[id] = true
		if b := l.prepare(id, owner, build, &led); b != nil {
			builds = append(builds, b)
		}
	}
	for _, m := range ms {
		if !m.Exec() {
			continue
		}
		switch {
		case m.Path == "[vdso]" && !l.opts.NoVDSO:
			t, size, err := l.vdsoTable()
			usize := uint64(size) // #nosec G115 -- the size of the agent's own vDSO copy, not negative
			if err != nil || usize != m.End-m.Start || m.Offset != 0 {
				targets = append(targets, target{m: m, fp: true})
				continue
			}
			id := vdsoID
			id.size = size
			prep(id, func() (*cfi.Table, error) { return t, nil })
			targets = append(targets, target{m: m, id: id})
		case m.FileBacked():
			// Identified first: a file whose table is loaded (another
			// process's, or idle) is not opened for reading at all.
			info, err := l.opts.Opener.StatMapping(pid, m)
			if err != nil {
				l.count(func(s *Stats) { s.OpenErrors++ })
				targets = append(targets, target{m: m, fp: true})
				continue
			}
			id := identityOf(info)
			prep(id, func() (*cfi.Table, error) {
				f, err := l.opts.Opener.OpenMapping(pid, m)
				if err != nil {
					return nil, fmt.Errorf("%w: %w", errOpen, err)
				}
				defer f.Close()
				if identity(f) != id {
					return nil, fmt.Errorf("%w: the mapped file changed while it was opened", errOpen)
				}
				return cfi.Build(f.Reader(), id.size, l.opts.Limits)
			})
			targets = append(targets, target{m: m, id: id})
		default:
			// Anonymous executable memory (JIT code, with perf maps) and
			// [vsyscall]: frame pointers.
			targets = append(targets, target{m: m, fp: true})
		}
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.procs[pid]
	if p != nil && p.start != startTicks {
		// Another process under the same pid: nothing of the old one holds.
		l.dropProcLocked(pid, p)
		p = nil
	}
	if p == nil {
		if len(l.procs) >= l.opts.MaxProcesses {
			l.stats.ProcessesDiscarded++
			return false, fmt.Errorf("unwind: %d processes loaded already", len(l.procs))
		}
		if l.opts.Owner != nil && l.job(owner).procs >= l.opts.MaxProcessesPerJob {
			l.stats.ProcessesDiscarded++
			l.refuse(owner, ShareProcesses, 1)
			return false, fmt.Errorf("unwind: %w: %s has %d processes loaded", ErrJobShare, owner, l.jobs[owner].procs)
		}
		p = &proc{start: startTicks, owner: owner, files: map[fileID]bool{}, keys: map[[mappingKeySize]byte]bool{}}
		l.procs[pid] = p
		l.job(p.owner).procs++
		changed = true
	}
	// Files the process no longer maps go first, so that their bytes are
	// free before new tables are loaded.
	for id := range p.files {
		if !seen[id] {
			l.decref(id)
			delete(p.files, id)
			changed = true
		}
	}
	for _, b := range builds {
		l.install(b, p.owner)
	}
	files := map[fileID]bool{}
	var entries []entry
	for _, t := range targets {
		kind, bias, slot, pages := uint32(mappingFramePointer), uint64(0), uint32(0), uint32(0)
		if !t.fp {
			f := l.files[t.id]
			if f == nil {
				continue // never: prepare made it
			}
			if !files[t.id] {
				files[t.id] = true
				if !p.files[t.id] {
					f.refs++
					changed = true
					l.reuse(f, p.owner)
				}
			}
			if f.loaded {
				l.lru.MoveToFront(f.lruElem)
			}
			if !f.fp && f.hasSlot {
				if start, ok := mappingVaddr(f.segs, t.m); ok {
					kind, bias, slot, pages = mappingTable, t.m.Start-start+f.base, f.slot, f.pages
				}
			}
		}
		var val [mappingValSize]byte
		binary.LittleEndian.PutUint64(val[0:], t.m.Start)
		binary.LittleEndian.PutUint64(val[8:], t.m.End)
		binary.LittleEndian.PutUint64(val[16:], bias)
		binary.LittleEndian.PutUint32(val[24:], slot)
		binary.LittleEndian.PutUint32(val[28:], kind)
		binary.LittleEndian.PutUint32(val[32:], pages)
		prefixes(t.m.Start, t.m.End, func(addr uint64, n int) {
			var key [mappingKeySize]byte
			binary.LittleEndian.PutUint32(key[0:], uint32(32+n)) // #nosec G115 -- n is a prefix length, at most 64 bits
			binary.BigEndian.PutUint32(key[4:], uint32(pid))     // #nosec G115 -- a pid is below pid_max (at most 2^22)
			binary.BigEndian.PutUint64(key[8:], addr)
			entries = append(entries, entry{key: key, val: val})
		})
	}
	p.files = files

	// The process's entries count in its job's share in place of those
	// it had.
	allowed := l.opts.MaxMappingsPerProcess
	j := l.job(p.owner)
	if l.opts.Owner != nil {
		allowed = min(allowed, max(l.opts.MaxMappingsPerJob-(j.mappings-len(p.keys)), 0))
	}
	keys := map[[mappingKeySize]byte]bool{}
	for i, e := range entries {
		if i >= allowed {
			l.stats.MappingsDropped += uint64(len(entries) - i) // #nosec G115 -- i < len(entries)
			if i < l.opts.MaxMappingsPerProcess {
				l.refuse(p.owner, ShareMappings, min(len(entries), l.opts.MaxMappingsPerProcess)-i)
			}
			break
		}
		if err := l.maps.mappings.Update(e.key[:], e.val[:], ebpf.UpdateAny); err != nil {
			l.stats.MappingsDropped++
			continue
		}
		keys[e.key] = true
	}
	changed = changed || len(keys) != len(p.keys)
	for k := range p.keys {
		if !keys[k] {
			l.maps.mappings.Delete(k[:])
			changed = true
		}
	}
	l.stats.MappingEntries += len(keys) - len(p.keys)
	j.mappings += len(keys) - len(p.keys)
	p.keys = keys
	l.bumpGen()
	var pv [procValSize]byte // its own mappings (no alias), unknown frames 0
	key := uint32(pid)       // #nosec G115 -- a pid is below pid_max (at most 2^22)
	// A reload keeps the count of its live forked children, which their
	// exits take back from.
	if l.maps.procs.Lookup(key, &pv) != nil || binary.LittleEndian.Uint64(pv[0:]) != startTicks || binary.LittleEndian.Uint32(pv[8:]) != 0 {
		pv = [procValSize]byte{}
	}
	forks := binary.LittleEndian.Uint32(pv[24:])
	pv = [procValSize]byte{}
	binary.LittleEndian.PutUint64(pv[:], startTicks)
	binary.LittleEndian.PutUint32(pv[24:], forks)
	if l.opts.Group != nil {
		binary.LittleEndian.PutUint32(pv[28:], l.opts.Group(procfs.ID{PID: pid, Start: startTicks}))
	}
	if err := l.maps.procs.Update(key, pv[:], ebpf.UpdateAny); err != nil {
		return changed, fmt.Errorf("unwind: process %d: %w", pid, err)
	}
	return changed, nil
}

// RemoveProcess unloads a process: its mappings, and the tables of files
// no other loaded process maps.
func (l *Loader) RemoveProcess(pid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.procs[pid]; p != nil {
		l.dropProcLocked(pid, p)
	}
}

// RemoveProcessStarted unloads pid if it is loaded as the process started
// at startTicks.
func (l *Loader) RemoveProcessStarted(pid int, startTicks uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.procs[pid]; p != nil && p.start == startTicks {
		l.dropProcLocked(pid, p)
	}
}

func (l *Loader) dropProcLocked(pid int, p *proc) {
	l.maps.procs.Delete(uint32(pid)) // #nosec G115 -- a pid is below pid_max (at most 2^22)
	for k := range p.keys {
		l.maps.mappings.Delete(k[:])
	}
	l.stats.MappingEntries -= len(p.keys)
	for id := range p.files {
		l.decref(id)
	}
	if j := l.jobs[p.owner]; j != nil {
		j.procs--
		j.mappings -= len(p.keys)
		l.dropJobLocked(p.owner)
	}
	delete(l.procs, pid)
	l.bumpGen()
}

func (l *Loader) count(fn func(*Stats)) {
	l.mu.Lock()
	fn(&l.stats)
	l.mu.Unlock()
}

// prepare builds the table of a file the loader does not have loaded, and
// its filled inner map, outside the lock, or takes the build another sync
// is making of it; led gets the files this sync builds. It returns nil
// when the file is known and loaded (or known to need frame pointers).
// The caller hands what it got to land.
func (l *Loader) prepare(id fileID, owner string, build func() (*cfi.Table, error), led *[]fileID) *built {
	l.mu.Lock()
	if f := l.files[id]; f != nil && !(f.needLoad && !f.fp) {
		l.mu.Unlock()
		return nil
	}
	// A job that has loaded its share of table bytes builds nothing more
	// until it has room: the file waits, as one over the read allowance.
	if j := l.jobs[owner]; l.opts.Owner != nil && j != nil && j.bytes >= l.opts.MaxTableBytesPerJob {
		l.refuse(owner, ShareTables, 1)
		l.mu.Unlock()
		return &built{id: id, later: true, users: 1}
	}
	if fl := l.flights[id]; fl != nil {
		l.mu.Unlock()
		<-fl.done
		l.mu.Lock()
		fl.b.users++
		l.mu.Unlock()
		return fl.b
	}
	fl := &flight{done: make(chan struct{})}
	l.flights[id] = fl
	*led = append(*led, id)
	l.mu.Unlock()
	b := l.build(id, build)
	l.mu.Lock()
	b.users++
	fl.b = b
	close(fl.done)
	l.mu.Unlock()
	return b
}

// land ends a sync's hold on what prepare gave it: the flights it led,
// and the builds, whose inner maps the last holder closes (the outer map
// holds its own reference to a loaded one).
func (l *Loader) land(led []fileID, builds []*built) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range led {
		delete(l.flights, id)
	}
	for _, b := range builds {
		if b.users--; b.users == 0 && b.inner != nil {
			b.inner.Close()
			b.inner = nil
		}
	}
}

// bigBuildBytes is the file size from which builds take turns: a PyTorch
// job maps several such files (libtorch_cpu 120 MB, libdnnl 40 MB), each
// build holding several times its table while it runs, and the syncers
// building them side by side made the agent's peak memory.
const bigBuildBytes = 16 << 20

// build builds a file's table and its filled inner map.
func (l *Loader) build(id fileID, build func() (*cfi.Table, error)) *built {
	if id.size > bigBuildBytes {
		l.bigBuild.Lock()
		defer l.bigBuild.Unlock()
		// What such a build holds is pointer-free (the section, rows,
		// FDEs): collecting it four times as often is cheap, and keeps
		// the heap near what is live rather than twice it.
		defer debug.SetGCPercent(debug.SetGCPercent(25))
	}
	t0 := time.Now()
	t, err := build()
	b := &built{id: id, table: t}
	l.mu.Lock()
	l.stats.TablesBuilt++
	l.stats.BuildSeconds += time.Since(t0).Seconds()
	switch {
	case errors.Is(err, budget.ErrWorkLimit):
		l.stats.BuildsDeferred++
		b.table, b.later = nil, true
	case errors.Is(err, errOpen):
		l.stats.OpenErrors++
		b.table, b.later = nil, true
	case err != nil:
		l.stats.BuildErrors++
		b.table = nil
	case t.FramePointer:
		l.stats.FramePointerFiles++
		b.table = nil
	}
	l.mu.Unlock()
	if b.table == nil {
		return b
	}
	elems, pages := encode(t)
	// Only the base and segments are needed from here on: the rows can go
	// before the map is filled (t itself may be kept: the vDSO's).
	kept := *t
	kept.Rows = nil
	b.table = &kept
	b.bytes, b.pages = int64(len(elems))*8, pages
	if b.bytes > l.opts.MaxTableBytes {
		// Never fits: frame pointers, without rebuilding it at every sync.
		l.count(func(s *Stats) { s.TablesOverBudget++ })
		b.table = nil
		return b
	}
	inner, err := fillInner(elems)
	if err != nil {
		l.count(func(s *Stats) { s.BuildErrors++ })
		b.table = nil
		return b
	}
	b.inner = inner
	return b
}

// fillInner creates a table's inner map and writes its elements in
// batches.
func fillInner(elems []uint64) (*ebpf.Map, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "unwind_table", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(len(elems)), Flags: bpfFInnerMap}) // #nosec G115 -- a table is bounded by --unwind-table-bytes, far below 2^32 entries
	if err != nil {
		return nil, err
	}
	const batch = 1 << 16
	keys := make([]uint32, min(batch, len(elems)))
	for off := 0; off < len(elems); off += batch {
		n := min(batch, len(elems)-off)
		for i := range n {
			keys[i] = uint32(off + i) // #nosec G115 -- below len(elems), which fits (above)
		}
		if _, err := m.BatchUpdate(keys[:n], elems[off:off+n], nil); err != nil {
			if !errors.Is(err, ebpf.ErrNotSupported) {
				m.Close()
				return nil, err
			}
			for i := range n {
				if err := m.Update(keys[i], elems[off+i], ebpf.UpdateAny); err != nil {
					m.Close()
					return nil, err
				}
			}
		}
	}
	return m, nil
}

// install records a built table and loads it, evicting least recently
// used tables over the budget. Called with the lock held.
func (l *Loader) install(b *built, owner string) {
	f := l.files[b.id]
	if f == nil {
		f = &file{id: b.id, needLoad: true}
		l.files[b.id] = f
	}
	if b.later {
		return // needLoad stays: built at the next sync
	}
	if b.table == nil {
		f.fp = true
		return
	}
	f.base, f.segs, f.pages = b.table.Base, b.table.Segments, b.pages
	if !f.hasSlot {
		if len(l.free) > 0 {
			f.slot, l.free = l.free[len(l.free)-1], l.free[:len(l.free)-1]
			f.hasSlot = true
		} else if int(l.next) < l.opts.MaxTables {
			f.slot, f.hasSlot = l.next, true
			l.next++
		}
	}
	if b.inner == nil || f.loaded || !f.hasSlot {
		// Another sync loaded it first, or no slot.
		if !f.hasSlot {
			l.stats.TablesOverBudget++
		}
		return
	}
	if j := l.job(owner); l.opts.Owner != nil && j.bytes+b.bytes > l.opts.MaxTableBytesPerJob {
		// Over the job's share: frame pointers for this job's processes
		// until a later sync finds room. needLoad stays.
		l.refuse(owner, ShareTables, 1)
		l.dropJobLocked(owner)
		return
	}
	for l.stats.TableBytes+b.bytes > l.opts.MaxTableBytes && l.lru.Len() > 0 {
		if l.idle.Len() > 0 {
			l.drop(l.idle.Back().Value.(*file))
			continue
		}
		l.evict(l.lru.Back().Value.(*file))
		l.stats.TablesEvicted++
	}
	if err := l.maps.tables.Update(f.slot, b.inner, ebpf.UpdateAny); err != nil {
		l.stats.BuildErrors++
		return
	}
	f.loaded, f.needLoad, f.bytes, f.owner = true, false, b.bytes, owner
	f.lruElem = l.lru.PushFront(f)
	l.stats.TableBytes += b.bytes
	l.job(owner).bytes += b.bytes
}

// evict unloads a table but keeps the file (and its slot, which mappings
// still name) while processes map it.
func (l *Loader) evict(f *file) {
	if !f.loaded {
		return
	}
	l.maps.tables.Delete(f.slot)
	l.lru.Remove(f.lruElem)
	f.lruElem, f.loaded, f.needLoad = nil, false, true
	l.stats.TableBytes -= f.bytes
	if j := l.jobs[f.owner]; j != nil && f.idleElem == nil {
		j.bytes -= f.bytes
		l.dropJobLocked(f.owner)
	}
	f.bytes = 0
}

func (l *Loader) decref(id fileID) {
	f := l.files[id]
	if f == nil {
		return
	}
	if f.refs--; f.refs > 0 {
		return
	}
	if !f.loaded || f.bytes > l.opts.IdleTableBytes {
		l.drop(f)
		return
	}
	// Kept loaded, idle: its job's share no longer holds it.
	if j := l.jobs[f.owner]; j != nil {
		j.bytes -= f.bytes
		l.dropJobLocked(f.owner)
	}
	f.idleElem = l.idle.PushFront(f)
	l.idleB += f.bytes
	for l.idleB > l.opts.IdleTableBytes {
		l.drop(l.idle.Back().Value.(*file))
	}
}

// reuse takes an idle file back for a process of owner's, whose job's
// share holds it from now on.
func (l *Loader) reuse(f *file, owner string) {
	if f.idleElem == nil {
		return
	}
	l.idle.Remove(f.idleElem)
	f.idleElem = nil
	l.idleB -= f.bytes
	l.stats.IdleReused++
	f.owner = owner
	l.job(owner).bytes += f.bytes
}

// drop forgets a file no process maps: its table unloaded, its slot free.
func (l *Loader) drop(f *file) {
	if f.idleElem != nil {
		l.idleB -= f.bytes
	}
	if f.loaded {
		l.evict(f)
		l.stats.TablesUnloaded++
	}
	if f.idleElem != nil {
		l.idle.Remove(f.idleElem)
		f.idleElem = nil
	}
	if f.hasSlot {
		l.free = append(l.free, f.slot)
	}
	delete(l.files, f.id)
}

// vdsoTable builds the table of the agent's own vDSO, once, and returns
// it with the image's size.
func (l *Loader) vdsoTable() (*cfi.Table, int64, error) {
	l.mu.Lock()
	t, size := l.vdso, l.vdsoSize
	l.mu.Unlock()
	if t != nil {
		return t, size, nil
	}
	b, err := readSelfVDSO()
	if err != nil {
		return nil, 0, err
	}
	t, err = cfi.Build(bytes.NewReader(b), int64(len(b)), l.opts.Limits)
	if err != nil {
		return nil, 0, err
	}
	l.mu.Lock()
	l.vdso, l.vdsoSize = t, int64(len(b))
	l.mu.Unlock()
	return t, int64(len(b)), nil
}

// readSelfVDSO copies this process's vDSO image out of its own memory.
func readSelfVDSO() ([]byte, error) {
	ms, err := procfs.New("").Maps(os.Getpid(), func(m *procfs.Mapping) bool { return m.Path == "[vdso]" })
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, errors.New("no vdso")
	}
	m := ms[0]
	if m.End-m.Start > 1<<20 {
		return nil, errors.New("vdso larger than 1 MiB")
	}
	b := make([]byte, m.End-m.Start)
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(len(b))
	n, err := unix.ProcessVMReadv(os.Getpid(), local, []unix.RemoteIovec{{Base: uintptr(m.Start), Len: len(b)}}, 0)
	if err != nil {
		return nil, fmt.Errorf("read the vdso: %w", err)
	}
	if n != len(b) {
		return nil, fmt.Errorf("read the vdso: %d of %d bytes", n, len(b))
	}
	return b, nil
}

func identity(f *procfs.File) fileID { return identityOf(f.Info) }

func identityOf(i procfs.FileInfo) fileID {
	return fileID{dev: i.ID.Dev, ino: i.ID.Ino, size: i.Size, mtime: i.MtimeNsec}
}

// errOpen: the file identified could not be opened for its build (the
// process went, or the file changed since): built at a later sync, not
// taken for a file without a table.
var errOpen = errors.New("unwind: open for the build")

// mappingVaddr returns the ELF virtual address the mapping's first byte
// stands for: through the executable segment the mapping covers. A
// segment need not start on a page, the mapping does, so the mapping may
// begin a little before the segment.
func mappingVaddr(segs []cfi.Segment, m Mapping) (uint64, bool) {
	size := m.End - m.Start
	for _, s := range segs {
		if m.Offset < s.Off+s.Filesz && m.Offset+size > s.Off {
			return s.Vaddr + m.Offset - s.Off, true
		}
	}
	return 0, false
}

// prefixes splits [start, end) into the aligned power-of-two blocks an LPM
// trie can hold, calling fn with each block's address and prefix length.
func prefixes(start, end uint64, fn func(addr uint64, prefixLen int)) {
	for start < end {
		k := 64
		if start != 0 {
			k = bits.TrailingZeros64(start)
		}
		for k > 0 && (k >= 64 || start+1<<k > end || start+1<<k < start) {
			k--
		}
		fn(start, 64-k)
		if start+1<<k < start {
			return
		}
		start += 1 << k
	}
}

// ProcEntry is one entry of the kernel's process table (unwind_procs).
type ProcEntry struct {
	PID        int
	StartTicks uint64
	AliasPID   int // a forked child: the loaded process it is unwound as
	Forks      uint32
}

// ProcessEntries lists the kernel's process table: the processes loaded
// and the forked children the fork hook pointed at them.
func (l *Loader) ProcessEntries() ([]ProcEntry, error) {
	var out []ProcEntry
	err := bpf.EachEntry(l.maps.procs, false, func(k *uint32, v *[procValSize]byte) {
		out = append(out, ProcEntry{PID: int(*k), StartTicks: binary.LittleEndian.Uint64(v[0:]),
			AliasPID: int(binary.LittleEndian.Uint32(v[8:])), Forks: binary.LittleEndian.Uint32(v[24:])})
	})
	return out, err
}
