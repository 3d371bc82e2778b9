package cfi

import "fmt"

// Kind says how a row finds the canonical frame address (CFA), or why it
// cannot. The values are ABI with agent/bpf/include/unwind.h (UNWIND_KIND_*).
// The zero value is KindGap, so a zeroed row never claims a rule.
type Kind uint8

const (
	// KindGap: no unwind information covers the pc. The BPF unwinder ends
	// the stack there (reason "no row"), except where the file's gap rule
	// says frame pointers (Go binaries, whose own code has no table).
	KindGap Kind = iota
	// KindRSP: CFA = rsp + CFA.
	KindRSP
	// KindRBP: CFA = rbp + CFA.
	KindRBP
	// KindPLT: a lazy-binding PLT entry (the expression ld writes for .plt):
	// CFA = rsp + CFA + 8 if (pc & 15) >= RBP (the threshold), else rsp + CFA.
	KindPLT
	// KindDerefRBP: CFA = *(rbp + CFA): gcc's stack-realignment (DRAP)
	// prologue, where the CFA is stored in the frame (main with AVX locals).
	KindDerefRBP
	// KindSignal: the pc is a signal trampoline (__restore_rt): rsp points
	// at the kernel's ucontext, and rip, rsp and rbp of the interrupted code
	// are read from its sigcontext at fixed offsets.
	KindSignal
	// KindFramePointer: unwind this frame by its frame pointer.
	KindFramePointer
	// KindEnd: the outermost frame (the return address is undefined, as in
	// _start and a thread's start routine): a clean end of the stack.
	KindEnd
	// KindUnsupported: a rule the BPF unwinder does not implement (a CFA in
	// another register, a general DWARF expression, a return address that
	// is not at CFA-8).
	KindUnsupported
	numKinds
)

func (k Kind) String() string {
	switch k {
	case KindGap:
		return "gap"
	case KindRSP:
		return "rsp"
	case KindRBP:
		return "rbp"
	case KindPLT:
		return "plt"
	case KindDerefRBP:
		return "deref-rbp"
	case KindSignal:
		return "signal"
	case KindFramePointer:
		return "frame-pointer"
	case KindEnd:
		return "end"
	case KindUnsupported:
		return "unsupported"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// RBPRule says where the caller's rbp is. ABI with unwind.h (UNWIND_RBP_*).
type RBPRule uint8

const (
	// RBPSame: rbp is unchanged (not yet saved, or restored).
	RBPSame RBPRule = iota
	// RBPAtCFA: the caller's rbp is saved at CFA + 8*RBP.
	RBPAtCFA
	// RBPAtRBP: the caller's rbp is saved at rbp + 8*RBP (DRAP frames).
	RBPAtRBP
	// RBPUndefined: the caller's rbp cannot be recovered; a later rbp-based
	// rule ends the walk (reason "bad CFA").
	RBPUndefined
)

// Bits of Row.Flags; ABI with unwind.h.
const (
	flagKindMask = 0x0f
	flagRBPShift = 4
	flagRBPMask  = 0x30
	// FlagCFAScaled: Row.CFA is in units of 8 bytes (frames over 32 KiB).
	FlagCFAScaled = 0x40
)

// Row is one entry of a file's unwind table: from PC (relative to the
// table's Base) up to the next row's PC, the rule is the same. It is 8
// bytes, laid out as struct unwind_row in unwind.h, and written to the BPF
// table map as it is.
type Row struct {
	PC    uint32
	CFA   int16 // CFA offset in bytes (or units of 8 with FlagCFAScaled)
	Flags uint8 // Kind | RBPRule<<4 | FlagCFAScaled
	RBP   int8  // rbp offset in units of 8 bytes; KindPLT: the threshold
}

// Rule is a row without its pc: what the BPF unwinder does at a pc.
type Rule struct {
	Kind      Kind
	CFAOffset int32   // bytes
	RBP       RBPRule // ignored for KindPLT, KindSignal and the kinds without a CFA
	RBPOffset int32   // bytes; KindPLT: the threshold
}

// Kind returns the row's CFA kind.
func (r Row) Kind() Kind { return Kind(r.Flags & flagKindMask) }

// Rule decodes a row.
func (r Row) Rule() Rule {
	u := Rule{Kind: r.Kind(), CFAOffset: int32(r.CFA), RBP: RBPRule((r.Flags & flagRBPMask) >> flagRBPShift), RBPOffset: int32(r.RBP) * 8}
	if r.Flags&FlagCFAScaled != 0 {
		u.CFAOffset *= 8
	}
	if u.Kind == KindPLT {
		u.RBPOffset = int32(r.RBP)
	}
	return u
}

// pack encodes a rule for a row. Offsets that do not fit the row turn the
// rule into KindUnsupported rather than into a wrong one.
func pack(u Rule) (cfa int16, flags uint8, rbp int8) {
	unsupported := func() (int16, uint8, int8) { return 0, uint8(KindUnsupported), 0 }
	switch u.Kind {
	case KindGap, KindFramePointer, KindEnd, KindUnsupported, KindSignal:
		// No offsets: a canonical encoding so that equal rules dedupe.
		return 0, uint8(u.Kind), 0
	case KindPLT:
		if u.CFAOffset < 0 || u.CFAOffset > 1<<15-1 || u.RBPOffset < 0 || u.RBPOffset > 15 {
			return unsupported()
		}
		return int16(u.CFAOffset), uint8(KindPLT), int8(u.RBPOffset)
	case KindRSP, KindRBP, KindDerefRBP:
	default:
		return unsupported()
	}
	flags = uint8(u.Kind)
	switch {
	case u.CFAOffset >= -1<<15 && u.CFAOffset < 1<<15:
		cfa = int16(u.CFAOffset)
	case u.CFAOffset%8 == 0 && u.CFAOffset/8 >= -1<<15 && u.CFAOffset/8 < 1<<15:
		cfa, flags = int16(u.CFAOffset/8), flags|FlagCFAScaled // #nosec G115 -- the case checks the range
	default:
		return unsupported()
	}
	switch u.RBP {
	case RBPSame, RBPUndefined:
	case RBPAtCFA, RBPAtRBP:
		if u.RBPOffset%8 != 0 || u.RBPOffset/8 < -128 || u.RBPOffset/8 > 127 {
			// The caller's rbp is somewhere we cannot say: lose it, not
			// the frame.
			u.RBP = RBPUndefined
			break
		}
		rbp = int8(u.RBPOffset / 8) // #nosec G115 -- checked in -128..127 just above
	default:
		u.RBP = RBPUndefined
	}
	return cfa, flags | uint8(u.RBP)<<flagRBPShift, rbp
}

func (u Rule) String() string {
	switch u.Kind {
	case KindRSP, KindRBP, KindDerefRBP:
	case KindPLT:
		return fmt.Sprintf("plt(rsp%+d, >=%d)", u.CFAOffset, u.RBPOffset)
	default:
		return u.Kind.String()
	}
	s := fmt.Sprintf("%s%+d", u.Kind, u.CFAOffset)
	switch u.RBP {
	case RBPAtCFA:
		s += fmt.Sprintf(" rbp@cfa%+d", u.RBPOffset)
	case RBPAtRBP:
		s += fmt.Sprintf(" rbp@rbp%+d", u.RBPOffset)
	case RBPUndefined:
		s += " rbp=?"
	}
	return s
}
