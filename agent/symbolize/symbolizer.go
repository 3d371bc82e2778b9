package symbolize

import (
	"errors"
	"io/fs"
	"maps"
	"sync"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Options configures a Symbolizer. Every filesystem root is an option so
// tests, and agents running with the host's /proc mounted elsewhere, can
// point it anywhere.
type Options struct {
	Proc           procfs.FS // default /proc
	KallsymsPath   string    // a file instead of <proc-root>/kallsyms (tests)
	MaxCachedFiles int       // parsed ELF files kept; default 64
	MaxCacheBytes  int64     // approximate bytes of parsed files kept; default 512 MiB
	MaxProcesses   int       // per-process tables kept; default 4096
	// MaxFileBytes is the largest mapped file read, by its real size;
	// default 4 GiB (a CUDA library is up to 1.5 GiB).
	MaxFileBytes int64
}

// Symbolizer resolves stack addresses to frames. Create one with New.
type Symbolizer struct {
	mu    sync.Mutex
	opts  Options
	files *fileCache
	procs map[int]*process
	kern  kallsyms
	// kernHiddenCounted makes the kptr_restrict error count once, not per
	// frame: it is a configuration fact, not a per-sample failure.
	kernHiddenCounted bool
	stats             Stats
}

// New returns a Symbolizer; it reads nothing until first used.
func New(opts Options) *Symbolizer {
	if opts.Proc.Root == "" {
		opts.Proc = procfs.New("")
	}
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = 4 << 30
	}
	if opts.MaxCachedFiles <= 0 {
		opts.MaxCachedFiles = 64
	}
	if opts.MaxCacheBytes <= 0 {
		opts.MaxCacheBytes = 512 << 20
	}
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = 4096
	}
	return &Symbolizer{
		opts:  opts,
		files: newFileCache(opts.MaxCachedFiles, opts.MaxCacheBytes),
		procs: map[int]*process{},
		stats: Stats{Errors: map[ErrorKind]uint64{}},
	}
}

// User symbolises a user stack of process id, as recorded with the sample
// (id.Start 0 if unknown). When its start time no longer matches, the pid
// was reused and the stack belongs to a process that is gone, so its frames
// are reported unknown rather than resolved against the wrong binary. See
// the package doc for the return-address convention. It returns at least
// one Frame per address.
func (s *Symbolizer) User(id procfs.ID, addrs []uint64) []Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Frame, 0, len(addrs))
	p := s.process(id)
	if p == nil {
		for _, a := range addrs {
			out = append(out, Frame{Address: a})
			s.countErr(ErrReadMaps)
		}
		return out
	}
	refreshed, perfRefreshed := false, false
	for i, a := range addrs {
		look := a
		if i > 0 && a > 0 {
			look = a - 1
		}
		m := findMapping(p.maps, look)
		if m == nil && !refreshed && !p.isBadAddr(look) {
			// A library dlopened or code mapped since the table was read.
			refreshed = true
			s.readMaps(p)
			s.stats.ProcessLoads++
			m = findMapping(p.maps, look)
		}
		if m == nil && refreshed {
			p.noteBadAddr(look)
		}
		if m == nil || !m.FileBacked() {
			// JIT code lives in anonymous memory described by a perf map.
			pm := s.perfMapFor(p)
			name, ok := pm.lookup(look)
			if !ok && !perfRefreshed {
				perfRefreshed = true
				switch err := pm.refresh(); {
				case err == nil:
					name, ok = pm.lookup(look)
				case !errors.Is(err, fs.ErrNotExist):
					s.countErr(ErrPerfMap)
				}
			}
			if ok {
				out = append(out, Frame{Function: name, Module: "[perf-map]", Address: a})
				continue
			}
			f := Frame{Address: a}
			if m != nil {
				f.Module = m.Path
				s.countErr(ErrNoSymbol)
			} else {
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
		s.countErr(kind)
		return append(out, unknown)
	}
	vaddr, ok := obj.vaddr(look - m.Start + m.Offset)
	if !ok {
		s.countErr(ErrNoSymbol)
		return append(out, unknown)
	}
	if _, cached := obj.results.get(vaddr); cached {
		s.stats.AddrCacheHits++
	}
	rs := obj.resolve(vaddr)
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

// process returns the cached table for id.PID, loading it when absent or
// when the caller's start time shows the cached one is for an earlier
// process. It returns nil when the process is gone or its start time does
// not match.
func (s *Symbolizer) process(id procfs.ID) *process {
	pid, startTime := id.PID, id.Start
	p := s.procs[pid]
	if p != nil && startTime != 0 && p.id.Start != startTime {
		p = nil
	}
	if p == nil {
		if len(s.procs) >= s.opts.MaxProcesses {
			// Forget is the normal path; this only guards against a caller
			// that never calls it. Drop an arbitrary entry.
			for k := range s.procs {
				delete(s.procs, k)
				break
			}
		}
		p = s.loadProcess(pid)
		s.procs[pid] = p
	}
	if p.mapsErr || (startTime != 0 && p.id.Start != 0 && p.id.Start != startTime) {
		return nil
	}
	return p
}

// Kernel symbolises a kernel stack. Frames in modules get Module
// "[<module>]". If kptr_restrict hides addresses, every frame is unknown
// and ErrKallsymsHidden is counted once.
func (s *Symbolizer) Kernel(addrs []uint64) []Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.process(id)
	if p == nil {
		return
	}
	for i := range p.maps {
		s.objFor(p, &p.maps[i])
	}
}

// Refresh re-reads a live process's mappings and loads the files it maps
// since it was prepared (a library it dlopened, a new image after exec), so
// that its samples there can still be symbolised after it exits.
func (s *Symbolizer) Refresh(id procfs.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.process(id)
	if p == nil {
		return
	}
	s.readMaps(p)
	for i := range p.maps {
		s.objFor(p, &p.maps[i])
	}
}

// Forget drops the cached table of an exited process (of whatever process
// has its pid when id.Start is 0). Parsed files stay cached: other
// processes likely map them.
func (s *Symbolizer) Forget(id procfs.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[id.PID]; p != nil && (id.Start == 0 || p.id.Start == 0 || p.id.Start == id.Start) {
		delete(s.procs, id.PID)
	}
}

// Stats returns a snapshot of the counters.
func (s *Symbolizer) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Errors = maps.Clone(s.stats.Errors)
	st.FileEvictions = s.files.evicted
	st.CachedFiles = s.files.ll.Len()
	st.CachedProcesses = len(s.procs)
	return st
}
