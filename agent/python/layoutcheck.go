package python

import "fmt"

// A layout may come from a process (3.13's _Py_DebugOffsets, in a file the
// job can copy and edit), so before anything reads with it every offset is
// checked, in int, against the structure it lies in: what the readers
// index (a code object's header, a str's header, a bytes object) is sized
// from these bounds and nothing else.
const (
	// maxCodeHeader bounds the fixed part of a PyCodeObject that readCode
	// copies (co_code_adaptive starts at 184-200 bytes on 3.11-3.13).
	maxCodeHeader = 512
	// maxStrHeader bounds a compact str's header (72 bytes on 3.9-3.11).
	maxStrHeader = 128
	// pyVarObjectSize: every object's fields follow ob_refcnt, ob_type
	// and ob_size on LP64.
	pyVarObjectSize = 24
)

// check reports whether l describes structures that a supported CPython
// could have: fields aligned as their C types are on LP64, inside their
// structure and within the bounds the readers allocate. A layout that
// fails it is never used to read a process.
func (l *Layout) check() error {
	bad := func(what string, off uint16, why string) error {
		return fmt.Errorf("%w: layout: %s at %d %s", ErrBadInterpreter, what, off, why)
	}
	// A field of size bytes, aligned to size, at or above lo, ending at or
	// below hi; opt: NoOffset stands for "this version has none".
	field := func(what string, off uint16, size, lo, hi int, opt bool) error {
		if off == NoOffset {
			if opt {
				return nil
			}
			return bad(what, off, "missing")
		}
		o := int(off)
		switch {
		case o%size != 0:
			return bad(what, off, fmt.Sprintf("not %d-aligned", size))
		case o < lo:
			return bad(what, off, fmt.Sprintf("inside the structure's first %d bytes", lo))
		case o+size > hi:
			return bad(what, off, fmt.Sprintf("beyond the structure's %d bytes", hi))
		}
		return nil
	}
	// Pointers and C longs of the runtime, interpreter and thread states,
	// read only by the BPF walk and by validate, 8 bytes at a time.
	type f struct {
		what     string
		off      uint16
		size, lo int
		opt      bool
	}
	state := []f{
		{"interpreters.head", l.RuntimeInterpretersHead, 8, 0, false},
		{"interp next", l.InterpNext, 8, 0, false},
		{"interp threads head", l.InterpThreadsHead, 8, 0, false},
		{"tstate next", l.TstateNext, 8, 0, false},
		{"tstate interp", l.TstateInterp, 8, 0, false},
		{"tstate frame", l.TstateFrame, 8, 0, false},
		{"cframe current_frame", l.CFrameCurrentFrame, 8, 0, true},
		{"tstate thread_id", l.TstateThreadID, 8, 0, false},
		{"tstate native_thread_id", l.TstateNativeThreadID, 8, 0, true},
	}
	for _, s := range state {
		if err := field(s.what, s.off, s.size, s.lo, int(NoOffset), s.opt); err != nil {
			return err
		}
	}
	// The code object: readCode copies its header up to the end of the
	// highest field it reads, which must precede the instructions.
	codeEnd := maxCodeHeader
	if l.CodeAdaptive != NoOffset {
		if err := field("co_code_adaptive", l.CodeAdaptive, 8, pyVarObjectSize, maxCodeHeader, false); err != nil {
			return err
		}
		codeEnd = int(l.CodeAdaptive)
	}
	code := []f{
		{"co_filename", l.CodeFilename, 8, pyVarObjectSize, false},
		{"co_name", l.CodeName, 8, pyVarObjectSize, false},
		{"co_qualname", l.CodeQualname, 8, pyVarObjectSize, true},
		{"co_linetable", l.CodeLineTable, 8, pyVarObjectSize, false},
		{"co_firstlineno", l.CodeFirstLineNo, 4, pyVarObjectSize, false},
	}
	for _, c := range code {
		if err := field(c.what, c.off, c.size, c.lo, codeEnd, c.opt); err != nil {
			return err
		}
	}
	// Object headers: the same on every supported version (LP64, no
	// Py_TRACE_REFS).
	for _, h := range []struct {
		what      string
		off, want uint16
	}{{"ob_type", l.ObType, 8}, {"tp_name", l.TypeName, 24}, {"ob_size", l.VarSize, 16}, {"ob_sval", l.BytesData, 32},
		{"str length", l.UnicodeLength, 16}, {"str state", l.UnicodeState, 32}} {
		if h.off != h.want {
			return bad(h.what, h.off, fmt.Sprintf("where every CPython 3 has it at %d", h.want))
		}
	}
	// str: compact ASCII data follows PyASCIIObject (40 bytes on 3.12+, 48
	// before), other compact data PyCompactUnicodeObject (16 or 24 more).
	if err := field("sizeof(PyASCIIObject)", l.ASCIISize, 8, int(l.UnicodeState)+4, maxStrHeader, false); err != nil {
		return err
	}
	if err := field("sizeof(PyCompactUnicodeObject)", l.CompactSize, 8, int(l.ASCIISize)+16, maxStrHeader, false); err != nil {
		return err
	}
	// Frames: the BPF walk copies one span of at most frameReadMax bytes;
	// NewProcInfo places each field in it.
	for _, fr := range []f{{"frame previous", l.FrameBack, 8, 0, false}, {"frame code", l.FrameCode, 8, 0, false}} {
		if err := field(fr.what, fr.off, fr.size, 0, int(NoOffset), fr.opt); err != nil {
			return err
		}
	}
	lasti := 8
	if l.Frames == FrameObjects {
		lasti = 4
	}
	if err := field("frame instruction", l.FrameLasti, lasti, 0, int(NoOffset), false); err != nil {
		return err
	}
	if l.Frames != FrameObjects && l.Frames != InterpreterFrames {
		return fmt.Errorf("%w: layout: frame model %d", ErrBadInterpreter, l.Frames)
	}
	if l.Lines != LineLnotab && l.Lines != LineTable310 && l.Lines != LineLocations {
		return fmt.Errorf("%w: layout: line-table format %d", ErrBadInterpreter, l.Lines)
	}
	return nil
}
