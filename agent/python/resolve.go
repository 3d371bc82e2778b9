package python

import (
	"container/list"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Unresolved frames keep their place in the stack under these names.
const (
	UnknownFunction = "[unknown python frame]"
	BudgetFunction  = "[python frame: read budget spent]"
	// CPUBudgetFunction: the job spent its allowance of resolution time.
	CPUBudgetFunction = "[python frame: resolution time spent]"
	// StalledFunction: the job's memory did not answer in time.
	StalledFunction = "[python frame: memory read stalled]"
)

// codeInfo is what a code object says, cached per (process, address).
type codeInfo struct {
	addr      uint64
	check     uint64 // as the walk computes it (interp_frame.check)
	name      string
	file      string
	firstLine int
	lines     *lineTable // decoded once, when read
	tableLen  int        // bytes of the line table read
	bad       badCode
	elem      *list.Element
}

// badCode says why a cached code object names nothing.
type badCode uint8

const (
	codeGood        badCode = iota
	codeUnreadable          // not readable, or not a code object
	codeRefused             // it or its names lie outside what the tracker reads
	codeNotResident         // a page of it is not in the process's memory
)

func (c *codeInfo) size() int64 {
	n := int64(len(c.name)+len(c.file)) + 96
	if c.lines != nil {
		n += c.lines.size()
	}
	return n
}

type codeList struct{ l *list.List }

// resolution is one Resolve: what it took under the lock, what it read
// without it.
type resolution struct {
	p       *proc
	meter   *jobMeter
	decoded []CodeFrame
	codes   []*codeInfo // per decoded frame, once known
	budget  []bool      // per decoded frame: refused for the read allowance
	misses  []*miss
	// For the reads: snapshots of the process (and its parent's) state.
	l                    *Layout
	codeType             uint64
	mem, parentMem       Memory
	ranges, parentRanges *readable
	pid, parentPID       uint32
	file                 procfs.FileID
	// What the reads did.
	spent      time.Duration // resolving, under the lock and off it
	read       int64         // bytes read
	stalled    bool
	newRanges  *readable // the process's maps read again
	lineBytes  uint64
	allCharged bool // the job was over its time allowance: nothing read
}

// miss is one code object not cached, and the frames that ran it.
type miss struct {
	addr, check uint64
	frames      []int
	c           *codeInfo
	fromParent  bool
	definitive  bool // a bad result that may be cached
}

// Resolve turns the Python frames of one sample of process p into
// functions, files and lines, innermost first. A process that is not set
// up gets none. Code objects not cached are read off the lock, in the
// gate under the process's job; the job pays for them (and for the
// lookups) out of its allowances.
func (t *Tracker) Resolve(p interp.Process, s *bpf.InterpStack) (st interp.Stack) {
	if s == nil || s.Kind != Kind {
		return interp.Stack{}
	}
	var r *resolution
	defer func() {
		if v := recover(); v != nil {
			st = interp.Stack{}
			if r != nil {
				t.unreadable(r.p, v, debug.Stack())
			}
		}
	}()
	if r = t.begin(p, s); r == nil {
		return interp.Stack{}
	}
	if len(r.misses) > 0 {
		if pe := t.readMisses(r); pe != nil {
			t.unreadable(r.p, pe.v, pe.stack)
			return interp.Stack{}
		}
	}
	return t.finish(r, s.Flags&bpf.InterpTruncated != 0)
}

// begin finds the process, decodes the frames and looks them up in the
// cache, under the lock; nil when the process is not set up.
func (t *Tracker) begin(p interp.Process, s *bpf.InterpStack) *resolution {
	t.mu.Lock()
	defer t.mu.Unlock()
	t0 := t.o.Now()
	pr := t.procs[p.PID]
	if pr == nil || pr.start != p.StartNs || pr.state != stateReady {
		return nil
	}
	n := min(int(s.Len), len(s.Frames))
	raw := make([]RawFrame, n)
	for i := range raw {
		raw[i] = rawFrame(s.Frames[i])
	}
	r := &resolution{p: pr, meter: t.meterOf(pr.owner), l: &pr.in.Layout}
	r.decoded = r.l.Decode(raw)
	r.codes = make([]*codeInfo, len(r.decoded))
	r.budget = make([]bool, len(r.decoded))
	if !t.timeLeft(r.meter) {
		r.allCharged = true
		return r
	}
	byKey := map[[2]uint64]*miss{}
	for i, cf := range r.decoded {
		if c := t.cached(pr, cf.Code, cf.Check); c != nil {
			r.codes[i] = c
			continue
		}
		k := [2]uint64{cf.Code, cf.Check}
		if m := byKey[k]; m != nil {
			m.frames = append(m.frames, i)
			continue
		}
		if !t.takeBytes(r.meter, 4<<10) {
			r.budget[i] = true
			continue
		}
		t.stats.CodeMisses++
		m := &miss{addr: cf.Code, check: cf.Check, frames: []int{i}}
		byKey[k] = m
		r.misses = append(r.misses, m)
	}
	if len(r.misses) > 0 {
		r.codeType, r.mem, r.ranges, r.pid, r.file = pr.codeType, pr.mem, pr.ranges, pr.pid, pr.file
		if par := pr.parent; par != nil {
			r.parentMem, r.parentRanges, r.parentPID = par.mem, par.ranges, par.pid
		}
	}
	r.spent = t.o.Now().Sub(t0)
	return r
}

// cached returns the code object at addr from the cache when the cached
// one is the one the sample saw (same check); nil when it must be read.
func (t *Tracker) cached(p *proc, addr, check uint64) *codeInfo {
	initCodes(p)
	old := p.codes[addr]
	if old != nil && (old.check == check || check == 0) {
		t.stats.CodeHits++
		p.lru.l.MoveToFront(old.elem)
		return old
	}
	if par := p.parent; par != nil && par.codes != nil {
		// A forked child runs its parent's code objects: the parent's
		// cache holds them when the check says it is the same object.
		if c := par.codes[addr]; c != nil && c.check == check && check != 0 && c.bad == codeGood {
			t.stats.CodeHits++
			par.lru.l.MoveToFront(c.elem)
			return c
		}
	}
	return nil
}

func initCodes(p *proc) {
	if p.lru.l == nil {
		p.lru.l = list.New()
		p.codes = map[uint64]*codeInfo{}
	}
}

// readMisses reads the code objects of r's misses off the lock, in the
// gate: one batch within the job's deadline. A panic in it comes back.
func (t *Tracker) readMisses(r *resolution) *panicError {
	type result struct {
		c          *codeInfo
		fromParent bool
		definitive bool
	}
	mem := &checkedMemory{mem: r.mem, ranges: r.ranges, remap: t.remap(r.pid, r.file)}
	var pmem *checkedMemory
	if r.parentMem != nil {
		pmem = &checkedMemory{mem: r.parentMem, ranges: r.parentRanges, remap: t.remap(r.parentPID, r.file)}
	}
	misses := make([]struct{ addr, check uint64 }, len(r.misses))
	for i, m := range r.misses {
		misses[i].addr, misses[i].check = m.addr, m.check
	}
	results := make([]result, len(misses))
	var elapsed time.Duration
	var lineBytes uint64
	err := t.gate.run(r.p.owner, func() {
		defer mem.done()
		if pmem != nil {
			defer pmem.done()
		}
		start := t.o.Now()
		for i, m := range misses {
			c, err := readCode(mem, r.l, r.codeType, m.addr)
			if err != nil && pmem != nil {
				// A short-lived child is often gone by the time its
				// samples are resolved; its parent still has what it had
				// at the fork. The check tells whether the object there
				// is the one sampled.
				if pc, perr := readCode(pmem, r.l, r.codeType, m.addr); perr == nil && pc.check == m.check {
					c, err = pc, nil
					results[i].fromParent = true
				}
			}
			if err != nil {
				c = &codeInfo{addr: m.addr, check: m.check, bad: codeUnreadable}
				// Outside the readable mappings after reading the maps
				// again: so it stays. Without a fresh read of the maps,
				// it may be a new arena: not cached.
				results[i].definitive = true
				switch {
				case errors.Is(err, errRefusedMapping):
					c.bad = codeRefused
					results[i].definitive = mem.remapped
				case errors.Is(err, errNotResident):
					// It may be read once the process has touched it.
					c.bad, results[i].definitive = codeNotResident, false
				}
			}
			lineBytes += uint64(c.tableLen) // #nosec G115 -- a length
			results[i].c = c
		}
		elapsed = t.o.Now().Sub(start)
	})
	var pe *panicError
	switch {
	case err == nil:
	case errors.As(err, &pe):
		return pe
	default:
		r.stalled = true
		if errors.Is(err, errStalled) {
			r.spent += t.o.ReadTimeout // what it held the caller
		}
		return nil
	}
	for i, m := range r.misses {
		m.c, m.fromParent, m.definitive = results[i].c, results[i].fromParent, results[i].definitive
	}
	r.spent += elapsed
	r.read = mem.read
	if pmem != nil {
		r.read += pmem.read
	}
	if mem.remapped {
		r.newRanges = mem.ranges
	}
	r.lineBytes = lineBytes
	return nil
}

// finish publishes what was read into the cache, under the lock, and
// names the frames.
func (t *Tracker) finish(r *resolution, truncated bool) interp.Stack {
	t.mu.Lock()
	defer t.mu.Unlock()
	t0 := t.o.Now()
	pr := r.p
	live := t.current(pr) && pr.state == stateReady
	if live && r.newRanges != nil {
		pr.ranges = r.newRanges
	}
	t.stats.LineTableBytes += r.lineBytes
	for _, m := range r.misses {
		if m.c == nil {
			continue // stalled
		}
		if m.fromParent {
			t.stats.ParentReads++
		}
		if m.c.bad != codeGood {
			t.stats.CodeBad++
		}
		c := m.c
		if live {
			c = t.publish(pr, m)
		}
		for _, i := range m.frames {
			r.codes[i] = c
		}
	}
	out := make([]interp.Frame, 0, len(r.decoded))
	for i, cf := range r.decoded {
		fr := interp.Frame{Function: UnknownFunction, Entry: cf.Entry}
		switch c := r.codes[i]; {
		case r.allCharged:
			fr.Function = CPUBudgetFunction
			t.stats.CPUBudgetExceeded++
		case r.budget[i]:
			fr.Function = BudgetFunction
			t.stats.ReadBudgetExceeded++
		case c == nil:
			fr.Function = StalledFunction
			t.stats.Stalled++
		case c.check != cf.Check || cf.Check == 0:
			// The code object the sample saw is gone: its address now
			// holds another (or nothing readable). Never the wrong name.
			t.stats.CodeGone++
		case c.bad == codeRefused:
			t.stats.CodeRefused++
		case c.bad == codeNotResident:
			t.stats.CodeNotResident++
		case c.bad != codeGood:
			t.stats.CodeUnreadable++
		default:
			fr.Function, fr.File = c.name, c.file
			fr.Line = c.lines.line(cf.Offset)
		}
		out = append(out, fr)
	}
	t.stats.Frames += uint64(len(out))
	if truncated {
		t.stats.Truncated++
	}
	if extra := r.read - int64(len(r.misses))*(4<<10); extra > 0 {
		t.chargeBytes(r.meter, float64(extra))
	}
	t.chargeTime(r.meter, r.spent+t.o.Now().Sub(t0))
	return interp.Stack{Frames: out, Truncated: truncated, By: CPython{}}
}

// publish puts a code object read for p into the cache (p's, or its
// parent's for its siblings), and returns what p's frames are to name.
func (t *Tracker) publish(p *proc, m *miss) *codeInfo {
	c := m.c
	initCodes(p)
	old := p.codes[m.addr]
	if old != nil && old.check == m.check && old.bad == codeGood {
		return old // another Resolve read it meanwhile
	}
	if c.bad != codeGood && ((old != nil && old.bad == codeGood) || !m.definitive) {
		// Another code object at the address, or a torn check, and the
		// process is gone (or its memory unreadable): the cached object
		// stays, for its own samples still to be resolved (a short
		// process's are, after it exits). And a refusal that a fresh
		// read of the maps may lift is not kept.
		return c
	}
	if old != nil {
		// Another code object took the address since.
		t.remove(p, old)
	}
	// What a forked child reads goes to its parent's cache, where the
	// parent has nothing at the address: its siblings (a pool's 16
	// workers, a DataLoader's 8) run the same code objects, and find
	// them there without reading them again, even after they exit. The
	// check keeps the parent's own samples to its own objects.
	home := p
	if par := p.parent; par != nil && c.bad == codeGood && t.current(par) {
		initCodes(par)
		if par.codes[m.addr] == nil {
			home = par
		}
	}
	c.elem = home.lru.l.PushFront(c)
	home.codes[m.addr] = c
	home.codeBytes += c.size()
	t.bytes += c.size()
	t.evict(home)
	return c
}

// evict keeps the process within its share and all processes within
// MaxCodeBytes, oldest entries first; beyond its share a process evicts
// only its own entries.
func (t *Tracker) evict(p *proc) {
	for p.codeBytes > t.o.MaxProcessCodeBytes && p.lru.l.Len() > 1 {
		t.evictOldest(p)
	}
	for t.bytes > t.o.MaxCodeBytes {
		var big *proc
		for _, q := range t.procs {
			if q.lru.l != nil && q.lru.l.Len() > 0 && (big == nil || q.codeBytes > big.codeBytes) {
				big = q
			}
		}
		if big == nil {
			return
		}
		// From the biggest until under the bound: one scan for what one
		// code object's bytes put over it, not one per entry evicted.
		for t.bytes > t.o.MaxCodeBytes && big.lru.l.Len() > 0 {
			t.evictOldest(big)
		}
	}
}

func (t *Tracker) evictOldest(p *proc) {
	t.remove(p, p.lru.l.Back().Value.(*codeInfo))
	t.stats.CodeEvicted++
}

func (t *Tracker) remove(p *proc, c *codeInfo) {
	p.lru.l.Remove(c.elem)
	delete(p.codes, c.addr)
	p.codeBytes -= c.size()
	t.bytes -= c.size()
}

// readCode reads a code object's name, file, first line and line table.
// With codeType set, the object's type must be PyCode_Type: a pointer that
// is not a code object (a freed frame, a faked one) resolves to nothing.
func readCode(m Memory, l *Layout, codeType, addr uint64) (*codeInfo, error) {
	if addr == 0 {
		return nil, fmt.Errorf("NULL code object")
	}
	// In int: offsets near 0xffff must not wrap the header's size.
	hi := max(int(l.ObType), int(l.CodeFilename), int(l.CodeName), int(l.CodeLineTable)) + 8
	if l.CodeQualname != NoOffset {
		hi = max(hi, int(l.CodeQualname)+8)
	}
	hi = max(hi, int(l.CodeFirstLineNo)+4)
	if hi > maxCodeHeader {
		return nil, errLayout
	}
	hdr := make([]byte, hi)
	if err := m.ReadAt(hdr, addr); err != nil {
		return nil, err
	}
	typ, ok1 := field64(hdr, l.ObType)
	file, ok2 := field64(hdr, l.CodeFilename)
	name, ok3 := field64(hdr, l.CodeName)
	first, ok4 := field32(hdr, l.CodeFirstLineNo)
	table, ok5 := field64(hdr, l.CodeLineTable)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil, errLayout
	}
	if codeType != 0 && typ != codeType {
		return nil, fmt.Errorf("%w: 0x%x is not a code object", ErrBadInterpreter, addr)
	}
	// #nosec G115 -- co_firstlineno is a C int: the u32 read is reinterpreted as signed on purpose
	c := &codeInfo{addr: addr, firstLine: int(int32(first)), check: file ^ (name<<1 | name>>63)}
	nameAddr := name
	if l.CodeQualname != NoOffset {
		var ok bool
		if nameAddr, ok = field64(hdr, l.CodeQualname); !ok {
			return nil, errLayout
		}
	}
	var err error
	if c.name, err = readString(m, l, nameAddr); err != nil {
		return nil, err
	}
	if c.file, err = readString(m, l, file); err != nil {
		return nil, err
	}
	// A missing or oversized table costs the line, not the function.
	tab, _ := readBytes(m, l, table, maxLineTable)
	c.lines, c.tableLen = decodeLines(l.Lines, tab, c.firstLine), len(tab)
	return c, nil
}
