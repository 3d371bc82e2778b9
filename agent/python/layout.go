package python

import "fmt"

// NoOffset marks a field that a version does not have.
const NoOffset = 0xffff

// FrameModel is how a version chains its frames.
type FrameModel uint8

const (
	// FrameObjects (3.9, 3.10): tstate->frame is a PyFrameObject; every
	// Python frame runs in its own C call of the eval loop, and f_lasti is an
	// int (bytes on 3.9, code units on 3.10).
	FrameObjects FrameModel = 1
	// InterpreterFrames (3.11+): _PyInterpreterFrame, whose instruction is a
	// pointer into the code object's co_code_adaptive; one C call of the
	// eval loop runs several frames, up to an entry frame (is_entry on 3.11,
	// a FRAME_OWNED_BY_CSTACK shim below it on 3.12+).
	InterpreterFrames FrameModel = 2
)

// LineFormat is a version's line-number table format.
type LineFormat uint8

const (
	LineLnotab    LineFormat = 1 // 3.9 co_lnotab
	LineTable310  LineFormat = 2 // 3.10 co_linetable
	LineLocations LineFormat = 3 // 3.11+ co_linetable (location table)
)

// Layout is everything the walk and the code-object reader need to know of
// one CPython minor version: byte offsets of fields, NoOffset where a version
// lacks the field. The offsets are the same on x86-64 and arm64 for every
// version here (the fields used precede anything whose size differs between
// the two ABIs, such as pthread_mutex_t); layout_test.go holds the table to
// the interpreters' own headers on both targets.
type Layout struct {
	Major, Minor int

	// _PyRuntimeState
	RuntimeInterpretersHead uint16 // interpreters.head
	// PyInterpreterState
	InterpNext        uint16 // next
	InterpThreadsHead uint16 // tstate_head (3.9, 3.10), threads.head (3.11+)
	// PyThreadState
	TstateNext   uint16
	TstateInterp uint16
	// TstateFrame is frame (3.9, 3.10), cframe (3.11, 3.12: a pointer to a
	// _PyCFrame, whose current_frame is at CFrameCurrentFrame), or
	// current_frame (3.13).
	TstateFrame          uint16
	CFrameCurrentFrame   uint16
	TstateThreadID       uint16 // thread_id: pthread_self() of the thread
	TstateNativeThreadID uint16 // native_thread_id: gettid() (3.11+)

	Frames FrameModel
	// PyFrameObject (3.9, 3.10) or _PyInterpreterFrame (3.11+)
	FrameBack    uint16 // f_back / previous
	FrameCode    uint16 // f_code / f_executable (3.13)
	FrameLasti   uint16 // f_lasti (int) / prev_instr (3.11, 3.12) / instr_ptr (3.13)
	FrameIsEntry uint16 // is_entry (3.11)
	FrameOwner   uint16 // owner (3.11+)

	// PyCodeObject
	CodeFilename    uint16
	CodeName        uint16
	CodeQualname    uint16 // 3.11+
	CodeLineTable   uint16 // co_lnotab (3.9), co_linetable (3.10+)
	CodeFirstLineNo uint16
	CodeAdaptive    uint16 // co_code_adaptive (3.11+): where instructions start
	Lines           LineFormat

	// Objects
	ObType        uint16 // PyObject.ob_type
	TypeName      uint16 // PyTypeObject.tp_name
	VarSize       uint16 // PyVarObject.ob_size
	BytesData     uint16 // PyBytesObject.ob_sval
	UnicodeLength uint16 // PyASCIIObject.length
	UnicodeState  uint16 // PyASCIIObject.state
	ASCIISize     uint16 // sizeof(PyASCIIObject): compact ASCII data follows
	CompactSize   uint16 // sizeof(PyCompactUnicodeObject): other compact data follows
}

// FrameOwnedByCStack is 3.12+'s owner value of the shim frame that each C
// call of the eval loop pushes first (Include/internal/pycore_frame.h).
const FrameOwnedByCStack = 3

// layouts is the one table of supported versions, from each version's
// Include/ and Include/internal headers (3.9.18, 3.10.13, 3.11.7 and
// Debian's 3.11.2, 3.12.1, 3.13.0). Patch releases do not move these fields.
var layouts = map[int]Layout{
	9: {
		Major: 3, Minor: 9,
		RuntimeInterpretersHead: 32,
		InterpNext:              0, InterpThreadsHead: 8,
		TstateNext: 8, TstateInterp: 16, TstateFrame: 24, CFrameCurrentFrame: NoOffset,
		TstateThreadID: 176, TstateNativeThreadID: NoOffset,
		Frames:    FrameObjects,
		FrameBack: 24, FrameCode: 32, FrameLasti: 104, FrameIsEntry: NoOffset, FrameOwner: NoOffset,
		CodeFilename: 104, CodeName: 112, CodeQualname: NoOffset, CodeLineTable: 120,
		CodeFirstLineNo: 40, CodeAdaptive: NoOffset, Lines: LineLnotab,
		ASCIISize: 48, CompactSize: 72,
	},
	10: {
		Major: 3, Minor: 10,
		RuntimeInterpretersHead: 32,
		InterpNext:              0, InterpThreadsHead: 8,
		TstateNext: 8, TstateInterp: 16, TstateFrame: 24, CFrameCurrentFrame: NoOffset,
		TstateThreadID: 176, TstateNativeThreadID: NoOffset,
		Frames:    FrameObjects,
		FrameBack: 24, FrameCode: 32, FrameLasti: 96, FrameIsEntry: NoOffset, FrameOwner: NoOffset,
		CodeFilename: 104, CodeName: 112, CodeQualname: NoOffset, CodeLineTable: 120,
		CodeFirstLineNo: 40, CodeAdaptive: NoOffset, Lines: LineTable310,
		ASCIISize: 48, CompactSize: 72,
	},
	11: {
		Major: 3, Minor: 11,
		RuntimeInterpretersHead: 40,
		InterpNext:              0, InterpThreadsHead: 16,
		TstateNext: 8, TstateInterp: 16, TstateFrame: 56, CFrameCurrentFrame: 8,
		TstateThreadID: 152, TstateNativeThreadID: 160,
		Frames:    InterpreterFrames,
		FrameBack: 48, FrameCode: 32, FrameLasti: 56, FrameIsEntry: 68, FrameOwner: 69,
		CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeLineTable: 136,
		CodeFirstLineNo: 72, CodeAdaptive: 184, Lines: LineLocations,
		ASCIISize: 48, CompactSize: 72,
	},
	12: {
		Major: 3, Minor: 12,
		RuntimeInterpretersHead: 40,
		InterpNext:              0, InterpThreadsHead: 72,
		TstateNext: 8, TstateInterp: 16, TstateFrame: 56, CFrameCurrentFrame: 0,
		TstateThreadID: 136, TstateNativeThreadID: 144,
		Frames:    InterpreterFrames,
		FrameBack: 8, FrameCode: 0, FrameLasti: 56, FrameIsEntry: NoOffset, FrameOwner: 70,
		CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeLineTable: 136,
		CodeFirstLineNo: 68, CodeAdaptive: 192, Lines: LineLocations,
		ASCIISize: 40, CompactSize: 56,
	},
	13: {
		Major: 3, Minor: 13,
		RuntimeInterpretersHead: 632,
		InterpNext:              7264, InterpThreadsHead: 7344,
		TstateNext: 8, TstateInterp: 16, TstateFrame: 72, CFrameCurrentFrame: NoOffset,
		TstateThreadID: 152, TstateNativeThreadID: 160,
		Frames:    InterpreterFrames,
		FrameBack: 8, FrameCode: 0, FrameLasti: 56, FrameIsEntry: NoOffset, FrameOwner: 70,
		CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeLineTable: 136,
		CodeFirstLineNo: 68, CodeAdaptive: 200, Lines: LineLocations,
		ASCIISize: 40, CompactSize: 56,
	},
}

// Fields common to every version (Include/object.h, bytesobject.h,
// unicodeobject.h on LP64).
func init() {
	for k, l := range layouts {
		l.ObType, l.TypeName, l.VarSize, l.BytesData = 8, 24, 16, 32
		l.UnicodeLength, l.UnicodeState = 16, 32
		layouts[k] = l
	}
}

// Arch is a CPU architecture the agent runs on.
type Arch string

const (
	AMD64 Arch = "amd64"
	ARM64 Arch = "arm64"
)

// LayoutFor returns the table's layout of CPython major.minor on arch.
func LayoutFor(major, minor int, arch Arch) (Layout, error) {
	if arch != AMD64 && arch != ARM64 {
		return Layout{}, fmt.Errorf("%w: architecture %q", ErrUnsupported, arch)
	}
	l, ok := layouts[minor]
	if major != 3 || !ok {
		return Layout{}, fmt.Errorf("%w: CPython %d.%d", ErrUnsupported, major, minor)
	}
	return l, nil
}

// SupportedVersions lists the minor versions of CPython 3 in the table.
func SupportedVersions() []int { return []int{9, 10, 11, 12, 13} }
