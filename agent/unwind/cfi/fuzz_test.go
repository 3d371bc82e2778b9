package cfi

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// fuzzLimits keep a fuzzed input cheap.
var fuzzLimits = Limits{MaxSectionBytes: 1 << 20, MaxFDEs: 1 << 12, MaxRows: 1 << 14, MaxCIEs: 256}

// seedVariants derives hostile files from testdata/tiny.elf: truncated,
// with .eh_frame's section size lying (larger than the file), with an FDE
// length lying, and without section headers (found through
// PT_GNU_EH_FRAME).
func seedVariants(t testing.TB) map[string][]byte {
	t.Helper()
	good, err := os.ReadFile("testdata/tiny.elf")
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	eh := f.Section(".eh_frame")
	// Section header i sits at e_shoff + i*64; sh_size is at +32.
	shoff := binary.LittleEndian.Uint64(good[0x28:])
	idx := -1
	for i, s := range f.Sections {
		if s == eh {
			idx = i
		}
	}
	out := map[string][]byte{"tiny": good, "truncated": good[:len(good)/2]}
	lying := bytes.Clone(good)
	binary.LittleEndian.PutUint64(lying[shoff+uint64(idx)*64+32:], 1<<40)
	out["section-size-lying"] = lying
	fdeLying := bytes.Clone(good)
	// The second entry of .eh_frame is the first FDE: claim 1 GiB.
	cieLen := binary.LittleEndian.Uint32(good[eh.Offset:])
	binary.LittleEndian.PutUint32(fdeLying[eh.Offset+4+uint64(cieLen):], 1<<30)
	out["fde-length-lying"] = fdeLying
	noSections := bytes.Clone(good)
	binary.LittleEndian.PutUint64(noSections[0x28:], 0) // e_shoff
	binary.LittleEndian.PutUint16(noSections[0x3c:], 0) // e_shnum
	binary.LittleEndian.PutUint16(noSections[0x3e:], 0) // e_shstrndx
	out["no-section-headers"] = noSections
	return out
}

func checkTable(t *testing.T, tab *Table) {
	for i, r := range tab.Rows {
		if r.Kind() >= numKinds {
			t.Fatalf("row %d: kind %d", i, r.Kind())
		}
		if i > 0 && r.PC <= tab.Rows[i-1].PC {
			t.Fatalf("rows not sorted at %d: %#x after %#x", i, r.PC, tab.Rows[i-1].PC)
		}
		tab.Lookup(tab.Base + uint64(r.PC))
	}
	if n := len(tab.Rows); n > 0 && tab.Rows[n-1].Kind() != tab.GapKind {
		t.Fatalf("last row %v, not a gap", tab.Rows[n-1].Rule())
	}
}

// FuzzBuild feeds whole files. Run it with -fuzzminimizetime 0 (or a few
// seconds): minimising a new 9 KB input takes the worker minutes, during
// which the fuzzer reports no executions.
func FuzzBuild(f *testing.F) {
	for _, v := range seedVariants(f) {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := build(bytes.NewReader(data), int64(len(data)), fuzzLimits)
		if err != nil {
			return
		}
		checkTable(t, tab)
	})
}

// FuzzSection feeds raw bytes as an .eh_frame or .debug_frame section.
func FuzzSection(f *testing.F) {
	a := &asm{secAddr: 0x2000}
	c := a.cie("zR", gccCIE...)
	a.fde(c, text+0x100, 0x40, advance(1), defCFAOffset(16), offset(regRBP, 2), advance(3), defCFAReg(regRBP),
		advance(0x20), []byte{cfaRememberState}, defCFA(regRSP, 8), advance(1), []byte{cfaRestoreState})
	a.fde(c, text+0x1000, 0x40, defCFAOffset(16), advance(6), defCFAOffset(24), advance(10),
		cfaExpr(opBreg0+regRSP, 8, opBreg0+regRA, 0, opLit0+15, opAnd, opLit0+11, opGe, opLit0+3, opShl, opPlus))
	f.Add(a.data, false)
	f.Add(a.data[:len(a.data)-3], false)
	f.Add(a.data, true)
	f.Fuzz(func(t *testing.T, data []byte, debug bool) {
		b := &builder{lim: fuzzLimits.withDefaults(), segs: []execSeg{{vaddr: text, end: text + 0x10000}}, base: text}
		kind := ehFrame
		if debug {
			kind = debugFrame
		}
		b.parse(kind, data, 0x2000)
		tab := &Table{Base: text, GapKind: KindFramePointer, Rows: b.finish(KindFramePointer)}
		checkTable(t, tab)
	})
}

// TestHostileSeeds: each hostile variant is rejected or gives a sane
// table, and the one without section headers finds the same table through
// .eh_frame_hdr.
func TestHostileSeeds(t *testing.T) {
	v := seedVariants(t)
	want, err := Build(bytes.NewReader(v["tiny"]), int64(len(v["tiny"])), Limits{})
	if err != nil || len(want.Rows) < 4 {
		t.Fatalf("tiny.elf: %v, %+v", err, want)
	}
	for name, data := range v {
		tab, err := Build(bytes.NewReader(data), int64(len(data)), Limits{})
		t.Logf("%s: err %v", name, err)
		switch name {
		case "section-size-lying":
			if err == nil {
				t.Errorf("%s: accepted", name)
			}
		case "no-section-headers":
			if err != nil || fmt.Sprint(tab.Rows) != fmt.Sprint(want.Rows) {
				t.Errorf("%s: %v, rows %v, want %v", name, err, tab, want.Rows)
			}
		case "fde-length-lying":
			// The CIE before it stands; nothing after a lying length does.
			if err != nil || len(tab.Rows) != 0 || tab.Stats.BadEntries != 1 {
				t.Errorf("%s: %v %+v", name, err, tab)
			}
		}
		if err == nil {
			checkTable(t, tab)
		}
	}
}

// TestWriteSeeds writes the hostile variants into the committed corpus
// (CFI_WRITE_SEEDS=1 go test -run TestWriteSeeds ./agent/unwind/cfi).
func TestWriteSeeds(t *testing.T) {
	dir := "testdata/fuzz/FuzzBuild"
	if os.Getenv("CFI_WRITE_SEEDS") != "1" {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) < 5 {
			t.Fatalf("committed corpus %s: %d entries, %v", dir, len(entries), err)
		}
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range seedVariants(t) {
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
