package interp

import (
	"reflect"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/symbolize"
)

func nat(names ...string) []symbolize.Frame {
	out := make([]symbolize.Frame, len(names))
	for i, n := range names {
		out[i] = symbolize.Frame{Function: n, Module: "libpython3.12.so.1.0"}
	}
	return out
}

// fakePython splices as CPython does: its eval loop, cold part included.
type fakePython struct{}

func (fakePython) Module() string { return "[python]" }
func (fakePython) EvalFrame(f symbolize.Frame) bool {
	return strings.HasPrefix(f.Function, "_PyEval_EvalFrameDefault") && !f.Inlined
}

const Module = "[python]"

func pyf(name string, line int, entry bool) Frame {
	return Frame{Function: name, File: "/job/train.py", Line: line, Entry: entry}
}

func names(fs []symbolize.Frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Function
		if f.Module == Module {
			out[i] = "py:" + f.Function
		}
	}
	return out
}

func TestSplice(t *testing.T) {
	const eval = "_PyEval_EvalFrameDefault"
	cases := []struct {
		name      string
		native    []symbolize.Frame
		py        []Frame
		truncated bool
		want      []string
	}{
		{
			name: "3.9: one eval frame per Python frame; a C function at the leaf side of its caller",
			native: nat("sha256_update", "_hashlib_HASH_update", "cfunction_vectorcall", eval, "function_code_fastcall",
				eval, "PyEval_EvalCode", "Py_RunMain", "main"),
			py:   []Frame{pyf("hash_worker", 12, true), pyf("<module>", 30, true)},
			want: []string{"sha256_update", "_hashlib_HASH_update", "cfunction_vectorcall", "py:hash_worker", "function_code_fastcall", "py:<module>", "PyEval_EvalCode", "Py_RunMain", "main"},
		},
		{
			name:   "3.11+: one eval frame runs several Python frames up to an entry frame",
			native: nat("PyObject_Free", eval, "_PyEval_Vector", "slot_tp_call", eval, "Py_RunMain", "main"),
			py: []Frame{pyf("Linear.forward", 5, false), pyf("Module._call_impl", 9, false), pyf("Module.__call__", 3, true),
				pyf("train_step", 20, false), pyf("<module>", 40, true)},
			want: []string{"PyObject_Free", "py:Linear.forward", "py:Module._call_impl", "py:Module.__call__",
				"_PyEval_Vector", "slot_tp_call", "py:train_step", "py:<module>", "Py_RunMain", "main"},
		},
		{
			name:   "native stack cut inside libpython: the Python frames still show, on the root side",
			native: nat("PyObject_Free", "0x7f12"),
			py:     []Frame{pyf("hot_a", 5, false), pyf("<module>", 9, true)},
			want:   []string{"PyObject_Free", "0x7f12", "py:hot_a", "py:<module>"},
		},
		{
			name:   "cut after the first eval frame: later groups follow the last native frame",
			native: nat(eval, "_PyEval_Vector"),
			py:     []Frame{pyf("inner", 1, true), pyf("outer", 2, true)},
			want:   []string{"py:inner", "_PyEval_Vector", "py:outer"},
		},
		{
			name:      "truncated Python stack: marked, and eval frames beyond it stay native",
			native:    nat(eval, eval, eval, "main"),
			py:        []Frame{pyf("recurse", 3, true), pyf("recurse", 3, true)},
			truncated: true,
			want:      []string{"py:recurse", "py:recurse", "py:[python frames truncated]", eval, "main"},
		},
		{
			name:   "no Python frames: the native stack unchanged",
			native: nat("memcpy", eval, "main"),
			want:   []string{"memcpy", eval, "main"},
		},
		{
			name:   "the cold part of the eval loop is the eval loop",
			native: nat(eval+".cold", "main"),
			py:     []Frame{pyf("f", 1, true)},
			want:   []string{"py:f", "main"},
		},
		{
			name: "no native stack at all",
			py:   []Frame{pyf("f", 1, false), pyf("g", 2, true)},
			want: []string{"py:f", "py:g"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := append([]symbolize.Frame(nil), c.native...)
			got := Splice(c.native, Stack{Frames: c.py, Truncated: c.truncated, By: fakePython{}})
			if !reflect.DeepEqual(names(got), c.want) {
				t.Errorf("got  %q\nwant %q", names(got), c.want)
			}
			if !reflect.DeepEqual(before, c.native) {
				t.Error("Splice changed its input")
			}
		})
	}
	// Python frames carry file and line.
	got := Splice(nat(eval), Stack{Frames: []Frame{pyf("f", 7, true)}, By: fakePython{}})
	if want := (symbolize.Frame{Function: "f", File: "/job/train.py", Line: 7, Module: Module}); got[0] != want {
		t.Errorf("frame %+v, want %+v", got[0], want)
	}
}

func TestSpliceWithoutInterpreter(t *testing.T) {
	native := nat("memcpy", "_PyEval_EvalFrameDefault", "main")
	got := Splice(native, Stack{Frames: []Frame{pyf("f", 1, true)}})
	if want := []string{"memcpy", "_PyEval_EvalFrameDefault", "main"}; !reflect.DeepEqual(names(got), want) {
		t.Errorf("frames without an interpreter spliced: %q", names(got))
	}
}

// TestSpliceRootFrames: root frames (a thread's NVTX ranges) go at the
// root side of everything, after the native frames below the outermost
// eval loop, with or without interpreter frames.
func TestSpliceRootFrames(t *testing.T) {
	root := []symbolize.Frame{{Function: "[nvtx] phase_a", Module: "[nvtx]"}, {Function: "[nvtx] step", Module: "[nvtx]"}}
	native := nat("work", "_PyEval_EvalFrameDefault", "main")
	s := Stack{Frames: []Frame{pyf("forward", 3, true)}, By: fakePython{}, Root: root}
	got := names(Splice(native, s))
	want := []string{"work", "py:forward", "main", "[nvtx] phase_a", "[nvtx] step"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("with interpreter frames: %q, want %q", got, want)
	}
	got = names(Splice(nat("work_phase_a", "run_steps", "main"), Stack{Root: root}))
	want = []string{"work_phase_a", "run_steps", "main", "[nvtx] phase_a", "[nvtx] step"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("native only: %q, want %q", got, want)
	}
	if got := names(Splice(nil, Stack{Root: root})); !reflect.DeepEqual(got, []string{"[nvtx] phase_a", "[nvtx] step"}) {
		t.Errorf("no user stack: %q", got)
	}
	if &root[0] == &Splice(nil, Stack{Root: root})[0] {
		t.Error("Splice returned its input")
	}
}
