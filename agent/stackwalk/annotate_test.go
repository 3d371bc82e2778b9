package stackwalk

import (
	"reflect"
	"testing"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// fakeAnnotator names each root frame of its tag by its address.
type fakeAnnotator struct {
	tag  uint64
	got  []bpf.InterpFrame
	trun bool
}

func (a *fakeAnnotator) Name() string  { return "fake" }
func (a *fakeAnnotator) Const() string { return "stack_fake" }
func (a *fakeAnnotator) Tag() uint64   { return a.tag }
func (a *fakeAnnotator) Root(p interp.Process, frames []bpf.InterpFrame, truncated bool) []symbolize.Frame {
	a.got, a.trun = append([]bpf.InterpFrame(nil), frames...), truncated
	out := make([]symbolize.Frame, len(frames))
	for i, f := range frames {
		out[len(frames)-1-i] = symbolize.Frame{Function: string(rune('A' + f.Addr))}
	}
	return out
}

// fakeInstance records the raw stack it was asked to resolve.
type fakeInstance struct {
	interp.Instance
	raw bpf.InterpStack
}

func (f *fakeInstance) Resolve(p interp.Process, raw *bpf.InterpStack) interp.Stack {
	f.raw = *raw
	return interp.Stack{Frames: make([]interp.Frame, raw.Len)}
}

// TestResolveSplitsRootFrames: the interpreter sees only its own frames
// (and flags), the annotator only the root frames of its tag, in captured
// order; a stack of root frames alone needs no interpreter; a root count
// beyond the frames is clamped.
func TestResolveSplitsRootFrames(t *testing.T) {
	a := &fakeAnnotator{tag: 0x5854564e}
	in := &fakeInstance{}
	w := &Walker{o: Options{Annotators: []interp.Annotator{a}}, interps: &interpreters{byKind: map[uint32]interp.Instance{1: in}}}
	raw := &bpf.InterpStack{Len: 4, Kind: 1, Flags: bpf.InterpTruncated | bpf.InterpRootTruncated | 2<<bpf.InterpRootShift}
	raw.Frames[0] = bpf.InterpFrame{Addr: 100}
	raw.Frames[1] = bpf.InterpFrame{Addr: 101}
	raw.Frames[2] = bpf.InterpFrame{Addr: 1, Check: a.tag}
	raw.Frames[3] = bpf.InterpFrame{Addr: 2, Check: a.tag}
	st := w.Resolve(42, 7, raw)
	if in.raw.Len != 2 || in.raw.Flags != bpf.InterpTruncated || in.raw.Frames[1].Addr != 101 {
		t.Errorf("the interpreter got len %d flags %#x", in.raw.Len, in.raw.Flags)
	}
	if len(st.Frames) != 2 || !reflect.DeepEqual(st.Root, []symbolize.Frame{{Function: "C"}, {Function: "B"}}) || !a.trun {
		t.Errorf("stack %+v, annotator truncated %v", st, a.trun)
	}
	if raw.Len != 4 {
		t.Error("Resolve changed its input")
	}

	// Root frames only (a native process with ranges open), one of another tag.
	raw = &bpf.InterpStack{Len: 2, Status: uint32(bpf.InterpNone), Flags: 2 << bpf.InterpRootShift}
	raw.Frames[0] = bpf.InterpFrame{Addr: 3, Check: a.tag}
	raw.Frames[1] = bpf.InterpFrame{Addr: 4, Check: 0xbad}
	in.raw = bpf.InterpStack{}
	st = w.Resolve(42, 7, raw)
	if in.raw.Len != 0 || len(st.Frames) != 0 || !reflect.DeepEqual(st.Root, []symbolize.Frame{{Function: "D"}}) {
		t.Errorf("root only: %+v (interpreter asked: %v)", st, in.raw.Len != 0)
	}

	// A count past the frames (a corrupt stack) is clamped to Len.
	raw = &bpf.InterpStack{Len: 1, Flags: 9 << bpf.InterpRootShift}
	raw.Frames[0] = bpf.InterpFrame{Addr: 5, Check: a.tag}
	if st := w.Resolve(42, 7, raw); len(st.Root) != 1 {
		t.Errorf("clamped: %+v", st)
	}
}
