package stackwalk_test

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/agent/stackwalk"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/schema"
)

// TestIntegrationInterpreterContract runs the capture as the agent does,
// without the daemon: a Walker with CPython behind the interpreter
// contract and the real CPU sampler, over a real python3.11 started after
// both. The process is announced by the probe, admitted, loaded and set up
// for CPython; from then on its samples say so (Setup) and carry the
// script's functions, resolved through the Walker; and both parts of its
// set-up are timed.
func TestIntegrationInterpreterContract(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("python3.11"))
	var target atomic.Int64
	admitted := make(chan struct{}, 1)
	w, err := stackwalk.New(stackwalk.Options{Tables: true, Interpreters: []interp.Interpreter{python.CPython{}},
		Profiled: func(id procfs.ID) bool {
			if int64(id.PID) != target.Load() {
				return false
			}
			select {
			case admitted <- struct{}{}:
			default:
			}
			return true
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := w.Interpreters(); !slices.Equal(got, []string{"python"}) {
		t.Fatalf("interpreters %v", got)
	}
	s, err := cpu.New(cpu.Options{SampleRate: 499, Stacks: w,
		NewInterp: func(pid uint32, startNs uint64, raw *bpf.InterpStack) { w.Resolve(pid, startNs, raw) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	script, err := filepath.Abs("../../internal/testenv/workloads/python/split.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3.11", script, "2")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	target.Store(int64(cmd.Process.Pid))
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("workload did not start: %q", sc.Text())
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	bySetup := map[uint32]uint64{}
	var upHot, upAll uint64
	drain := func() {
		samples, _, err := s.Drain()
		if err != nil {
			t.Fatal(err)
		}
		for _, smp := range samples {
			if int64(smp.Proc.PID) != target.Load() {
				continue
			}
			bySetup[smp.Setup] += smp.Count
			if smp.Setup != bpf.SetupNative|bpf.SetupInterp {
				continue
			}
			upAll += smp.Count
			st := w.Resolve(uint32(smp.Proc.PID), smp.StartNs, smp.Interp) // #nosec G115 -- a test's child pid
			if len(st.Frames) > 0 && (st.Frames[0].Function == "hot_a" || st.Frames[0].Function == "hot_b") && st.By != nil && st.By.Module() == python.Module {
				upHot += smp.Count
			}
		}
	}
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("workload: %v", err)
			}
			finished = true
		case <-time.After(500 * time.Millisecond):
		}
		drain()
	}
	select {
	case <-admitted:
	default:
		t.Fatal("the process was never admitted")
	}
	t.Logf("samples by setup %v; set up: %d, %d of them in hot_a or hot_b", bySetup, upAll, upHot)
	// The rest is the interpreter's own start-up (its imports) and the
	// script's loop: 96.7% measured. e2e's TestStacks holds the shares.
	if upAll < 300 || float64(upHot) < 0.9*float64(upAll) {
		t.Errorf("%d of %d set-up samples name hot_a or hot_b as their innermost Python frame, want >= 90%% of at least 300", upHot, upAll)
	}
	for setup := range bySetup {
		if setup&^(bpf.SetupNative|bpf.SetupInterp) != 0 {
			t.Errorf("unknown setup bits %#x", setup)
		}
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(w.Collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	timed := map[string]uint64{}
	for _, f := range fams {
		if f.GetName() != schema.AgentProcessSetup.Name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "part" {
					timed[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if timed["unwind_tables"] != 1 || timed["interpreter"] != 1 {
		t.Errorf("set-up times observed %v, want one of each part", timed)
	}
	if !strings.Contains(strings.Join(names(fams), " "), schema.AgentInterpProcesses.Name) {
		t.Errorf("the interpreter's metrics are not among the Walker's collectors")
	}
}

func names(fams []*dto.MetricFamily) []string {
	var out []string
	for _, f := range fams {
		out = append(out, f.GetName())
	}
	return out
}
