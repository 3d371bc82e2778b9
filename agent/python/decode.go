package python

import "github.com/slurmscope/slurmscope/agent/bpf"

// RawFrame is one frame as python.h records it in an interp_frame: the
// code object, its check, and the raw instruction offset, owner and
// is_entry bytes packed into Data.
type RawFrame struct {
	Code    uint64
	Check   uint64
	Lasti   int32
	Owner   uint8
	IsEntry uint8
}

// rawFrame unpacks an interp_frame of python.h.
func rawFrame(f bpf.InterpFrame) RawFrame {
	return RawFrame{Code: f.Addr, Check: f.Check,
		Lasti:   int32(uint32(f.Data)), // #nosec G115 -- CPython's int lasti, reinterpreted as signed on purpose
		Owner:   uint8(f.Data >> 32),   // #nosec G115 -- one byte of the packed word
		IsEntry: uint8(f.Data >> 40)}   // #nosec G115 -- one byte of the packed word
}

// CodeFrame is one Python frame as the walk saw it, with the version's
// meaning applied: shims removed, the instruction as a byte offset into the
// code, and whether the frame began a C call of the eval loop.
type CodeFrame struct {
	Code   uint64 // PyCodeObject address in the process
	Check  uint64 // RawFrame.Check
	Offset int    // byte offset of the instruction; < 0: not started
	Entry  bool   // the outermost frame of one C call of the eval loop
}

// Decode interprets raw frames (innermost first) for layout l.
func (l *Layout) Decode(raw []RawFrame) []CodeFrame {
	out := make([]CodeFrame, 0, len(raw))
	for _, r := range raw {
		switch {
		case l.Frames == FrameObjects:
			// Each PyFrameObject has its own C call of the eval loop.
			off := int(r.Lasti)
			if l.Minor >= 10 && off > 0 {
				off *= 2 // 3.10 counts code units
			}
			out = append(out, CodeFrame{Code: r.Code, Check: r.Check, Offset: off, Entry: true})
		case l.Minor >= 12 && r.Owner == FrameOwnedByCStack:
			// The shim a C call pushes first: the frame inside it began that call.
			if n := len(out); n > 0 {
				out[n-1].Entry = true
			}
		default:
			out = append(out, CodeFrame{
				Code:   r.Code,
				Check:  r.Check,
				Offset: int(r.Lasti) - int(l.CodeAdaptive),
				Entry:  l.FrameIsEntry != NoOffset && r.IsEntry != 0,
			})
		}
	}
	return out
}
