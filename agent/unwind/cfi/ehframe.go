package cfi

import (
	"errors"
	"fmt"
	"math"
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
	err       error  // the CIE is unusable; its FDEs are dropped
	idx       uint32 // in builder.cies
}

// fde is one Frame Description Entry found by the first pass: its range,
// its CIE and where its instructions lie in its section. The second pass
// (builder.finish) runs the instructions of the FDEs it keeps, in address
// order, so no file's rows are ever held twice (libtorch_cpu: 220 000
// FDEs, 2.4 million rows before merging).
// 24 bytes each: every field is 32 bits (build holds the executable span,
// and parse each section, under 4 GiB).
type fde struct {
	pc, size      uint32 // begin - builder.base, and end - begin
	insn, insnLen uint32 // the instructions: section[insn : insn+insnLen]
	cie           uint32 // index in builder.cies
	fromDebug     bool
}

func (f *fde) begin() uint64 { return uint64(f.pc) }
func (f *fde) end() uint64   { return uint64(f.pc) + uint64(f.size) }

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
	c.idx = uint32(len(p.b.cies)) // #nosec G115 -- at most MaxCIEs per section
	p.b.cies = append(p.b.cies, c)
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

// fde parses an FDE's header and records it for the second pass.
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
	if end < begin || size > p.b.lim.MaxFDEBytes || size > math.MaxUint32 || !p.b.inExec(begin, end) {
		p.b.stats.DroppedFDEs++
		return nil
	}
	if len(p.b.fdes) >= p.b.lim.MaxFDEs {
		return errTooMany
	}
	// Inside the section, which parse holds under 4 GiB.
	p.b.fdes = append(p.b.fdes, fde{
		pc:   uint32(begin - p.b.base),                         // #nosec G115 -- inside the executable span, which build holds under 4 GiB
		size: uint32(size),                                     // #nosec G115 -- checked just above
		insn: uint32(r.off + r.pos), insnLen: uint32(r.left()), // #nosec G115 -- offsets in a section under 4 GiB (parse)
		cie: c.idx, fromDebug: p.kind == debugFrame,
	})
	return nil
}

// run runs an FDE's instructions (the second pass), appending its rows to
// rows[:0]. A program that fails part way keeps the rows it emitted
// before the error; from its location on the FDE is unsupported.
func (r *runner) run(f *fde) []Row {
	r.rows, r.c, r.p = r.rows[:0], r.b.cies[f.cie], r.b.parsers[sectionOf(f)]
	if r.emit == nil {
		// Bound once: a closure per FDE would be 220 000 allocations.
		r.emit = func(loc uint64, st *state) { r.add(loc, st.rule(r.c.signal)) }
		r.setLoc = func(rd *reader) (uint64, error) { return rd.pointer(r.c.fdeEnc, r.p.secAddr, 0) }
	}
	prog := &r.prog
	begin, end := r.b.base+f.begin(), r.b.base+f.end()
	*prog = program{c: r.c, st: r.c.initial, initial: &r.c.initial, loc: begin, end: end, emit: r.emit, setLoc: r.setLoc, stack: prog.stack[:0]}
	if err := prog.run(r.p.data[f.insn : f.insn+f.insnLen]); err != nil {
		if prog.loc < end {
			r.add(prog.loc, Rule{Kind: KindUnsupported})
		}
		r.b.stats.BadPrograms++
	}
	return r.rows
}

// runner runs the kept FDEs' programs, one at a time, reusing its buffers.
type runner struct {
	b      *builder
	p      *parser // the section of the FDE being run
	c      *cie
	rows   []Row // the FDE's rows
	prog   program
	emit   func(loc uint64, st *state)
	setLoc func(r *reader) (uint64, error)
}

// add appends a row of the FDE being run; a later rule at the same pc
// wins.
func (r *runner) add(loc uint64, u Rule) {
	cfa, flags, rbp := pack(u)
	row := Row{PC: uint32(loc - r.b.base), CFA: cfa, Flags: flags, RBP: rbp} // #nosec G115 -- loc lies in an executable segment (fde) and build refuses a span from base over 4 GiB
	if n := len(r.rows); n > 0 && r.rows[n-1].PC == row.PC {
		r.rows[n-1] = row
		return
	}
	r.rows = append(r.rows, row)
}

func sectionOf(f *fde) sectionKind {
	if f.fromDebug {
		return debugFrame
	}
	return ehFrame
}
