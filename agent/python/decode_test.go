package python

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/slurmscope/slurmscope/agent/bpf"
)

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

func TestRawFrameUnpacksPythonH(t *testing.T) {
	// python.h packs lasti (an s32 offset), the owner byte and the
	// is_entry byte into an interp_frame's data.
	got := rawFrame(bpf.InterpFrame{Addr: 0x1000, Check: 7, Data: 0xffff_fffe | 3<<32 | 1<<40})
	if want := (RawFrame{Code: 0x1000, Check: 7, Lasti: -2, Owner: 3, IsEntry: 1}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestProcInfoFitsTheTable(t *testing.T) {
	b := ProcInfo{Runtime: 1, LastiBase: 2}.encode()
	if len(b) != int(unsafe.Sizeof(ProcInfo{})) || len(b) > bpf.InterpProcData {
		t.Fatalf("struct py_proc encodes to %d bytes (Go size %d, table room %d)", len(b), unsafe.Sizeof(ProcInfo{}), bpf.InterpProcData)
	}
	if b[0] != 1 || b[len(b)-8] != 2 {
		t.Errorf("fields not where python.h reads them: % x", b)
	}
}
