package walktest

import (
	"reflect"
	"testing"

	"github.com/slurmscope/slurmscope/agent/python"
)

// The Go mirrors in agent/python must match the C structs byte for byte;
// bpf2go's types are generated from the compiled object's BTF.
func TestMirrors(t *testing.T) {
	for _, c := range []struct{ mirror, btf any }{
		{python.ProcInfo{}, walktestPyProc{}},
		{python.RawFrame{}, walktestPyFrame{}},
		{python.RawStack{}, walktestPyStack{}},
	} {
		m, b := reflect.TypeOf(c.mirror), reflect.TypeOf(c.btf)
		if m.Size() != b.Size() {
			t.Errorf("%s: %d bytes, C %s %d", m, m.Size(), b, b.Size())
		}
		var bf []reflect.StructField
		for i := 0; i < b.NumField(); i++ {
			if f := b.Field(i); f.Name != "_" {
				bf = append(bf, f)
			}
		}
		if m.NumField() != len(bf) {
			t.Errorf("%s: %d fields, C %d", m, m.NumField(), len(bf))
			continue
		}
		for i, f := range bf {
			g := m.Field(i)
			if g.Offset != f.Offset || g.Type.Size() != f.Type.Size() {
				t.Errorf("%s.%s at %d (%d bytes), C %s at %d (%d bytes)", m, g.Name, g.Offset, g.Type.Size(), f.Name, f.Offset, f.Type.Size())
			}
		}
	}
	if got := reflect.TypeOf(python.Event{}).Size(); got != 24 {
		t.Errorf("Event: %d bytes, want 24 (struct py_event)", got)
	}
	if n := len(walktestPyStack{}.Frames); n != python.MaxFrames {
		t.Errorf("PY_MAX_FRAMES %d, MaxFrames %d", n, python.MaxFrames)
	}
	if n := len(walktestPyFrameBuf{}.B); n != 128 {
		t.Errorf("PY_FRAME_READ %d, want 128", n)
	}
}
