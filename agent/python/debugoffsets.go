package python

import (
	"encoding/binary"
	"fmt"
)

// debugCookie opens _Py_DebugOffsets, the first field of _PyRuntime on 3.13+
// (Include/internal/pycore_runtime.h), written there for out-of-process
// debuggers and profilers.
const debugCookie = "xdebugpy"

// DebugOffsetsSize is sizeof(_Py_DebugOffsets) on 3.13: how many bytes of
// _PyRuntime ParseDebugOffsets needs.
const DebugOffsetsSize = 584

// Byte offsets of the fields used in 3.13's _Py_DebugOffsets: each is a
// uint64_t, grouped by structure.
const (
	doVersion             = 8
	doFreeThreaded        = 16
	doRuntimeInterpHead   = 40
	doInterpNext          = 64
	doInterpThreadsHead   = 72
	doTstateNext          = 168
	doTstateInterp        = 176
	doTstateCurrentFrame  = 184
	doTstateThreadID      = 192
	doTstateNativeID      = 200
	doFramePrevious       = 232
	doFrameExecutable     = 240
	doFrameInstrPtr       = 248
	doFrameOwner          = 264
	doCodeFilename        = 280
	doCodeName            = 288
	doCodeQualname        = 296
	doCodeLinetable       = 304
	doCodeFirstlineno     = 312
	doCodeAdaptive        = 344
	doObType              = 360
	doTypeName            = 376
	doBytesSize           = 520
	doBytesSval           = 528
	doUnicodeState        = 544
	doUnicodeLength       = 552
	doUnicodeASCIIObjSize = 560
)

// ParseDebugOffsets builds a 3.13 Layout from the first DebugOffsetsSize
// bytes of _PyRuntime (from the ELF file's initialised data, or from the
// process). It checks the cookie, that the version it records is 3.13, that
// the build is not free-threaded (whose frames and thread states this
// package does not read), that every offset fits the BPF side's 16-bit
// fields, and that together they describe structures the 3.13 ABI allows
// (Layout.check): a job can edit these bytes in its own copy of libpython. The table's 3.13 layout supplies what the debug offsets do not
// describe (the frame model, the line-table format, the compact-unicode
// header beyond PyASCIIObject).
func ParseDebugOffsets(b []byte) (Layout, error) {
	if len(b) < DebugOffsetsSize {
		return Layout{}, fmt.Errorf("%w: _Py_DebugOffsets: %d bytes, want %d", ErrBadInterpreter, len(b), DebugOffsetsSize)
	}
	if string(b[:8]) != debugCookie {
		return Layout{}, fmt.Errorf("%w: _Py_DebugOffsets: bad cookie %q", ErrBadInterpreter, b[:8])
	}
	u := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	hex := u(doVersion)
	major, minor := int(hex>>24&0xff), int(hex>>16&0xff) // #nosec G115 -- masked to a byte
	if major != 3 || minor != 13 {
		return Layout{}, fmt.Errorf("%w: _Py_DebugOffsets of CPython %d.%d (0x%x)", ErrUnsupported, major, minor, hex)
	}
	if u(doFreeThreaded) != 0 {
		return Layout{}, fmt.Errorf("%w: free-threaded CPython 3.13", ErrUnsupported)
	}
	l := layouts[13]
	var bad error
	o := func(off int) uint16 {
		v := u(off)
		if v >= NoOffset && bad == nil {
			bad = fmt.Errorf("%w: _Py_DebugOffsets field at %d: offset %d out of range", ErrBadInterpreter, off, v)
		}
		return uint16(v)
	}
	l.RuntimeInterpretersHead = o(doRuntimeInterpHead)
	l.InterpNext = o(doInterpNext)
	l.InterpThreadsHead = o(doInterpThreadsHead)
	l.TstateNext = o(doTstateNext)
	l.TstateInterp = o(doTstateInterp)
	l.TstateFrame = o(doTstateCurrentFrame)
	l.TstateThreadID = o(doTstateThreadID)
	l.TstateNativeThreadID = o(doTstateNativeID)
	l.FrameBack = o(doFramePrevious)
	l.FrameCode = o(doFrameExecutable)
	l.FrameLasti = o(doFrameInstrPtr)
	l.FrameOwner = o(doFrameOwner)
	l.CodeFilename = o(doCodeFilename)
	l.CodeName = o(doCodeName)
	l.CodeQualname = o(doCodeQualname)
	l.CodeLineTable = o(doCodeLinetable)
	l.CodeFirstLineNo = o(doCodeFirstlineno)
	l.CodeAdaptive = o(doCodeAdaptive)
	l.ObType = o(doObType)
	l.TypeName = o(doTypeName)
	l.VarSize = o(doBytesSize)
	l.BytesData = o(doBytesSval)
	l.UnicodeState = o(doUnicodeState)
	l.UnicodeLength = o(doUnicodeLength)
	ascii := o(doUnicodeASCIIObjSize)
	if bad != nil {
		return Layout{}, bad
	}
	// The 3.13 ABI fixes PyASCIIObject and PyCompactUnicodeObject (the
	// table's sizes); the offsets only repeat the first.
	if ascii != l.ASCIISize {
		return Layout{}, fmt.Errorf("%w: _Py_DebugOffsets: sizeof(PyASCIIObject) %d, the 3.13 ABI has %d", ErrBadInterpreter, ascii, l.ASCIISize)
	}
	if err := l.check(); err != nil {
		return Layout{}, fmt.Errorf("_Py_DebugOffsets: %w", err)
	}
	// The BPF walk reads a frame in one copy of frameReadMax bytes.
	for _, f := range []struct{ off, size uint16 }{{l.FrameOwner, 1}, {l.FrameLasti, 8}, {l.FrameCode, 8}, {l.FrameBack, 8}} {
		if int(f.off)+int(f.size) > int(frameReadMax) {
			return Layout{}, fmt.Errorf("%w: _Py_DebugOffsets: frame fields beyond %d bytes", ErrUnsupported, frameReadMax)
		}
	}
	return l, nil
}
