package cfi

import (
	"encoding/binary"
	"testing"
)

// asm assembles .eh_frame sections by hand, so that each DWARF pattern is
// tested with literal bytes.
type asm struct {
	data    []byte
	secAddr uint64
}

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		done := (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0)
		if !done {
			c |= 0x80
		}
		b = append(b, c)
		if done {
			return b
		}
	}
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// cie appends a CIE (code align 1, data align -8, RA 16, FDE encoding
// pcrel|sdata4) and returns its offset.
func (a *asm) cie(aug string, insns ...[]byte) int {
	off := len(a.data)
	body := cat([]byte{0, 0, 0, 0, 1}, []byte(aug), []byte{0}, uleb(1), sleb(-8), []byte{16})
	if aug != "" {
		body = append(body, 1, 0x1b) // augmentation data: R = pcrel|sdata4
	}
	body = cat(body, cat(insns...))
	a.data = binary.LittleEndian.AppendUint32(a.data, uint32(len(body)))
	a.data = append(a.data, body...)
	return off
}

// fde appends an FDE for [begin, begin+size).
func (a *asm) fde(cie int, begin uint64, size uint32, insns ...[]byte) {
	start := len(a.data)
	idField := start + 4
	body := binary.LittleEndian.AppendUint32(nil, uint32(idField-cie))
	pcField := uint64(start + 8)
	body = binary.LittleEndian.AppendUint32(body, uint32(int32(int64(begin)-int64(a.secAddr+pcField))))
	body = binary.LittleEndian.AppendUint32(body, size)
	body = append(body, 0) // augmentation data length
	body = cat(body, cat(insns...))
	a.data = binary.LittleEndian.AppendUint32(a.data, uint32(len(body)))
	a.data = append(a.data, body...)
}

// Instructions.
func advance(n uint8) []byte            { return []byte{cfaAdvanceLoc | n} }
func defCFAOffset(n uint64) []byte      { return cat([]byte{cfaDefCFAOffset}, uleb(n)) }
func defCFA(reg, n uint64) []byte       { return cat([]byte{cfaDefCFA}, uleb(reg), uleb(n)) }
func defCFAReg(reg uint64) []byte       { return cat([]byte{cfaDefCFARegister}, uleb(reg)) }
func offset(reg uint8, n uint64) []byte { return cat([]byte{cfaOffset | reg}, uleb(n)) }
func cfaExpr(e ...byte) []byte          { return cat([]byte{cfaDefCFAExpression}, uleb(uint64(len(e))), e) }
func regExpr(reg uint64, e ...byte) []byte {
	return cat([]byte{cfaExpression}, uleb(reg), uleb(uint64(len(e))), e)
}

// The CIE initial instructions of gcc on x86-64.
var gccCIE = [][]byte{defCFA(regRSP, 8), offset(regRA, 1)}

const text = 0x10000

func buildSection(t *testing.T, a *asm, debug bool) *Table {
	t.Helper()
	b := &builder{lim: DefaultLimits, segs: []execSeg{{vaddr: text, end: text + 0x10000}}, base: text}
	kind := ehFrame
	if debug {
		kind = debugFrame
	}
	b.parse(kind, a.data, a.secAddr)
	if b.err != nil {
		t.Fatal(b.err)
	}
	tab := &Table{Base: text, GapKind: KindFramePointer}
	tab.Rows = b.finish(KindFramePointer)
	tab.Stats = b.stats
	return tab
}

func expectRules(t *testing.T, tab *Table, want map[uint64]string) {
	t.Helper()
	for pc, w := range want {
		if got := tab.Lookup(pc).String(); got != w {
			t.Errorf("%#x: %s, want %s", pc, got, w)
		}
	}
}

func TestPushPopRememberRestore(t *testing.T) {
	a := &asm{secAddr: 0x2000}
	c := a.cie("zR", gccCIE...)
	// push rbp; mov rsp,rbp; ...; (remember) leave; ret; (restore) more body
	a.fde(c, text+0x100, 0x40,
		advance(1), defCFAOffset(16), offset(regRBP, 2),
		advance(3), defCFAReg(regRBP),
		advance(0x20), []byte{cfaRememberState}, defCFA(regRSP, 8),
		advance(1), []byte{cfaRestoreState})
	// A function with a frame of 40000 bytes (scaled) and one of 1 MiB
	// (beyond a row: unsupported).
	a.fde(c, text+0x200, 0x20, advance(4), defCFAOffset(40000), advance(4), defCFAOffset(1<<20))
	tab := buildSection(t, a, false)
	expectRules(t, tab, map[uint64]string{
		text + 0x100: "rsp+8",
		text + 0x101: "rsp+16 rbp@cfa-16",
		text + 0x104: "rbp+16 rbp@cfa-16",
		text + 0x124: "rsp+8 rbp@cfa-16",
		text + 0x125: "rbp+16 rbp@cfa-16",
		text + 0x13f: "rbp+16 rbp@cfa-16",
		text + 0x140: "frame-pointer", // the gap after the function
		text + 0x0ff: "frame-pointer", // before the first row
		text + 0x204: "rsp+40000",
		text + 0x208: "unsupported",
		text + 0x220: "frame-pointer",
	})
	if tab.Stats.FDEs != 2 || tab.Stats.BadEntries != 0 {
		t.Errorf("stats %+v", tab.Stats)
	}
}

func TestRecognisedExpressions(t *testing.T) {
	a := &asm{secAddr: 0x2000}
	c := a.cie("zR", gccCIE...)
	// ld's .plt FDE.
	a.fde(c, text+0x1000, 0x40, defCFAOffset(16), advance(6), defCFAOffset(24), advance(10),
		cfaExpr(opBreg0+regRSP, 8, opBreg0+regRA, 0, opLit0+15, opAnd, opLit0+11, opGe, opLit0+3, opShl, opPlus))
	// gcc's DRAP prologue: CFA in r10, then *(rbp-8), rbp saved at *rbp.
	a.fde(c, text+0x2000, 0x40,
		advance(5), defCFA(10, 0),
		advance(9), regExpr(regRBP, opBreg0+regRBP, 0),
		advance(3), cfaExpr(opBreg0+regRBP, 0x78, opDeref))
	// A general expression is not evaluated: unsupported.
	a.fde(c, text+0x3000, 0x10, advance(2), cfaExpr(opBreg0+regRSP, 8, opBreg0+regRSP, 0, opPlus))
	// The outermost frame: RA undefined.
	a.fde(c, text+0x4000, 0x10, advance(1), []byte{cfaUndefined}, uleb(regRA))
	// __restore_rt: a signal frame CIE.
	s := a.cie("zRS")
	a.fde(s, text+0x5000-1, 0x10,
		cfaExpr(opBreg0+regRSP, 0xa0, 0x01, opDeref),
		regExpr(regRBP, opBreg0+regRSP, 0xf8, 0x00))
	tab := buildSection(t, a, false)
	expectRules(t, tab, map[uint64]string{
		text + 0x1000: "rsp+16",
		text + 0x1006: "rsp+24",
		text + 0x1010: "plt(rsp+8, >=11)",
		text + 0x1030: "plt(rsp+8, >=11)",
		text + 0x2005: "unsupported", // CFA in r10
		text + 0x200e: "unsupported",
		text + 0x2011: "deref-rbp-8 rbp@rbp+0",
		text + 0x3002: "unsupported",
		text + 0x4001: "end",
		text + 0x4fff: "signal",
		text + 0x5000: "signal",
	})
	// DW_OP_breg6 0x78 is sleb -8.
	if got := tab.Lookup(text + 0x2011); got.CFAOffset != -8 {
		t.Errorf("DRAP offset %d", got.CFAOffset)
	}
}

func TestHostileEntries(t *testing.T) {
	a := &asm{secAddr: 0x2000}
	c := a.cie("zR", gccCIE...)
	a.fde(c, text+0x100, 0x10, advance(1), defCFAOffset(16))
	// Outside every executable segment: dropped.
	a.fde(c, 0x90000000, 0x10, advance(1), defCFAOffset(16))
	// remember_state without end: the program fails past the limit.
	var deep [][]byte
	for range maxRememberedStates + 1 {
		deep = append(deep, []byte{cfaRememberState})
	}
	a.fde(c, text+0x200, 0x10, append([][]byte{advance(2), defCFAOffset(32)}, deep...)...)
	// An FDE whose CIE pointer points at another FDE.
	start := len(a.data)
	a.fde(c, text+0x300, 0x10)
	binary.LittleEndian.PutUint32(a.data[start+4:], uint32(start+4-(start-0x20)))
	// restore_state with nothing remembered.
	a.fde(c, text+0x400, 0x10, advance(3), []byte{cfaRestoreState})
	good := len(a.data)
	// Last: an FDE whose length runs past the section.
	a.fde(c, text+0x500, 0x10)
	binary.LittleEndian.PutUint32(a.data[good:], 1<<30)

	tab := buildSection(t, a, false)
	expectRules(t, tab, map[uint64]string{
		text + 0x101: "rsp+16",
		text + 0x202: "unsupported", // failed program: nothing after the error is trusted
		text + 0x403: "unsupported",
		text + 0x500: "frame-pointer",
	})
	if tab.Stats.DroppedFDEs != 1 || tab.Stats.BadPrograms != 2 || tab.Stats.BadEntries < 2 {
		t.Errorf("stats %+v", tab.Stats)
	}
}

func TestDebugFrameFillsGaps(t *testing.T) {
	eh := &asm{secAddr: 0x2000}
	c := eh.cie("zR", gccCIE...)
	eh.fde(c, text+0x100, 0x10, advance(1), defCFAOffset(16))

	// .debug_frame: CIE id 0xffffffff, absolute 8-byte addresses.
	var dbg []byte
	cieBody := cat([]byte{0xff, 0xff, 0xff, 0xff, 4, 0, 8, 0}, uleb(1), sleb(-8), uleb(16), cat(gccCIE...))
	dbg = binary.LittleEndian.AppendUint32(dbg, uint32(len(cieBody)))
	dbg = append(dbg, cieBody...)
	addFDE := func(begin, size uint64, insns ...[]byte) {
		body := binary.LittleEndian.AppendUint32(nil, 0)
		body = binary.LittleEndian.AppendUint64(body, begin)
		body = binary.LittleEndian.AppendUint64(body, size)
		body = cat(body, cat(insns...))
		dbg = binary.LittleEndian.AppendUint32(dbg, uint32(len(body)))
		dbg = append(dbg, body...)
	}
	addFDE(text+0x100, 0x10, advance(1), defCFAOffset(48)) // overlaps .eh_frame: dropped
	addFDE(text+0x200, 0x10, advance(1), defCFAOffset(64))

	b := &builder{lim: DefaultLimits, segs: []execSeg{{vaddr: text, end: text + 0x10000}}, base: text}
	b.parse(ehFrame, eh.data, eh.secAddr)
	b.parse(debugFrame, dbg, 0)
	tab := &Table{Base: text, GapKind: KindFramePointer, Rows: b.finish(KindFramePointer), Stats: b.stats}
	expectRules(t, tab, map[uint64]string{
		text + 0x101: "rsp+16",
		text + 0x201: "rsp+64",
	})
	if tab.Stats.DebugFrameFDEs != 1 || tab.Stats.OverlappingFDEs != 1 {
		t.Errorf("stats %+v", tab.Stats)
	}
}

// TestRowsMerged: adjacent equal rules and padding between functions cost
// no rows.
func TestRowsMerged(t *testing.T) {
	a := &asm{secAddr: 0x2000}
	c := a.cie("zR", gccCIE...)
	a.fde(c, text+0x100, 0x10, advance(1), defCFAOffset(16), advance(1), defCFAOffset(16), advance(5), defCFAOffset(8))
	a.fde(c, text+0x118, 0x8) // 8 bytes of padding before it: no gap row
	tab := buildSection(t, a, false)
	var got []string
	for _, r := range tab.Rows {
		got = append(got, r.Rule().String())
	}
	want := []string{"rsp+8", "rsp+16", "rsp+8", "frame-pointer"}
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("rows %v, want %v", got, want)
		}
	}
}

// Offsets that only fit after wrapping: an int64 of a huge uleb, an
// int64 product with the data alignment factor, an int32 of a huge sleb
// each land on a plausible offset (-16, -8, 8) if not range-checked.
func TestOutOfRangeOffsets(t *testing.T) {
	a := &asm{secAddr: 0x2000}
	c := a.cie("zR", gccCIE...)
	offsetSF := func(reg uint64, n int64) []byte { return cat([]byte{cfaOffsetExtendedSF}, uleb(reg), sleb(n)) }
	// (2^61+1) × -8 wraps to -8: RA "at CFA-8".
	a.fde(c, text+0x100, 0x10, advance(1), offsetSF(regRA, 1<<61+1))
	// uleb 2^64-16 as an int64 is -16.
	a.fde(c, text+0x200, 0x10, advance(1), defCFA(regRSP, 1<<64-16))
	a.fde(c, text+0x300, 0x10, advance(1), defCFAOffset(1<<64-16))
	// def_cfa_sf: -(2^61+2) × -8 wraps to 16.
	a.fde(c, text+0x400, 0x10, advance(1), cat([]byte{cfaDefCFASF}, uleb(regRSP), sleb(-(1<<61+2))))
	// The PLT expression with breg7 2^32+8: an int32 of it is 8.
	a.fde(c, text+0x500, 0x10, advance(1), cat([]byte{cfaDefCFAExpression}, uleb(uint64(len(sleb(1<<32+8))+10)),
		[]byte{opBreg0 + regRSP}, sleb(1<<32+8), []byte{opBreg0 + regRA, 0, opLit0 + 15, opAnd, opLit0 + 11, opGe, opLit0 + 3, opShl, opPlus}))
	// In range, the same instructions still work.
	a.fde(c, text+0x600, 0x10, advance(1), defCFA(regRSP, 16), advance(1), offsetSF(regRA, 1))
	tab := buildSection(t, a, false)
	expectRules(t, tab, map[uint64]string{
		text + 0x100: "rsp+8",
		text + 0x101: "unsupported",
		text + 0x201: "unsupported",
		text + 0x301: "unsupported",
		text + 0x401: "unsupported",
		text + 0x501: "unsupported",
		text + 0x601: "rsp+16",
		text + 0x602: "rsp+16", // RA at 1 × -8
	})
	if tab.Stats.BadPrograms != 0 {
		t.Errorf("stats %+v", tab.Stats)
	}
}
