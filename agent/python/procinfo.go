package python

import (
	"encoding/binary"
	"fmt"
)

// ProcInfo is struct py_proc (python.h), a CPython process's data in the
// capture's process table: what the walk needs of it.
type ProcInfo = typesPyProc

// Kind is CPython's kind in the capture (INTERP_PYTHON).
const Kind = uint32(typesPyKindINTERP_PYTHON)

const (
	// frameReadMax is PY_FRAME_READ: bytes of a frame read at once.
	frameReadMax  = uint16(len(typesPyFrameBuf{}.B))
	procNativeTID = uint32(typesPyProcFlagPY_PROC_NATIVE_TID)
)

// encode is p as the table holds it.
func (p ProcInfo) encode() []byte {
	b, err := binary.Append(nil, binary.LittleEndian, p)
	if err != nil {
		panic(err) // a fixed-size struct of integers always encodes
	}
	return b
}

// NewProcInfo fills a ProcInfo for a process running layout l with its
// _PyRuntime at runtime.
func NewProcInfo(l Layout, arch Arch, runtime uint64) (ProcInfo, error) {
	p := ProcInfo{
		Runtime:            runtime,
		RuntimeInterpHead:  l.RuntimeInterpretersHead,
		InterpThreadsHead:  l.InterpThreadsHead,
		TstateNext:         l.TstateNext,
		TstateFrame:        l.TstateFrame,
		CframeCurrentFrame: l.CFrameCurrentFrame,
		CodeCheck:          l.CodeFilename,
	}
	if int(l.CodeName) != int(l.CodeFilename)+8 {
		return ProcInfo{}, fmt.Errorf("%w: co_name does not follow co_filename", ErrUnsupported)
	}
	switch {
	case l.TstateNativeThreadID != NoOffset:
		// gettid(), which the walk reads from the task in its own pid
		// namespace: the same on every architecture.
		p.Flags |= procNativeTID
		p.TstateId = l.TstateNativeThreadID
	case arch == AMD64:
		// pthread_self() is the thread pointer (fs base) on x86-64, with
		// glibc and with musl.
		p.TstateId = l.TstateThreadID
	default:
		// On arm64 pthread_self() sits sizeof(struct pthread) below the
		// thread pointer, which depends on the C library's version.
		return ProcInfo{}, fmt.Errorf("%w: CPython %d.%d on %s (no native_thread_id)", ErrUnsupported, l.Major, l.Minor, arch)
	}
	// One read per frame, from the lowest field to the end of the highest;
	// in int, so that offsets near 0xffff cannot wrap into the span.
	type fieldAt struct{ off, size int }
	lastiSize := 8 // a pointer into the code object (3.11+)
	if l.Frames == FrameObjects {
		lastiSize = 4 // f_lasti, an int
	} else {
		p.LastiBase = ^uint64(0)
	}
	fields := []fieldAt{{int(l.FrameBack), 8}, {int(l.FrameCode), 8}, {int(l.FrameLasti), lastiSize}}
	if l.FrameOwner != NoOffset {
		fields = append(fields, fieldAt{int(l.FrameOwner), 1})
	}
	if l.FrameIsEntry != NoOffset {
		fields = append(fields, fieldAt{int(l.FrameIsEntry), 1})
	}
	lo, hi := fields[0].off, 0
	for _, f := range fields {
		lo, hi = min(lo, f.off), max(hi, f.off+f.size)
	}
	if hi-lo > int(frameReadMax) {
		return ProcInfo{}, fmt.Errorf("%w: frame fields span %d bytes, more than %d", ErrUnsupported, hi-lo, frameReadMax)
	}
	p.FrameReadOff, p.FrameReadLen = uint16(lo), uint16(hi-lo) // #nosec G115 -- lo <= an offset of 16 bits; the span is at most frameReadMax
	rel := func(f fieldAt) (uint16, error) {
		r := f.off - lo
		if r+f.size > hi-lo || r%f.size != 0 {
			return 0, fmt.Errorf("%w: frame field at %d does not fit one aligned read", ErrUnsupported, f.off)
		}
		return uint16(r), nil // #nosec G115 -- below the span, at most frameReadMax
	}
	var err error
	if p.FrameBack, err = rel(fields[0]); err != nil {
		return ProcInfo{}, err
	}
	if p.FrameCode, err = rel(fields[1]); err != nil {
		return ProcInfo{}, err
	}
	// The walk reads 8 bytes at lasti either way (from its 128-byte buffer)
	// and, for an int, keeps the low half.
	if p.FrameLasti, err = rel(fields[2]); err != nil {
		return ProcInfo{}, err
	}
	if l.Frames == FrameObjects && p.FrameLasti%8 != 0 {
		return ProcInfo{}, fmt.Errorf("%w: f_lasti at %d not 8-aligned in the frame read", ErrUnsupported, l.FrameLasti)
	}
	// Absent bytes point at the first byte read: junk that Decode ignores.
	p.FrameOwner, p.FrameIsEntry = 0, 0
	if l.FrameOwner != NoOffset {
		p.FrameOwner = uint16(int(l.FrameOwner) - lo) // #nosec G115 -- inside the span
	}
	if l.FrameIsEntry != NoOffset {
		p.FrameIsEntry = uint16(int(l.FrameIsEntry) - lo) // #nosec G115 -- inside the span
	}
	return p, nil
}
