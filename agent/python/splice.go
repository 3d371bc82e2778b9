package python

import (
	"strings"

	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// Module is the Module of the Python frames Splice inserts.
const Module = "[python]"

// TruncatedFunction marks where Splice cut a Python stack deeper than
// MaxFrames: the outer frames beyond it are missing.
const TruncatedFunction = "[python frames truncated]"

// IsEvalFrame reports whether a native frame is CPython's eval loop, which
// runs Python frames (on 3.9-3.13 _PyEval_EvalFrameDefault; GCC's split-off
// cold part, _PyEval_EvalFrameDefault.cold, is the same C frame).
func IsEvalFrame(f symbolize.Frame) bool {
	return strings.HasPrefix(f.Function, "_PyEval_EvalFrameDefault") && !f.Inlined
}

// Splice merges a sample's native frames and its Python frames, both
// innermost first, into one stack, innermost first:
//
//   - each native eval-loop frame is replaced by the Python frames it was
//     running: the next group of py, up to and including an Entry frame
//     (one frame on 3.9/3.10, possibly several on 3.11+);
//   - native frames between eval-loop frames stay where they are, so a C
//     extension or libpython function sits on the leaf side of the Python
//     frame that called it, and native frames below the outermost eval
//     loop (main, Py_RunMain) stay below the Python frames;
//   - where the native stack ends before its eval-loop frames do (a
//     frame-pointer walk lost inside libpython), the Python frames left
//     over go on the root side of what there is, rather than nowhere;
//   - where the Python stack was truncated, TruncatedFunction follows its
//     last frame, and native eval-loop frames without Python frames stay
//     as they are.
//
// Splice is pure: it neither reads nor changes its inputs.
func Splice(native []symbolize.Frame, py []Frame, truncated bool) []symbolize.Frame {
	if len(py) == 0 {
		return append([]symbolize.Frame(nil), native...)
	}
	out := make([]symbolize.Frame, 0, len(native)+len(py)+1)
	next := 0 // first Python frame not yet placed
	group := func() {
		for next < len(py) {
			f := py[next]
			next++
			out = append(out, symbolize.Frame{Function: f.Function, File: f.File, Line: f.Line, Module: Module})
			if f.Entry {
				break
			}
		}
		if next == len(py) && truncated {
			out = append(out, symbolize.Frame{Function: TruncatedFunction, Module: Module})
		}
	}
	for _, f := range native {
		if IsEvalFrame(f) && next < len(py) {
			group()
			continue
		}
		out = append(out, f)
	}
	for next < len(py) {
		group()
	}
	return out
}
