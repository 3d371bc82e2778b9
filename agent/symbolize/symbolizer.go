package symbolize

import (
	"errors"
	"io/fs"
	"maps"
	"sync"
	"time"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Options configures a Symbolizer. Every filesystem root is an option so
// tests, and agents running with the host's /proc mounted elsewhere, can
// point it anywhere.
type Options struct {
	Proc         procfs.FS // default /proc
	KallsymsPath string    // a file instead of <proc-root>/kallsyms (tests)
	MaxProcesses int       // per-process tables kept; default 4096
	// MaxFileBytes is the largest mapped file read, by its real size;
	// default 4 GiB (a CUDA library is up to 1.5 GiB).
	MaxFileBytes int64
	// Budget holds what the symbolizer keeps (symbol tables, perf maps,
	// mapping tables), charged to the job of the process that needed it;
	// nil: a budget of its own with the defaults.
	Budget *budget.Budget
	// Work bounds the bytes of each job's files read; nil: one of its own
	// with the defaults.
	Work *budget.Work
	// Guard bounds how long a job's file I/O may hold a caller; nil: one
	// of its own with procfs.DefaultIOTimeout.
	Guard *procfs.Guard
	// Owner names the budget owner of a process: its job (see
	// budget.JobOwner). nil, or "": per user.
	Owner func(procfs.ID) string
	// Now is the clock; tests replace it.
	Now func() time.Time
}

// Symbolizer resolves stack addresses to frames. Create one with New.
//
// Its lock guards only its maps (processes, parsed files) and counters and
// is never held while a file is read or parsed: each process has a lock
// of its own for its own files, and a file parsed for one process is
// waited for by the others that need it, not parsed again.
type Symbolizer struct {
	opts   Options
	budget *budget.Budget
	work   *budget.Work
	guard  *procfs.Guard

	mu    sync.Mutex
	procs map[int]*procEntry
	files map[fileIdentity]*fileEntry
	stats Stats

	kernMu sync.Mutex
	kern   kallsyms
	// kernHiddenCounted makes the kptr_restrict error count once, not per
	// frame: it is a configuration fact, not a per-sample failure.
	kernHiddenCounted bool
}

// procEntry is a process in the symbolizer's map; start is the start time
// it is for (0 unknown), guarded by the symbolizer's lock.
type procEntry struct {
	p     *process
	start uint64
}

// New returns a Symbolizer; it reads nothing until first used.
func New(opts Options) *Symbolizer {
	if opts.Proc.Root == "" {
		opts.Proc = procfs.New("")
	}
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = 4 << 30
	}
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Symbolizer{opts: opts, budget: opts.Budget, work: opts.Work, guard: opts.Guard,
		procs: map[int]*procEntry{}, files: map[fileIdentity]*fileEntry{},
		stats: Stats{Errors: map[ErrorKind]uint64{}}}
	if s.budget == nil {
		s.budget = budget.New(budget.Options{})
	}
	if s.work == nil {
		s.work = budget.NewWork(budget.WorkOptions{Now: opts.Now})
	}
	if s.guard == nil {
		s.guard = &procfs.Guard{}
	}
	return s
}

// User symbolises a user stack of process id, as recorded with the sample
// (id.Start 0 if unknown). When its start time no longer matches, the pid
// was reused and the stack belongs to a process that is gone, so its frames
// are reported unknown rather than resolved against the wrong binary. See
// the package doc for the return-address convention. It returns at least
// one Frame per address.
func (s *Symbolizer) User(id procfs.ID, addrs []uint64) []Frame {
	out := make([]Frame, 0, len(addrs))
	p := s.process(id)
	if p == nil {
		for _, a := range addrs {
			out = append(out, Frame{Address: a})
			s.countErr(ErrReadMaps)
		}
		return out
	}
	defer p.mu.Unlock()
	refreshed, perfTried := false, false
	for i, a := range addrs {
		look := a
		if i > 0 && a > 0 {
			look = a - 1
		}
		t := p.table.Load()
		var m *mapping
		if t != nil {
			m = findMapping(t.maps, look)
		}
		if m == nil && !refreshed && !p.isBadAddr(look) {
			// A library dlopened or code mapped since the table was read
			// (or the table was evicted).
			refreshed = true
			fresh, k := s.readMaps(p)
			if k != "" && k != ErrReadMaps {
				s.countErr(k)
			}
			if t = p.table.Load(); t != nil {
				m = findMapping(t.maps, look)
			}
			if m == nil && fresh {
				// Not mapped even in a fresh table (a failed read proves
				// nothing).
				p.noteBadAddr(look)
			}
		}
		if m == nil || !m.FileBacked() {
			// JIT code lives in anonymous memory described by a perf map.
			name, kind, fresh := s.perfMapLookup(p, look, !perfTried)
			perfTried = true
			if kind == "" {
				out = append(out, Frame{Function: name, Module: "[perf-map]", Address: a})
				continue
			}
			f := Frame{Address: a}
			if m != nil {
				f.Module = m.Path
			}
			// A perf map refused or unreadable is counted when it is read
			// (at most every minPerfMapRefresh); a frame with no name for
			// any other reason, per frame.
			switch {
			case kind != ErrNoSymbol && !errors.Is(p.perfReadErr, fs.ErrNotExist):
				if fresh {
					s.countErr(kind)
				}
			case m != nil:
				s.countErr(ErrNoSymbol)
			default:
				s.countErr(ErrNoMapping)
			}
			out = append(out, f)
			continue
		}
		out = s.appendFileFrames(out, p, m, a, look)
	}
	return out
}

func (s *Symbolizer) appendFileFrames(out []Frame, p *process, m *mapping, addr, look uint64) []Frame {
	unknown := Frame{Module: m.Path, Address: addr}
	obj, kind := s.objFor(p, m)
	if kind != "" {
		return append(out, unknown) // counted by objFor
	}
	vaddr, ok := obj.vaddr(look - m.Start + m.Offset)
	if !ok {
		s.countErr(ErrNoSymbol)
		return append(out, unknown)
	}
	rs, cached := obj.resolve(vaddr)
	if cached {
		s.count(func(st *Stats) { st.AddrCacheHits++ })
	}
	if len(rs) == 0 {
		s.countErr(ErrNoSymbol)
		return append(out, unknown)
	}
	for _, r := range rs {
		out = append(out, Frame{
			Function: r.function, File: r.file, Line: r.line,
			Module: m.Path, Address: addr, Inlined: r.inlined,
		})
	}
	return out
}

// process returns the process of id.PID, locked, loading it when absent
// or when the caller's start time shows the cached one is for an earlier
// process. It returns nil when the process is gone or its start time does
// not match.
func (s *Symbolizer) process(id procfs.ID) *process {
	s.mu.Lock()
	e := s.procs[id.PID]
	if e != nil && id.Start != 0 && e.start != 0 && e.start != id.Start {
		e.p.forgotten.Store(true)
		s.release(e.p)
		e = nil
	}
	if e == nil {
		if len(s.procs) >= s.opts.MaxProcesses {
			// Forget is the normal path; this only guards against a caller
			// that never calls it. Drop an arbitrary entry.
			for k, old := range s.procs {
				old.p.forgotten.Store(true)
				s.release(old.p)
				delete(s.procs, k)
				break
			}
		}
		e = &procEntry{p: &process{}, start: id.Start}
		s.procs[id.PID] = e
	}
	p := e.p
	s.mu.Unlock()

	p.mu.Lock()
	if !p.loaded {
		s.load(p, id.PID)
		if p.id.Start != 0 {
			s.mu.Lock()
			if s.procs[id.PID] == e {
				e.start = p.id.Start
			}
			s.mu.Unlock()
		}
	}
	if p.mapsErr || (id.Start != 0 && p.id.Start != 0 && p.id.Start != id.Start) {
		p.mu.Unlock()
		return nil
	}
	return p
}

// Kernel symbolises a kernel stack. Frames in modules get Module
// "[<module>]". If kptr_restrict hides addresses, every frame is unknown
// and ErrKallsymsHidden is counted once.
func (s *Symbolizer) Kernel(addrs []uint64) []Frame {
	s.kernMu.Lock()
	defer s.kernMu.Unlock()
	if !s.kern.loaded {
		s.kern = loadKallsyms(s.opts.Proc, s.opts.KallsymsPath)
		if s.kern.err != nil {
			s.countErr(ErrKallsyms)
		}
	}
	out := make([]Frame, 0, len(addrs))
	for i, a := range addrs {
		f := Frame{Module: KernelModule, Address: a}
		switch {
		case s.kern.hidden:
			if !s.kernHiddenCounted {
				s.kernHiddenCounted = true
				s.countErr(ErrKallsymsHidden)
			}
		case s.kern.err != nil:
		default:
			look := a
			if i > 0 && a > 0 {
				look = a - 1
			}
			if k, ok := s.kern.lookup(look); ok {
				f.Function, f.Module = k.name, k.module
			} else {
				s.countErr(ErrKernelNoSymbol)
			}
		}
		out = append(out, f)
	}
	return out
}

// Prepare reads a live process's mappings and parses the files behind them
// now, so that its samples can still be symbolised after it exits: a job's
// short-lived processes are often gone by the time their interval is
// drained. It is cheap for a process it has seen: files are cached.
func (s *Symbolizer) Prepare(id procfs.ID) {
	p := s.process(id)
	if p == nil {
		return
	}
	defer p.mu.Unlock()
	if t := p.table.Load(); t != nil {
		for i := range t.maps {
			// Anonymous code (a JIT's) and the kernel's [vdso] have no file.
			if t.maps[i].FileBacked() {
				s.objFor(p, &t.maps[i])
			}
		}
	}
}

// Refresh re-reads a live process's mappings now (not waiting for
// minMapsRefresh: the caller saw it map new code) and loads the files it
// maps since it was prepared (a library it dlopened, a new image after
// exec), so that its samples there can still be symbolised after it
// exits. The reads are the job's, within its read allowance and under the
// guard, like every other.
func (s *Symbolizer) Refresh(id procfs.ID) {
	p := s.process(id)
	if p == nil {
		return
	}
	defer p.mu.Unlock()
	p.mapsReadAt = time.Time{}
	s.readMaps(p)
	if t := p.table.Load(); t != nil {
		for i := range t.maps {
			if t.maps[i].FileBacked() {
				s.objFor(p, &t.maps[i])
			}
		}
	}
}

// Forget drops the cached table of an exited process (of whatever process
// has its pid when id.Start is 0), and what it held in the budget. Parsed
// files stay cached: other processes likely map them.
func (s *Symbolizer) Forget(id procfs.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.procs[id.PID]; e != nil && (id.Start == 0 || e.start == 0 || e.start == id.Start) {
		delete(s.procs, id.PID)
		// Without the process's lock, which its own I/O may hold: whatever
		// it installs after this is released by itself (forgotten).
		e.p.forgotten.Store(true)
		s.release(e.p)
	}
}

// Stats returns a snapshot of the counters.
func (s *Symbolizer) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Errors = maps.Clone(s.stats.Errors)
	for _, e := range s.files {
		if e.done() && e.obj.Load() != nil {
			st.CachedFiles++
		}
	}
	st.CachedProcesses = len(s.procs)
	st.FileEvictions = s.budget.Stats().Kinds[budget.Symbols].Evictions
	return st
}
