package python

import "fmt"

// Mirrors of python.bpf.h; walktest checks them against the compiled
// object's BTF.
const (
	// MaxFrames is PY_MAX_FRAMES: frames (shims included) kept per stack.
	MaxFrames = 64
	// frameReadMax is PY_FRAME_READ: bytes of a frame read at once.
	frameReadMax = 128
	// procNativeTID is PY_PROC_NATIVE_TID.
	procNativeTID = 1 << 0
	// StackTruncated is PY_STACK_TRUNCATED.
	StackTruncated = 1 << 0
)

// Status is enum py_status: the outcome of one walk.
type Status uint32

const (
	StatusOK         Status = 0 // frames, possibly none (the thread runs no Python now)
	StatusNotPython  Status = 1 // not a known CPython process
	StatusNoTstate   Status = 2 // the thread has no thread state: a native thread
	StatusThreadRead Status = 3 // reading the runtime or the thread list failed
	StatusThreadsMax Status = 4 // thread not among the first PY_MAX_THREADS states
	StatusFrameRead  Status = 5 // a frame read failed: the frames before it are kept
	StatusMax        Status = 6
)

var statusNames = [...]string{"ok", "not_python", "no_thread_state", "thread_read", "threads_max", "frame_read"}

// String is the status as a metric label value.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status_%d", uint32(s))
}

// ProcInfo is struct py_proc, the value of py_procs keyed by tgid: what the
// walk needs of one process. Field order and sizes are the C struct's.
type ProcInfo struct {
	StartBoottime      uint64
	MM                 uint64
	Runtime            uint64
	Flags              uint32
	RuntimeInterpHead  uint16
	CodeCheck          uint16
	InterpThreadsHead  uint16
	TstateNext         uint16
	TstateFrame        uint16
	CFrameCurrentFrame uint16
	TstateID           uint16
	FrameReadOff       uint16
	FrameReadLen       uint16
	FrameBack          uint16
	FrameCode          uint16
	FrameLasti         uint16
	FrameIsEntry       uint16
	FrameOwner         uint16
	LastiBase          uint64
}

// Event is struct py_event: a process the walk did not know, or (ParentTGID
// set) a forked child that the BPF side set up from its parent's entry.
type Event struct {
	TGID                uint32
	ParentTGID          uint32
	StartBoottime       uint64
	MM                  uint64
	ParentStartBoottime uint64
	Flags               uint32 // EventPython, EventNative
	Pad                 uint32
}

// Event.Flags (PY_EVENT_*): who announced the process. One event a second
// per process serves both.
const (
	EventPython = 1 << 0 // the walk has no (current) py_procs entry for it
	EventNative = 1 << 1 // the unwinder has no tables loaded for it
)

// RawFrame is struct py_frame.
type RawFrame struct {
	Code    uint64
	Check   uint64
	Lasti   int32
	Owner   uint8
	IsEntry uint8
	Pad     uint16
}

// RawStack is struct py_stack.
type RawStack struct {
	Len    uint32
	Status uint32
	Flags  uint32
	Pad    uint32
	Frames [MaxFrames]RawFrame
}

// NewProcInfo fills a ProcInfo for a process running layout l with its
// _PyRuntime at runtime. start and mm are the process's identity as BPF sees
// it (the leader's start_boottime in ns, task->mm from its Event).
func NewProcInfo(l Layout, arch Arch, runtime, start, mm uint64) (ProcInfo, error) {
	p := ProcInfo{
		StartBoottime: start, MM: mm, Runtime: runtime,
		RuntimeInterpHead:  l.RuntimeInterpretersHead,
		InterpThreadsHead:  l.InterpThreadsHead,
		TstateNext:         l.TstateNext,
		TstateFrame:        l.TstateFrame,
		CFrameCurrentFrame: l.CFrameCurrentFrame,
		CodeCheck:          l.CodeFilename,
	}
	if l.CodeName != l.CodeFilename+8 {
		return ProcInfo{}, fmt.Errorf("%w: co_name does not follow co_filename", ErrUnsupported)
	}
	switch {
	case l.TstateNativeThreadID != NoOffset:
		// gettid(), which the walk reads from the task in its own pid
		// namespace: the same on every architecture.
		p.Flags |= procNativeTID
		p.TstateID = l.TstateNativeThreadID
	case arch == AMD64:
		// pthread_self() is the thread pointer (fs base) on x86-64, with
		// glibc and with musl.
		p.TstateID = l.TstateThreadID
	default:
		// On arm64 pthread_self() sits sizeof(struct pthread) below the
		// thread pointer, which depends on the C library's version.
		return ProcInfo{}, fmt.Errorf("%w: CPython %d.%d on %s (no native_thread_id)", ErrUnsupported, l.Major, l.Minor, arch)
	}
	// One read per frame, from the lowest field to the end of the highest.
	fields := []uint16{l.FrameBack, l.FrameCode, l.FrameLasti}
	if l.FrameOwner != NoOffset {
		fields = append(fields, l.FrameOwner)
	}
	if l.FrameIsEntry != NoOffset {
		fields = append(fields, l.FrameIsEntry)
	}
	lastiSize := uint16(8) // a pointer into the code object (3.11+)
	if l.Frames == FrameObjects {
		lastiSize = 4 // f_lasti, an int
	} else {
		p.LastiBase = ^uint64(0)
	}
	lo := fields[0]
	hi := max(l.FrameBack+8, l.FrameCode+8, l.FrameLasti+lastiSize)
	for i, f := range fields {
		lo = min(lo, f)
		if i >= 3 {
			hi = max(hi, f+1)
		}
	}
	p.FrameReadOff, p.FrameReadLen = lo, hi-lo
	rel := func(off uint16, size uint16) (uint16, error) {
		r := off - lo
		if off < lo || r+size > p.FrameReadLen || r%size != 0 {
			return 0, fmt.Errorf("%w: frame field at %d does not fit one aligned read", ErrUnsupported, off)
		}
		return r, nil
	}
	var err error
	if p.FrameReadLen > frameReadMax {
		return ProcInfo{}, fmt.Errorf("%w: frame fields span %d bytes, more than %d", ErrUnsupported, p.FrameReadLen, frameReadMax)
	}
	if p.FrameBack, err = rel(l.FrameBack, 8); err != nil {
		return ProcInfo{}, err
	}
	if p.FrameCode, err = rel(l.FrameCode, 8); err != nil {
		return ProcInfo{}, err
	}
	// The walk reads 8 bytes at lasti either way (from its 128-byte buffer)
	// and, for an int, keeps the low half.
	if p.FrameLasti, err = rel(l.FrameLasti, lastiSize); err != nil {
		return ProcInfo{}, err
	}
	if l.Frames == FrameObjects && p.FrameLasti%8 != 0 {
		return ProcInfo{}, fmt.Errorf("%w: f_lasti at %d not 8-aligned in the frame read", ErrUnsupported, l.FrameLasti)
	}
	// Absent bytes point at the first byte read: junk that Decode ignores.
	p.FrameOwner, p.FrameIsEntry = 0, 0
	if l.FrameOwner != NoOffset {
		p.FrameOwner = l.FrameOwner - lo
	}
	if l.FrameIsEntry != NoOffset {
		p.FrameIsEntry = l.FrameIsEntry - lo
	}
	return p, nil
}
