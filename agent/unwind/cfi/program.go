package cfi

import (
	"errors"
	"math"
)

// DWARF register numbers of the x86-64 psABI. (arm64: sp 31, x29 the frame
// pointer, x30 the link register; see the package doc.)
const (
	regRBP = 6
	regRSP = 7
	regRA  = 16
)

// Call frame instructions (DWARF 5, section 6.4.2, and the GNU extensions).
const (
	cfaAdvanceLoc       = 0x40 // high two bits
	cfaOffset           = 0x80
	cfaRestore          = 0xc0
	cfaNop              = 0x00
	cfaSetLoc           = 0x01
	cfaAdvanceLoc1      = 0x02
	cfaAdvanceLoc2      = 0x03
	cfaAdvanceLoc4      = 0x04
	cfaOffsetExtended   = 0x05
	cfaRestoreExtended  = 0x06
	cfaUndefined        = 0x07
	cfaSameValue        = 0x08
	cfaRegister         = 0x09
	cfaRememberState    = 0x0a
	cfaRestoreState     = 0x0b
	cfaDefCFA           = 0x0c
	cfaDefCFARegister   = 0x0d
	cfaDefCFAOffset     = 0x0e
	cfaDefCFAExpression = 0x0f
	cfaExpression       = 0x10
	cfaOffsetExtendedSF = 0x11
	cfaDefCFASF         = 0x12
	cfaDefCFAOffsetSF   = 0x13
	cfaValOffset        = 0x14
	cfaValOffsetSF      = 0x15
	cfaValExpression    = 0x16
	cfaGNUWindowSave    = 0x2d // arm64: DW_CFA_AARCH64_negate_ra_state
	cfaGNUArgsSize      = 0x2e
	cfaGNUNegOffsetExtd = 0x2f
	maxRememberedStates = 32
	maxExpressionBytes  = 64
)

// DWARF expression operators the recognised patterns use.
const (
	opDeref = 0x06
	opAnd   = 0x1a
	opPlus  = 0x22
	opShl   = 0x24
	opGe    = 0x2a
	opLit0  = 0x30
	opBreg0 = 0x70
)

// cfaKind is how the interpreter holds the CFA rule.
type cfaKind uint8

const (
	cfaRegOff   cfaKind = iota // reg + off
	cfaPLTExpr                 // the PLT expression
	cfaDerefRBP                // *(rbp + off)
	cfaSigFrame                // *(rsp + off), in a signal frame
	cfaOther                   // anything else
)

// regKind is how the interpreter holds a register rule (rbp, RA).
type regKind uint8

const (
	regSame  regKind = iota // same value (also "not saved yet")
	regUndef                // undefined
	regAtCFA                // saved at CFA + off
	regAtRBP                // saved at rbp + off (expression DW_OP_breg6 off)
	regAtRSP                // saved at rsp + off (expression DW_OP_breg7 off: signal frames)
	regOther                // anything else
)

type regRule struct {
	kind regKind
	off  int64
}

type cfaRule struct {
	kind      cfaKind
	reg       uint64
	off       int64
	threshold int64 // PLT
}

type state struct {
	cfa cfaRule
	rbp regRule
	ra  regRule
}

// rule turns the interpreter's state into what the BPF unwinder does.
func (st *state) rule(signal bool) Rule {
	if st.ra.kind == regUndef {
		return Rule{Kind: KindEnd}
	}
	switch st.cfa.kind {
	case cfaSigFrame:
		if signal {
			return Rule{Kind: KindSignal}
		}
		return Rule{Kind: KindUnsupported}
	case cfaPLTExpr:
		if st.cfa.off < math.MinInt32 || st.cfa.off > math.MaxInt32 {
			return Rule{Kind: KindUnsupported} // an int32 would wrap into a plausible offset
		}
		return Rule{Kind: KindPLT, CFAOffset: int32(st.cfa.off), RBPOffset: int32(st.cfa.threshold)} // #nosec G115 -- off checked above, threshold 0..15
	case cfaOther:
		return Rule{Kind: KindUnsupported}
	}
	if st.ra.kind != regAtCFA || st.ra.off != -8 {
		return Rule{Kind: KindUnsupported}
	}
	if st.cfa.off < math.MinInt32 || st.cfa.off > math.MaxInt32 {
		return Rule{Kind: KindUnsupported}
	}
	u := Rule{CFAOffset: int32(st.cfa.off)} // #nosec G115 -- checked just above
	switch {
	case st.cfa.kind == cfaDerefRBP:
		u.Kind = KindDerefRBP
	case st.cfa.reg == regRSP:
		u.Kind = KindRSP
	case st.cfa.reg == regRBP:
		u.Kind = KindRBP
	default:
		return Rule{Kind: KindUnsupported}
	}
	switch st.rbp.kind {
	case regSame:
		u.RBP = RBPSame
	case regAtCFA:
		u.RBP, u.RBPOffset = RBPAtCFA, clamp32(st.rbp.off)
	case regAtRBP:
		u.RBP, u.RBPOffset = RBPAtRBP, clamp32(st.rbp.off)
	default:
		u.RBP = RBPUndefined
	}
	return u
}

func clamp32(v int64) int32 {
	if v < -1<<31 || v > 1<<31-1 {
		return 1 // not a multiple of 8: pack makes it undefined
	}
	return int32(v)
}

// classifyCFAExpr recognises the DW_CFA_def_cfa_expression patterns that
// compilers and linkers emit on x86-64; anything else is cfaOther. The
// patterns are matched, never evaluated.
func classifyCFAExpr(expr []byte) cfaRule {
	r := &reader{b: expr}
	op := r.u8()
	switch {
	case op == opBreg0+regRSP:
		off := r.sleb()
		if r.err != nil {
			break
		}
		if r.left() == 1 && r.u8() == opDeref {
			// CFA = *(rsp + off): the sigcontext's saved rsp.
			return cfaRule{kind: cfaSigFrame, off: off}
		}
		// ld's .plt: breg7 N; breg16 0; lit15; and; litK; ge; lit3; shl; plus
		r.pos = 1
		r.sleb()
		if r.u8() != opBreg0+regRA || r.sleb() != 0 || r.u8() != opLit0+15 || r.u8() != opAnd {
			break
		}
		k := r.u8()
		if k < opLit0 || k > opLit0+15 || r.u8() != opGe || r.u8() != opLit0+3 || r.u8() != opShl || r.u8() != opPlus || r.err != nil || r.left() != 0 {
			break
		}
		return cfaRule{kind: cfaPLTExpr, off: off, threshold: int64(k - opLit0)}
	case op == opBreg0+regRBP:
		// gcc's DRAP: CFA = *(rbp + off)
		off := r.sleb()
		if r.err == nil && r.left() == 1 && r.u8() == opDeref {
			return cfaRule{kind: cfaDerefRBP, off: off}
		}
	}
	return cfaRule{kind: cfaOther}
}

// classifyRegExpr recognises DW_CFA_expression for a register: saved at
// breg6/breg7 + off.
func classifyRegExpr(expr []byte) regRule {
	r := &reader{b: expr}
	op := r.u8()
	off := r.sleb()
	if r.err != nil || r.left() != 0 {
		return regRule{kind: regOther}
	}
	switch op {
	case opBreg0 + regRBP:
		return regRule{kind: regAtRBP, off: off}
	case opBreg0 + regRSP:
		return regRule{kind: regAtRSP, off: off}
	}
	return regRule{kind: regOther}
}

var (
	errStateStack = errors.New("remember_state nested too deep")
	errRestore    = errors.New("restore_state without remember_state")
	errBadOp      = errors.New("unknown call frame instruction")
	errLocBack    = errors.New("location moved backwards")
)

// program runs call frame instructions.
type program struct {
	c       *cie
	st      state
	initial *state // the CIE's state after its initial instructions
	stack   []state
	loc     uint64
	end     uint64
	emit    func(loc uint64, st *state) // nil while running a CIE
	secAddr uint64
	// setLoc decodes DW_CFA_set_loc operands.
	setLoc func(r *reader) (uint64, error)
	rd     reader
}

// maxOffset bounds the offsets the interpreter keeps (no frame is 2 GiB
// from its CFA). A hostile operand beyond it is out of range: converted
// to int64 or multiplied by the data alignment factor it could wrap into a
// plausible offset such as the RA's -8.
const maxOffset = 1 << 31

// uoff is an unsigned operand as an offset; one beyond maxOffset stays
// beyond it, for factor and regOff to reject.
func uoff(v uint64) int64 {
	if v > maxOffset {
		return maxOffset + 1
	}
	return int64(v) // #nosec G115 -- v <= maxOffset
}

// factor multiplies a factored offset by the CIE's data alignment factor;
// ok is false for an offset out of range.
func (p *program) factor(off int64) (v int64, ok bool) {
	if off < -maxOffset || off > maxOffset {
		return 0, false
	}
	return off * p.c.dataAlign, true // |dataAlign| <= 1<<16 (cie): no overflow
}

// atCFA is "saved at CFA + off×data alignment", or regOther out of range.
func (p *program) atCFA(off int64) regRule {
	v, ok := p.factor(off)
	if !ok {
		return regRule{kind: regOther}
	}
	return regRule{kind: regAtCFA, off: v}
}

// regOff is "CFA = reg + off", or cfaOther when the offset is out of
// range (!ok).
func regOff(reg uint64, off int64, ok bool) cfaRule {
	if !ok {
		return cfaRule{kind: cfaOther}
	}
	return cfaRule{kind: cfaRegOff, reg: reg, off: off}
}

func (p *program) setReg(reg uint64, rr regRule) {
	switch reg {
	case regRBP:
		p.st.rbp = rr
	case p.c.raReg:
		p.st.ra = rr
	}
}

func (p *program) restoreReg(reg uint64) {
	if p.initial == nil {
		p.setReg(reg, regRule{kind: regSame})
		return
	}
	switch reg {
	case regRBP:
		p.st.rbp = p.initial.rbp
	case p.c.raReg:
		p.st.ra = p.initial.ra
	}
}

// advance moves the location, emitting the row of the instructions so far.
// It reports false once the location reached the end of the FDE.
func (p *program) advance(to uint64) (bool, error) {
	if p.emit == nil { // CIE initial instructions: locations mean nothing
		return true, nil
	}
	if to < p.loc {
		return false, errLocBack
	}
	if to >= p.end {
		p.emit(p.loc, &p.st)
		p.loc = p.end
		return false, nil
	}
	if to > p.loc {
		p.emit(p.loc, &p.st)
		p.loc = to
	}
	return true, nil
}

// run executes prog. For an FDE it emits a row at every location change
// and one for the final state; on an error the rows so far stand and the
// caller marks the rest of the FDE unsupported.
func (p *program) run(prog []byte) error {
	// The program's own reader: one allocated here would escape (through
	// setLoc) once per FDE.
	r := &p.rd
	*r = reader{b: prog}
	for r.left() > 0 {
		op := r.u8()
		var err error
		more := true
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			more, err = p.advance(p.loc + uint64(op&0x3f)*p.c.codeAlign)
		case cfaOffset:
			p.setReg(uint64(op&0x3f), p.atCFA(uoff(r.uleb())))
		case cfaRestore:
			p.restoreReg(uint64(op & 0x3f))
		default:
			switch op {
			case cfaNop:
			case cfaSetLoc:
				if p.setLoc == nil { // in a CIE: meaningless, but skip its operand
					_, err = r.pointer(p.c.fdeEnc, 0, 0)
					break
				}
				var to uint64
				if to, err = p.setLoc(r); err == nil {
					more, err = p.advance(to)
				}
			case cfaAdvanceLoc1:
				more, err = p.advance(p.loc + uint64(r.u8())*p.c.codeAlign)
			case cfaAdvanceLoc2:
				more, err = p.advance(p.loc + uint64(r.u16())*p.c.codeAlign)
			case cfaAdvanceLoc4:
				more, err = p.advance(p.loc + uint64(r.u32())*p.c.codeAlign)
			case cfaOffsetExtended:
				reg, off := r.uleb(), r.uleb()
				p.setReg(reg, p.atCFA(uoff(off)))
			case cfaRestoreExtended:
				p.restoreReg(r.uleb())
			case cfaUndefined:
				p.setReg(r.uleb(), regRule{kind: regUndef})
			case cfaSameValue:
				p.setReg(r.uleb(), regRule{kind: regSame})
			case cfaRegister:
				reg := r.uleb()
				r.uleb()
				p.setReg(reg, regRule{kind: regOther})
			case cfaRememberState:
				if len(p.stack) >= maxRememberedStates {
					err = errStateStack
					break
				}
				p.stack = append(p.stack, p.st)
			case cfaRestoreState:
				if len(p.stack) == 0 {
					err = errRestore
					break
				}
				// The CFA rule is restored too (DWARF 5 makes that explicit;
				// gcc relies on it after epilogues).
				p.st = p.stack[len(p.stack)-1]
				p.stack = p.stack[:len(p.stack)-1]
			case cfaDefCFA:
				reg, off := r.uleb(), r.uleb()
				p.st.cfa = regOff(reg, uoff(off), uoff(off) <= maxOffset)
			case cfaDefCFASF:
				reg, off := r.uleb(), r.sleb()
				v, ok := p.factor(off)
				p.st.cfa = regOff(reg, v, ok)
			case cfaDefCFARegister:
				reg := r.uleb()
				if p.st.cfa.kind != cfaRegOff {
					p.st.cfa = cfaRule{kind: cfaOther}
				} else {
					p.st.cfa.reg = reg
				}
			case cfaDefCFAOffset:
				off := uoff(r.uleb())
				p.st.cfa = regOff(p.st.cfa.reg, off, p.st.cfa.kind == cfaRegOff && off <= maxOffset)
			case cfaDefCFAOffsetSF:
				v, ok := p.factor(r.sleb())
				p.st.cfa = regOff(p.st.cfa.reg, v, p.st.cfa.kind == cfaRegOff && ok)
			case cfaDefCFAExpression:
				n := r.uleb()
				expr := r.bytes(n)
				if r.err == nil {
					if n > maxExpressionBytes {
						p.st.cfa = cfaRule{kind: cfaOther}
					} else {
						p.st.cfa = classifyCFAExpr(expr)
					}
				}
			case cfaExpression:
				reg, n := r.uleb(), r.uleb()
				expr := r.bytes(n)
				if r.err == nil {
					if n > maxExpressionBytes {
						p.setReg(reg, regRule{kind: regOther})
					} else {
						p.setReg(reg, classifyRegExpr(expr))
					}
				}
			case cfaOffsetExtendedSF:
				reg, off := r.uleb(), r.sleb()
				p.setReg(reg, p.atCFA(off))
			case cfaValOffset:
				reg := r.uleb()
				r.uleb()
				p.setReg(reg, regRule{kind: regOther})
			case cfaValOffsetSF:
				reg := r.uleb()
				r.sleb()
				p.setReg(reg, regRule{kind: regOther})
			case cfaValExpression:
				reg, n := r.uleb(), r.uleb()
				r.bytes(n)
				p.setReg(reg, regRule{kind: regOther})
			case cfaGNUWindowSave:
			case cfaGNUArgsSize:
				r.uleb()
			case cfaGNUNegOffsetExtd:
				reg, off := r.uleb(), r.uleb()
				p.setReg(reg, p.atCFA(-uoff(off)))
			default:
				// Operands of an unknown instruction have unknown length:
				// nothing after it can be read.
				err = errBadOp
			}
		}
		if err == nil {
			err = r.err
		}
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
	if p.emit != nil && p.loc < p.end {
		p.emit(p.loc, &p.st)
	}
	return nil
}
