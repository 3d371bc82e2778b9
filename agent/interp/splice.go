package interp

import (
	"strings"

	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// TruncatedFunction is the frame Splice puts where it cut a stack of
// interpreter frames deeper than the capture keeps: "[python frames
// truncated]" for an interpreter whose Module is "[python]".
func TruncatedFunction(s Splicer) string {
	return "[" + strings.Trim(s.Module(), "[]") + " frames truncated]"
}

// Splice merges a sample's native frames and its interpreter frames, both
// innermost first, into one stack, innermost first:
//
//   - each native eval-loop frame (s.By.EvalFrame) is replaced by the
//     interpreter frames it was running: the next group of s.Frames, up to
//     and including an Entry frame;
//   - native frames between eval-loop frames stay where they are, so a C
//     extension sits on the leaf side of the interpreted function that
//     called it, and native frames below the outermost eval loop (main)
//     stay below the interpreter frames;
//   - where the native stack ends before its eval-loop frames do (a
//     frame-pointer walk lost inside the interpreter), the frames left over
//     go on the root side of what there is, rather than nowhere;
//   - where the interpreter stack was truncated, TruncatedFunction follows
//     its last frame, and native eval-loop frames without interpreter
//     frames stay as they are;
//   - s.Root (a thread's open NVTX ranges) goes last, at the root side of
//     everything, so that a flame graph groups the time by them.
//
// Splice is pure: it neither reads nor changes its inputs.
func Splice(native []symbolize.Frame, s Stack) []symbolize.Frame {
	if len(s.Frames) == 0 || s.By == nil {
		out := make([]symbolize.Frame, 0, len(native)+len(s.Root))
		return append(append(out, native...), s.Root...)
	}
	module := s.By.Module()
	out := make([]symbolize.Frame, 0, len(native)+len(s.Frames)+1+len(s.Root))
	next := 0 // first interpreter frame not yet placed
	group := func() {
		for next < len(s.Frames) {
			f := s.Frames[next]
			next++
			out = append(out, symbolize.Frame{Function: f.Function, File: f.File, Line: f.Line, Module: module})
			if f.Entry {
				break
			}
		}
		if next == len(s.Frames) && s.Truncated {
			out = append(out, symbolize.Frame{Function: TruncatedFunction(s.By), Module: module})
		}
	}
	for _, f := range native {
		if next < len(s.Frames) && s.By.EvalFrame(f) {
			group()
			continue
		}
		out = append(out, f)
	}
	for next < len(s.Frames) {
		group()
	}
	return append(out, s.Root...)
}
