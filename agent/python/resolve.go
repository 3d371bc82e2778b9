package python

import (
	"container/list"
	"fmt"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/interp"
)

// Unresolved frames keep their place in the stack under these names.
const (
	UnknownFunction = "[unknown python frame]"
	BudgetFunction  = "[python frame: read budget spent]"
)

// codeInfo is what a code object says, cached per (process, address).
type codeInfo struct {
	addr      uint64
	check     uint64 // as the walk computes it (interp_frame.check)
	name      string
	file      string
	firstLine int
	table     []byte
	bad       bool
	elem      *list.Element
}

func (c *codeInfo) size() int64 {
	return int64(len(c.name)+len(c.file)+len(c.table)) + 96
}

type codeList struct{ l *list.List }

// Resolve turns the Python frames of one sample of process p into
// functions, files and lines, innermost first. A process that is not set
// up gets none.
func (t *Tracker) Resolve(p interp.Process, s *bpf.InterpStack) interp.Stack {
	t.mu.Lock()
	defer t.mu.Unlock()
	pr := t.procs[p.PID]
	if pr == nil || pr.start != p.StartNs || pr.state != stateReady || s == nil || s.Kind != Kind {
		return interp.Stack{}
	}
	n := min(int(s.Len), len(s.Frames))
	raw := make([]RawFrame, n)
	for i := range raw {
		raw[i] = rawFrame(s.Frames[i])
	}
	l := &pr.in.Layout
	decoded := l.Decode(raw)
	out := make([]interp.Frame, 0, len(decoded))
	for _, cf := range decoded {
		fr := interp.Frame{Function: UnknownFunction, Entry: cf.Entry}
		switch c := t.code(pr, cf.Code, cf.Check); {
		case c == nil:
			fr.Function = BudgetFunction
		case c.check != cf.Check || cf.Check == 0:
			// The code object the sample saw is gone: its address now
			// holds another (or nothing readable). Never the wrong name.
			t.stats.CodeGone++
		case c.bad:
			t.stats.CodeUnreadable++
		default:
			fr.Function, fr.File = c.name, c.file
			fr.Line = Line(l.Lines, c.table, c.firstLine, cf.Offset)
		}
		out = append(out, fr)
	}
	t.stats.Frames += uint64(len(out))
	truncated := s.Flags&bpf.InterpTruncated != 0
	if truncated {
		t.stats.Truncated++
	}
	return interp.Stack{Frames: out, Truncated: truncated, By: CPython{}}
}

// code returns the code object at addr, from the cache when the cached one
// is the one the sample saw (same check), else read afresh; nil when the
// process's read budget is spent.
func (t *Tracker) code(p *proc, addr, check uint64) *codeInfo {
	if p.lru.l == nil {
		p.lru.l = list.New()
		p.codes = map[uint64]*codeInfo{}
	}
	old := p.codes[addr]
	if old != nil && (old.check == check || check == 0) {
		t.stats.CodeHits++
		p.lru.l.MoveToFront(old.elem)
		return old
	}
	if par := p.parent; par != nil && par.codes != nil {
		// A forked child runs its parent's code objects: the parent's
		// cache holds them when the check says it is the same object.
		if c := par.codes[addr]; c != nil && c.check == check && check != 0 && !c.bad {
			t.stats.CodeHits++
			par.lru.l.MoveToFront(c.elem)
			return c
		}
	}
	if !t.spend(p, 4<<10) {
		t.stats.ReadBudgetExceeded++
		return nil
	}
	t.stats.CodeMisses++
	c, err := readCode(p.mem, &p.in.Layout, p.codeType, addr)
	if err != nil && p.parent != nil {
		// A short-lived child is often gone by the time its samples are
		// resolved; its parent still has what it had at the fork. The
		// check tells whether the object there is the one sampled.
		if pc, perr := readCode(p.parent.mem, &p.in.Layout, p.codeType, addr); perr == nil && pc.check == check {
			c, err = pc, nil
			t.stats.ParentReads++
		}
	}
	if err != nil {
		t.stats.CodeBad++
		c = &codeInfo{addr: addr, bad: true, check: check}
		if old != nil && !old.bad {
			// Another code object at the address, or a torn check, and
			// the process is gone (or its memory unreadable): the cached
			// object stays, for its own samples still to be resolved
			// (a short process's are, after it exits).
			return c
		}
	}
	if old != nil {
		// Another code object took the address since.
		t.remove(p, old)
	}
	t.spend(p, float64(len(c.table)))
	// What a forked child reads goes to its parent's cache, where the
	// parent has nothing at the address: its siblings (a pool's 16
	// workers, a DataLoader's 8) run the same code objects, and find
	// them there without reading them again, even after they exit. The
	// check keeps the parent's own samples to its own objects.
	home := p
	if par := p.parent; par != nil && !c.bad {
		if par.lru.l == nil {
			par.lru.l = list.New()
			par.codes = map[uint64]*codeInfo{}
		}
		if par.codes[addr] == nil {
			home = par
		}
	}
	c.elem = home.lru.l.PushFront(c)
	home.codes[addr] = c
	home.codeBytes += c.size()
	t.bytes += c.size()
	t.evict(home)
	return c
}

// spend takes n bytes from the process's read budget, refilled at
// ReadBytesPerSecond up to four seconds' worth.
func (t *Tracker) spend(p *proc, n float64) bool {
	now := t.o.Now()
	rate := float64(t.o.ReadBytesPerSecond)
	if p.budgetTime.IsZero() {
		p.budget = 4 * rate
	} else {
		p.budget = min(4*rate, p.budget+rate*now.Sub(p.budgetTime).Seconds())
	}
	p.budgetTime = now
	if p.budget < n {
		return false
	}
	p.budget -= n
	return true
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
		t.evictOldest(big)
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
	c.table, _ = readBytes(m, l, table, maxLineTable)
	return c, nil
}
