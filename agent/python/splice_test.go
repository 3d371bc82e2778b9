package python

import (
	"reflect"
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
			want:      []string{"py:recurse", "py:recurse", "py:" + TruncatedFunction, eval, "main"},
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
			got := Splice(c.native, c.py, c.truncated)
			if !reflect.DeepEqual(names(got), c.want) {
				t.Errorf("got  %q\nwant %q", names(got), c.want)
			}
			if !reflect.DeepEqual(before, c.native) {
				t.Error("Splice changed its input")
			}
		})
	}
	// Python frames carry file and line.
	got := Splice(nat(eval), []Frame{pyf("f", 7, true)}, false)
	if want := (symbolize.Frame{Function: "f", File: "/job/train.py", Line: 7, Module: Module}); got[0] != want {
		t.Errorf("frame %+v, want %+v", got[0], want)
	}
}

func TestDecode(t *testing.T) {
	l9, l10, l11, l12 := layouts[9], layouts[10], layouts[11], layouts[12]
	cases := []struct {
		name string
		l    Layout
		raw  []RawFrame
		want []CodeFrame
	}{
		{"3.9: byte offsets, every frame an entry", l9,
			[]RawFrame{{Code: 1, Lasti: 10, Owner: 3}, {Code: 2, Lasti: -1}},
			[]CodeFrame{cfr(1, 10, true), cfr(2, -1, true)}},
		{"3.10: code units", l10,
			[]RawFrame{{Code: 1, Lasti: 5}},
			[]CodeFrame{cfr(1, 10, true)}},
		{"3.11: is_entry; instruction pointer less co_code_adaptive", l11,
			[]RawFrame{{Code: 1, Lasti: 184 + 8}, {Code: 2, Lasti: 184 + 20, IsEntry: 1}, {Code: 3, Lasti: 182, Owner: 3}},
			[]CodeFrame{cfr(1, 8, false), cfr(2, 20, true), cfr(3, -2, false)}},
		{"3.12: shims dropped; the frame inside one is its call's entry", l12,
			[]RawFrame{{Code: 1, Lasti: 192 + 4}, {Code: 2, Lasti: 192 + 6, IsEntry: 1}, {Code: 9, Owner: 3}, {Code: 3, Lasti: 192}, {Code: 9, Owner: 3}},
			[]CodeFrame{cfr(1, 4, false), cfr(2, 6, true), cfr(3, 0, true)}},
		{"3.12: a shim innermost marks nothing", l12,
			[]RawFrame{{Code: 9, Owner: 3}, {Code: 1, Lasti: 192 + 2, Owner: 1}},
			[]CodeFrame{cfr(1, 2, false)}},
	}
	for _, c := range cases {
		if got := c.l.Decode(c.raw); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func cfr(code uint64, off int, entry bool) CodeFrame {
	return CodeFrame{Code: code, Offset: off, Entry: entry}
}
