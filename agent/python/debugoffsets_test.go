package python

import (
	"encoding/binary"
	"errors"
	"testing"
)

// debugOffsetsOf writes a 3.13 _Py_DebugOffsets for l, as the interpreter's
// initialiser does.
func debugOffsetsOf(l Layout, hex uint64) []byte {
	b := make([]byte, DebugOffsetsSize)
	copy(b, debugCookie)
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	put(doVersion, hex)
	for off, v := range map[int]uint16{
		doRuntimeInterpHead: l.RuntimeInterpretersHead, doInterpNext: l.InterpNext, doInterpThreadsHead: l.InterpThreadsHead,
		doTstateNext: l.TstateNext, doTstateInterp: l.TstateInterp, doTstateCurrentFrame: l.TstateFrame,
		doTstateThreadID: l.TstateThreadID, doTstateNativeID: l.TstateNativeThreadID,
		doFramePrevious: l.FrameBack, doFrameExecutable: l.FrameCode, doFrameInstrPtr: l.FrameLasti, doFrameOwner: l.FrameOwner,
		doCodeFilename: l.CodeFilename, doCodeName: l.CodeName, doCodeQualname: l.CodeQualname, doCodeLinetable: l.CodeLineTable,
		doCodeFirstlineno: l.CodeFirstLineNo, doCodeAdaptive: l.CodeAdaptive, doObType: l.ObType, doTypeName: l.TypeName,
		doBytesSize: l.VarSize, doBytesSval: l.BytesData, doUnicodeState: l.UnicodeState, doUnicodeLength: l.UnicodeLength,
		doUnicodeASCIIObjSize: l.ASCIISize,
	} {
		put(off, uint64(v))
	}
	return b
}

func TestParseDebugOffsets(t *testing.T) {
	want := layouts[13]
	got, err := ParseDebugOffsets(debugOffsetsOf(want, 0x030d00f0))
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("layout\n%+v\nwant\n%+v", got, want)
	}
	// A later patch release that moved a field is followed, not the table.
	moved := want
	moved.TstateFrame, moved.CodeAdaptive = 80, 208
	if got, _ := ParseDebugOffsets(debugOffsetsOf(moved, 0x030d05f0)); got != moved {
		t.Errorf("moved fields not followed: %+v", got)
	}

	bad := func(name string, b []byte, wantErr error) {
		t.Helper()
		if _, err := ParseDebugOffsets(b); !errors.Is(err, wantErr) {
			t.Errorf("%s: %v, want %v", name, err, wantErr)
		}
	}
	b := debugOffsetsOf(want, 0x030d00f0)
	bad("short", b[:100], ErrBadInterpreter)
	c := append([]byte(nil), b...)
	c[0] = 'X'
	bad("cookie", c, ErrBadInterpreter)
	bad("3.14", debugOffsetsOf(want, 0x030e00f0), ErrUnsupported)
	c = append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(c[doFreeThreaded:], 1)
	bad("free-threaded", c, ErrUnsupported)
	c = append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(c[doTstateNext:], 1<<40)
	bad("huge offset", c, ErrBadInterpreter)
	c = append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(c[doFrameOwner:], 500)
	bad("frame beyond one read", c, ErrUnsupported)
}
