package symbolize

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// maxBadAddrs bounds the per-process set of addresses known to lie outside
// every mapping even after a refresh; it stops a garbage address from
// re-reading maps on every sample.
const maxBadAddrs = 1024

// Work bounds per process: its maps are read again at most this often (an
// address outside every mapping asks for it), its perf map likewise.
const (
	minMapsRefresh    = time.Second
	minPerfMapRefresh = time.Second
)

// mappingBytes is what one kept mapping costs, besides its path.
const mappingBytes = 160

// process is the cached view of one process, valid for one procfs.ID. Its
// lock is its own: held while its files are read (through the guard, so
// never longer than the guard's timeout), and needed by nobody else.
type process struct {
	mu sync.Mutex
	// Set at load, then read only.
	loaded  bool
	id      procfs.ID // Start 0 when unknown
	status  procfs.Status
	owner   string // in the memory budget (its job)
	mapsErr bool
	// Under mu.
	badAddrs    map[uint64]struct{}
	mapsReadAt  time.Time
	perfReadAt  time.Time
	perfReadErr error
	// The mapping table and perf map, each charged to the budget; an
	// eviction drops them (atomically: it runs under other locks).
	table     atomic.Pointer[mapTable]
	perf      atomic.Pointer[perfMap]
	forgotten atomic.Bool
}

// mapTable is a process's executable mappings.
type mapTable struct {
	maps   []mapping
	charge *budget.Entry
}

// load reads a process's start time, uid, namespace pid and maps.
func (s *Symbolizer) load(p *process, pid int) {
	p.loaded = true
	p.id = procfs.ID{PID: pid}
	p.status = procfs.Status{UID: -1, NSpid: pid}
	s.count(func(st *Stats) { st.ProcessLoads++ })
	if id, err := s.opts.Proc.ID(pid); err == nil {
		p.id = id
	}
	if st, err := s.opts.Proc.Status(pid); err == nil {
		p.status = st
	}
	p.owner = s.ownerOf(p)
	s.readMaps(p)
}

func (s *Symbolizer) ownerOf(p *process) string {
	if s.opts.Owner != nil {
		if o := s.opts.Owner(p.id); o != "" {
			return o
		}
	}
	if p.status.UID < 0 {
		return budget.Unknown
	}
	return budget.UserOwner(p.status.UID)
}

// readMaps reads the process's executable mappings again: at most every
// minMapsRefresh, through the guard, within the job's read allowance, and
// charged to its share. It reports whether the table was read now, or
// why not ("" when it was read too recently). A process that exited keeps
// the table read while it lived: it is still right for its samples.
func (s *Symbolizer) readMaps(p *process) (fresh bool, _ ErrorKind) {
	now := s.opts.Now()
	if t := p.table.Load(); t != nil && now.Sub(p.mapsReadAt) < minMapsRefresh {
		return false, ""
	}
	if !s.work.Take(p.owner, 1) {
		return false, ErrWorkLimit
	}
	p.mapsReadAt = now
	var maps []procfs.Mapping
	var read int64
	var err error
	if gerr := s.guard.Do(p.owner, func(func()) {
		maps, read, err = s.opts.Proc.MapsRead(p.id.PID, func(m *procfs.Mapping) bool { return m.Exec() })
	}); gerr != nil {
		return false, ErrStalledIO
	}
	s.work.Spend(p.owner, read)
	if err != nil && maps == nil {
		if p.table.Load() == nil {
			p.mapsErr = true
		}
		return false, ErrReadMaps
	}
	size := int64(0)
	for i := range maps {
		size += mappingBytes + int64(len(maps[i].Path))
	}
	t := &mapTable{maps: make([]mapping, len(maps))}
	for i := range maps {
		t.maps[i].Mapping = maps[i]
	}
	// A mapping that did not change keeps the file it was resolved to: a
	// re-read (a new library, a reload of the unwinder's tables) must not
	// reopen every other one, and while the process exits could no longer
	// open it, losing its symbols for the samples still to come. Those
	// that failed are tried again.
	if old := p.table.Load(); old != nil {
		for i := range t.maps {
			if m := findMapping(old.maps, t.maps[i].Start); m != nil && m.Mapping == t.maps[i].Mapping &&
				m.file != nil && m.file.err == "" {
				t.maps[i].file = m.file
			}
		}
	}
	charge, cerr := s.budget.Charge(p.owner, budget.Maps, size, func() { p.table.CompareAndSwap(t, nil) })
	if cerr != nil {
		return false, ErrOverBudget
	}
	t.charge = charge
	if old := p.table.Swap(t); old != nil {
		old.charge.Release()
	}
	if p.forgotten.Load() {
		s.release(p)
	}
	p.mapsErr = false
	p.badAddrs = nil
	return true, ""
}

// release returns what a forgotten process holds in the budget.
func (s *Symbolizer) release(p *process) {
	if t := p.table.Swap(nil); t != nil {
		t.charge.Release()
	}
	if pm := p.perf.Swap(nil); pm != nil {
		pm.charge.Release()
	}
}

// noteBadAddr records an address that missed after a refresh.
func (p *process) noteBadAddr(addr uint64) {
	if p.badAddrs == nil || len(p.badAddrs) >= maxBadAddrs {
		p.badAddrs = make(map[uint64]struct{})
	}
	p.badAddrs[addr] = struct{}{}
}

func (p *process) isBadAddr(addr uint64) bool {
	_, ok := p.badAddrs[addr]
	return ok
}

// perfMapLookup looks addr up in the process's JIT perf map, reading what
// was appended (or the whole file, if it was replaced) when addr is not in
// it yet, at most every minPerfMapRefresh. The map is looked up inside the
// process's root because a containerised JIT writes to its own /tmp under
// its namespace pid.
//
// fresh says the map was read (or tried) now, so that a failure is counted
// once per read, not per frame.
func (s *Symbolizer) perfMapLookup(p *process, addr uint64, mayRefresh bool) (_ string, _ ErrorKind, fresh bool) {
	pm := p.perf.Load()
	if pm != nil {
		if name, ok := pm.lookup(addr); ok {
			return name, "", false
		}
	}
	now := s.opts.Now()
	if !mayRefresh || (!p.perfReadAt.IsZero() && now.Sub(p.perfReadAt) < minPerfMapRefresh) {
		if p.perfReadErr != nil {
			return "", perfErrKind(p.perfReadErr), false
		}
		return "", ErrNoSymbol, false
	}
	p.perfReadAt = now
	req := procfs.JobFile{PID: p.id.PID, Path: "/tmp/perf-" + strconv.Itoa(p.status.NSpid) + ".map",
		UID: p.status.UID, MaxSize: maxPerfMapBytes}
	var from perfFrom
	if pm != nil {
		from = perfFrom{file: pm.file, readOff: pm.readOff}
	}
	var res perfRead
	if err := s.guard.Do(p.owner, func(progress func()) { res = readPerfMap(s.opts.Proc, req, from, s.work, p.owner, progress) }); err != nil {
		p.perfReadErr = procfs.ErrStalled
		return "", ErrStalledIO, true
	}
	p.perfReadErr = res.err
	if res.err != nil {
		return "", perfErrKind(res.err), true
	}
	next, err := s.mergePerfMap(p, pm, res)
	if err != nil {
		p.perfReadErr = err
		return "", perfErrKind(err), true
	}
	if name, ok := next.lookup(addr); ok {
		return name, "", true
	}
	return "", ErrNoSymbol, true
}

// perfErrKind names why a perf map gave nothing.
func perfErrKind(err error) ErrorKind {
	switch {
	case errors.Is(err, budget.ErrOverBudget):
		return ErrOverBudget
	case errors.Is(err, budget.ErrWorkLimit):
		return ErrWorkLimit
	case errors.Is(err, procfs.ErrStalled):
		return ErrStalledIO
	}
	if k := openErrKind(err); k != ErrOpenFile {
		return k
	}
	return ErrPerfMap
}

// mergePerfMap adds what was read to the process's perf map (or replaces
// it), charging the job's share. A perf map that no longer fits is dropped
// whole: its entries were the job's to grow.
func (s *Symbolizer) mergePerfMap(p *process, old *perfMap, res perfRead) (*perfMap, error) {
	next := old.merged(res)
	// The entries carry over into next, and so does their charge: the old
	// map's is returned before next is charged.
	if old != nil {
		old.charge.Release()
	}
	charge, err := s.budget.Charge(p.owner, budget.PerfMap, next.bytes, func() { p.perf.CompareAndSwap(next, nil) })
	if err != nil {
		p.perf.Store(nil)
		return nil, err
	}
	next.charge = charge
	p.perf.Store(next)
	if p.forgotten.Load() {
		s.release(p)
	}
	return next, nil
}
