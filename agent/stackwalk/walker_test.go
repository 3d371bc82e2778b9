package stackwalk

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
)

// modeOf gathers agent_unwind_mode_info from w: its mode and reason.
func modeOf(t *testing.T, w *Walker) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(w.Collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fams {
		if !strings.HasSuffix(f.GetName(), "agent_unwind_mode_info") {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out = append(out, fmt.Sprintf("%s/%s=%v", l["mode"], l["reason"], m.GetGauge().GetValue()))
		}
	}
	return strings.Join(out, " ")
}

// TestFramePointerFallback: a kernel without bpf_loop (before 5.17) gets
// frame pointers, said so in the metric, rather than an agent that does
// not start. No interpreter is on, so that nothing is loaded and no root
// is needed.
func TestFramePointerFallback(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the table unwinder is built for x86-64 only")
	}
	for _, c := range []struct {
		name     string
		tables   bool
		probe    error
		want     bool
		reason   string
		wantMode string
	}{
		{"no bpf_loop", true, fmt.Errorf("bpf_loop: %w", ebpf.ErrNotSupported), false, "no_bpf_loop", "frame_pointer/no_bpf_loop=1"},
		{"flag", false, nil, false, "flag", "frame_pointer/flag=1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := New(Options{Tables: c.tables, HaveLoop: func() error { return c.probe }})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if w.Tables() != c.want || w.FramePointerReason() != c.reason {
				t.Errorf("Tables() %v, reason %q; want %v, %q", w.Tables(), w.FramePointerReason(), c.want, c.reason)
			}
			if got := modeOf(t, w); got != c.wantMode {
				t.Errorf("agent_unwind_mode_info: %s, want %s", got, c.wantMode)
			}
		})
	}
	// The probe is asked only when tables are: with --unwind=fp nothing
	// reaches the kernel.
	asked := false
	w, err := New(Options{HaveLoop: func() error { asked = true; return errors.New("unexpected") }})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if asked {
		t.Error("bpf_loop probed with tables off")
	}
}
