package cfi

import (
	"errors"
	"fmt"
)

// cie is a parsed Common Information Entry.
type cie struct {
	codeAlign uint64
	dataAlign int64
	raReg     uint64
	fdeEnc    uint8
	augData   bool // 'z': FDEs carry augmentation data
	signal    bool // 'S': FDEs describe signal trampolines
	initial   state
	err       error // the CIE is unusable; its FDEs are dropped
}

// fde is one parsed Frame Description Entry's rows, in the builder's
// shared row buffer.
type fde struct {
	begin, end  uint64
	first, n    int // rows[first:first+n]
	fromDebug   bool
	unsupported bool // the program failed part way: rows after the last are unsupported
}

// sectionKind tells .eh_frame and .debug_frame apart: they differ in the
// CIE id, in what an FDE's CIE pointer is relative to, and in the
// terminator.
type sectionKind uint8

const (
	ehFrame sectionKind = iota
	debugFrame
)

var (
	errBadCIE   = errors.New("malformed CIE")
	errTooMany  = errors.New("too many entries")
	errTooLarge = errors.New("section too large")
)

// parser walks one section.
type parser struct {
	b       *builder
	kind    sectionKind
	data    []byte
	secAddr uint64 // virtual address of data[0] (0 for .debug_frame)
	cies    map[uint64]*cie
	// The FDE being run, its CIE, its program and the program's
	// callbacks, reused from one FDE to the next.
	cur    fde
	curCIE *cie
	prog   program
	emit   func(loc uint64, st *state)
	setLoc func(r *reader) (uint64, error)
}

// entry returns the bounds of the entry at off: its body (after the
// length), whether it uses the 64-bit format, and the offset of the next
// entry. ok is false at a terminator or when the length lies.
func (p *parser) entry(off uint64) (body []byte, bodyOff uint64, is64 bool, next uint64, ok bool) {
	r := &reader{b: p.data[off:], off: int(off)} // #nosec G115 -- off <= len(p.data): the slice just before it would panic otherwise
	length := uint64(r.u32())
	if length == 0xffffffff {
		length, is64 = r.u64(), true
	}
	if r.err != nil || length == 0 {
		return nil, 0, false, 0, false
	}
	bodyOff = off + uint64(r.pos) // #nosec G115 -- a position is never negative
	if length > uint64(len(p.data))-bodyOff {
		p.b.stats.BadEntries++
		return nil, 0, false, 0, false
	}
	return p.data[bodyOff : bodyOff+length], bodyOff, is64, bodyOff + length, true
}

// walk parses every entry of the section.
func (p *parser) walk() {
	var off uint64
	for off < uint64(len(p.data)) {
		body, bodyOff, is64, next, ok := p.entry(off)
		if !ok {
			return // terminator, or nothing after a lying length can be trusted
		}
		r := &reader{b: body, off: int(bodyOff)} // #nosec G115 -- bodyOff <= len(p.data) (entry)
		var id uint64
		if is64 {
			id = r.u64()
		} else {
			id = uint64(r.u32())
		}
		isCIE := false
		switch p.kind {
		case ehFrame:
			isCIE = id == 0
		case debugFrame:
			isCIE = id == 0xffffffff || (is64 && id == ^uint64(0))
		}
		if !isCIE {
			var cieOff uint64
			if p.kind == ehFrame {
				// Relative to the CIE pointer field itself, backwards.
				at := bodyOff
				if id > at {
					p.b.stats.BadEntries++
					off = next
					continue
				}
				cieOff = at - id
			} else {
				cieOff = id
			}
			if err := p.fde(r, cieOff); err != nil {
				p.b.stats.BadEntries++
				if errors.Is(err, errTooMany) {
					p.b.fail(err)
					return
				}
			}
		}
		off = next
	}
}

// cieAt returns the CIE at off, parsing it on first use.
func (p *parser) cieAt(off uint64) *cie {
	if c, ok := p.cies[off]; ok {
		return c
	}
	c := &cie{}
	if len(p.cies) >= p.b.lim.MaxCIEs {
		c.err = errTooMany
		return c
	}
	p.cies[off] = c
	p.b.stats.CIEs++
	if off >= uint64(len(p.data)) {
		c.err = errBadCIE
		return c
	}
	body, bodyOff, is64, _, ok := p.entry(off)
	if !ok {
		c.err = errBadCIE
		return c
	}
	r := &reader{b: body, off: int(bodyOff)} // #nosec G115 -- bodyOff <= len(p.data) (entry)
	var id uint64
	if is64 {
		id = r.u64()
	} else {
		id = uint64(r.u32())
	}
	switch {
	case p.kind == ehFrame && id != 0,
		p.kind == debugFrame && id != 0xffffffff && !(is64 && id == ^uint64(0)):
		c.err = errBadCIE // the FDE points at something that is not a CIE
	default:
		c.err = p.parseCIE(c, r)
	}
	if c.err != nil {
		p.b.stats.BadEntries++
	}
	return c
}

func (p *parser) parseCIE(c *cie, r *reader) error {
	version := r.u8()
	if version != 1 && version != 3 && version != 4 {
		return fmt.Errorf("CIE version %d", version)
	}
	aug := r.cstring(16)
	if r.err != nil {
		return errBadCIE
	}
	if version == 4 {
		addrSize, segSize := r.u8(), r.u8()
		if addrSize != 8 || segSize != 0 {
			return fmt.Errorf("address size %d, segment size %d", addrSize, segSize)
		}
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if r.err != nil {
		return errBadCIE
	}
	if c.codeAlign == 0 || c.codeAlign > 1<<16 || c.dataAlign < -1<<16 || c.dataAlign > 1<<16 {
		return fmt.Errorf("alignment factors %d, %d", c.codeAlign, c.dataAlign)
	}
	if c.raReg != regRA {
		return fmt.Errorf("return address in register %d", c.raReg)
	}
	// .debug_frame addresses are plain target addresses.
	c.fdeEnc = peAbsptr
	if len(aug) > 0 {
		if aug[0] != 'z' {
			return fmt.Errorf("augmentation %q", aug)
		}
		c.augData = true
		n := r.uleb()
		data := r.bytes(n)
		if r.err != nil {
			return errBadCIE
		}
		ar := &reader{b: data, off: r.off + r.pos - len(data)}
	augs:
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.fdeEnc = ar.u8()
			case 'L':
				ar.u8()
			case 'P':
				enc := ar.u8()
				if _, err := ar.pointer(enc&^peIndir, p.secAddr, 0); err != nil {
					return fmt.Errorf("personality: %w", err)
				}
			case 'S':
				c.signal = true
			case 'B', 'G':
				// arm64 BTI and MTE markers: no data.
			default:
				// 'z' says how long the data is: the rest can be skipped.
				break augs
			}
		}
		if ar.err != nil {
			return errBadCIE
		}
	}
	// x86-64 state at a function's first instruction, before the CIE's
	// initial instructions (which restate it): CFA = rsp+8, RA at CFA-8.
	c.initial = state{cfa: cfaRule{kind: cfaRegOff, reg: regRSP, off: 8}, ra: regRule{kind: regAtCFA, off: -8}}
	prog := &program{c: c, st: c.initial}
	if err := prog.run(r.b[r.pos:]); err != nil {
		return fmt.Errorf("CIE instructions: %w", err)
	}
	c.initial = prog.st
	return nil
}

// fde parses an FDE and runs its program into the builder's rows.
func (p *parser) fde(r *reader, cieOff uint64) error {
	c := p.cieAt(cieOff)
	if c.err != nil {
		return c.err
	}
	begin, err := r.pointer(c.fdeEnc, p.secAddr, 0)
	if err != nil {
		return err
	}
	size, err := rangeValue(r, c.fdeEnc)
	if err != nil {
		return err
	}
	if c.augData {
		n := r.uleb()
		r.bytes(n)
		if r.err != nil {
			return r.err
		}
	}
	if size == 0 {
		return nil // an empty range describes nothing (discarded functions)
	}
	end := begin + size
	if end < begin || size > p.b.lim.MaxFDEBytes || !p.b.inExec(begin, end) {
		p.b.stats.DroppedFDEs++
		return nil
	}
	if len(p.b.fdes) >= p.b.lim.MaxFDEs {
		return errTooMany
	}
	// One program and one current FDE for the whole section, their
	// callbacks bound once: libtorch_cpu has hundreds of thousands of FDEs.
	p.cur, p.curCIE = fde{begin: begin, end: end, first: len(p.b.rows), fromDebug: p.kind == debugFrame}, c
	f := &p.cur
	if p.emit == nil {
		p.emit = func(loc uint64, st *state) { p.b.addRow(&p.cur, loc, st.rule(p.curCIE.signal)) }
		p.setLoc = func(r *reader) (uint64, error) { return r.pointer(p.curCIE.fdeEnc, p.secAddr, 0) }
	}
	prog := &p.prog
	*prog = program{c: c, st: c.initial, initial: &c.initial, loc: begin, end: end, emit: p.emit, setLoc: p.setLoc, stack: prog.stack[:0]}
	if err := prog.run(r.b[r.pos:]); err != nil {
		// What the program said before the error holds; from its current
		// location on nothing is known.
		f.unsupported = true
		if prog.loc < end {
			p.b.addRow(f, prog.loc, Rule{Kind: KindUnsupported})
		}
		p.b.stats.BadPrograms++
	}
	if len(p.b.rows) > p.b.lim.MaxRows {
		return errTooMany
	}
	p.b.fdes = append(p.b.fdes, *f)
	return nil
}
