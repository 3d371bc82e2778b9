package python

import (
	"encoding/binary"
	"errors"
	"testing"
)

// The recipe: a copy of libpython3.13.so with 8 bytes of
// _PyRuntime's _Py_DebugOffsets changed. The interpreter runs as before (it
// never reads its own debug offsets); what the agent reads with them must
// not crash it.
var forgeries = []struct {
	name  string
	field int // byte offset in _Py_DebugOffsets
	value uint64
}{
	// readString indexes its 56-byte header at the length offset.
	{"unicode length beyond the str header", doUnicodeLength, 4096},
	{"unicode state beyond the str header", doUnicodeState, 0xfff0},
	// readCode's header size, max(offsets)+8 in 16 bits, wraps.
	{"code field near 0xffff", doCodeLinetable, 0xfff8},
	{"first line near 0xffff", doCodeFirstlineno, 0xfffe},
	{"object type near 0xffff", doObType, 0xfffa},
	// CompactSize - ASCIISize + ascii wraps.
	{"ascii object size 0", doUnicodeASCIIObjSize, 0},
	{"ascii object size huge", doUnicodeASCIIObjSize, 0xfffe},
	{"bytes size beyond its data", doBytesSize, 0x8000},
	{"bytes data before its size", doBytesSval, 8},
	{"misaligned code pointer", doCodeName, 121},
}

func TestParseDebugOffsetsRefusesForgeries(t *testing.T) {
	for _, f := range forgeries {
		b := debugOffsetsOf(layouts[13], 0x030d00f0)
		binary.LittleEndian.PutUint64(b[f.field:], f.value)
		if l, err := ParseDebugOffsets(b); !errors.Is(err, ErrBadInterpreter) {
			t.Errorf("%s: accepted (%v), want %v; layout %+v", f.name, err, ErrBadInterpreter, l)
		}
	}
}

// forgedLayout is l with one field as a forgery sets it, as the unchecked
// parser made it.
func forgedLayout(l Layout, field int, v uint64) Layout {
	o := uint16(v) // #nosec G115 -- what the old parser kept of it
	switch field {
	case doUnicodeLength:
		l.UnicodeLength = o
	case doUnicodeState:
		l.UnicodeState = o
	case doCodeLinetable:
		l.CodeLineTable = o
	case doCodeFirstlineno:
		l.CodeFirstLineNo = o
	case doObType:
		l.ObType = o
	case doUnicodeASCIIObjSize:
		l.CompactSize = l.CompactSize - l.ASCIISize + o
		l.ASCIISize = o
	case doBytesSize:
		l.VarSize = o
	case doBytesSval:
		l.BytesData = o
	case doCodeName:
		l.CodeName = o
	}
	return l
}

// A layout that does not pass the checks is never used to read a process:
// the process keeps native stacks, counted.
func TestTrackerRefusesForgedLayouts(t *testing.T) {
	for _, fg := range forgeries {
		f := newFakeProc(t, nil)
		l := forgedLayout(f.l, fg.field, fg.value)
		f.layout = &l
		f.notify(1)
		if _, ok := f.procs[42]; ok || f.tracker.Stats().Skipped["bad_interpreter"] != 1 {
			t.Errorf("%s: set up %v, skipped %v", fg.name, ok, f.tracker.Stats().Skipped)
		}
	}
}

// Whatever layout the reader is given, it never indexes past what it read
// (every offset is checked against the buffer it indexes) and reads no
// more than its bounds: at worst it names the process's own bytes, which
// only the process's own profile shows (and the tracker refuses such a
// layout before reading). Unchecked, the first forgery panicked with
// "slice bounds out of range [4096:56]" in readString under readCode and
// Resolve, as the agent did.
func TestForgedLayoutsDoNotCrashTheReader(t *testing.T) {
	for _, fg := range forgeries {
		f := newFakeProc(t, nil)
		l := forgedLayout(f.l, fg.field, fg.value)
		c, err := readCode(f.mem, &l, codeType, code0)
		if err == nil && (len(c.name) > 4*maxStringChars || len(c.file) > 4*maxStringChars || c.tableLen > maxLineTable) {
			t.Errorf("%s: read %d, %d and %d bytes", fg.name, len(c.name), len(c.file), c.tableLen)
		}
		for _, addr := range []uint64{0x60000, 0x62000} {
			if s, err := readString(f.mem, &l, addr); err == nil && len(s) > 4*maxStringChars {
				t.Errorf("%s: a string of %d bytes", fg.name, len(s))
			}
		}
	}
}
