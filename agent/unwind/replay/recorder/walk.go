package recorder

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/agent/unwind/replay"
)

// walk reads the stopped thread's Python frames as py_walk in
// agent/bpf/include/python.h does at a sample: the thread state whose id
// is the thread's (native_thread_id, the tid, on 3.11+; thread_id,
// pthread_self() = the fs base, before), then each frame's code object,
// the check of its name and file pointers, its instruction and its owner
// and is_entry bytes, up to bpf.InterpMaxFrames, shims included. The BPF walk
// cannot run on a thread stopped by ptrace, so the recorder reads the same
// fields the same way; the replay holds what agent/python makes of them to
// what the script itself saw.
func walk(m python.Memory, l *python.Layout, runtime, tid, fsBase uint64) ([]replay.RawFrame, bool, error) {
	ptr := func(addr uint64) (uint64, error) {
		var b [8]byte
		if err := m.ReadAt(b[:], addr); err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint64(b[:]), nil
	}
	want, idOff := fsBase, l.TstateThreadID
	if l.TstateNativeThreadID != python.NoOffset {
		want, idOff = tid, l.TstateNativeThreadID
	}
	interp, err := ptr(runtime + uint64(l.RuntimeInterpretersHead))
	if err != nil || interp == 0 {
		return nil, false, fmt.Errorf("no interpreter: %v", err)
	}
	ts, err := ptr(interp + uint64(l.InterpThreadsHead))
	for i := 0; err == nil && ts != 0 && i < 64; i++ {
		var id uint64
		if id, err = ptr(ts + uint64(idOff)); err == nil && id == want {
			break
		}
		ts, err = ptr(ts + uint64(l.TstateNext))
	}
	if err != nil || ts == 0 {
		return nil, false, fmt.Errorf("no thread state for the thread: %v", err)
	}
	frame, err := ptr(ts + uint64(l.TstateFrame))
	if err == nil && frame != 0 && l.CFrameCurrentFrame != python.NoOffset {
		frame, err = ptr(frame + uint64(l.CFrameCurrentFrame))
	}
	if err != nil {
		return nil, false, err
	}
	var out []replay.RawFrame
	for len(out) < bpf.InterpMaxFrames && frame != 0 {
		code, err := ptr(frame + uint64(l.FrameCode))
		if err != nil {
			return nil, false, err
		}
		lasti, err := ptr(frame + uint64(l.FrameLasti))
		if err != nil {
			return nil, false, err
		}
		if l.Frames == python.InterpreterFrames {
			lasti -= code // an instruction pointer into the code object
		}
		f := replay.RawFrame{Code: code, Lasti: int32(uint32(lasti))} // #nosec G115 -- the walk keeps the low 32 bits, as an int
		var names [16]byte
		if m.ReadAt(names[:], code+uint64(l.CodeFilename)) == nil {
			file, name := binary.LittleEndian.Uint64(names[:]), binary.LittleEndian.Uint64(names[8:])
			f.Check = file ^ (name<<1 | name>>63)
		}
		if f.Owner, err = byteAt(m, frame, l.FrameOwner); err != nil {
			return nil, false, err
		}
		if f.IsEntry, err = byteAt(m, frame, l.FrameIsEntry); err != nil {
			return nil, false, err
		}
		out = append(out, f)
		if frame, err = ptr(frame + uint64(l.FrameBack)); err != nil {
			return nil, false, err
		}
	}
	if len(out) == 0 {
		return nil, false, errors.New("no Python frames")
	}
	return out, frame != 0, nil
}

// byteAt reads the byte at frame+off; a field the version lacks reads as
// 0 (the BPF walk reads junk there, which Decode ignores).
func byteAt(m python.Memory, frame uint64, off uint16) (uint8, error) {
	if off == python.NoOffset {
		return 0, nil
	}
	var b [1]byte
	if err := m.ReadAt(b[:], frame+uint64(off)); err != nil {
		return 0, err
	}
	return b[0], nil
}
