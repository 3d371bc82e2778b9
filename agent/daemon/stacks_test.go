package daemon

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

// evalSym names address 100 as CPython's eval loop, the rest as fakeSym.
type evalSym struct{ fakeSym }

func (e *evalSym) User(id procfs.ID, addrs []uint64) []symbolize.Frame {
	out := e.fakeSym.User(id, addrs)
	for i := range out {
		if out[i].Address == 100 {
			out[i].Function = "_PyEval_EvalFrameDefault"
		}
	}
	return out
}

// fakeInterp is an interpreter whose eval loop is the function evalSym
// names.
type fakeInterp struct{}

func (fakeInterp) Module() string                   { return "[fake]" }
func (fakeInterp) EvalFrame(f symbolize.Frame) bool { return f.Function == "_PyEval_EvalFrameDefault" }

// Every source's interpreter frames are spliced into its symbolised user
// frames in one place: the eval-loop frame gives way to the frames it ran,
// a source's own leading frames (a GPU kernel) stay first.
func TestInterpreterFramesSplicedForEverySource(t *testing.T) {
	res := fixtureProcs()
	sink := &memSink{}
	py := []interp.Frame{{Function: "Model.forward", File: "m.py", Line: 3}, {Function: "<module>", File: "m.py", Line: 9, Entry: true}}
	cpuSrc := cpuLike([]source.Sample{{Proc: proc(10, 100), User: []uint64{7, 100, 8}, Interp: interp.Stack{Frames: py, By: fakeInterp{}}, Values: []int64{1, 1e7}}})
	gpuSrc := newFakeSource("gpu", profiles.GPU, 1, 2)
	gpuSrc.batches = [][]source.Sample{{{Proc: proc(10, 100), Frames: []symbolize.Frame{{Function: "gemm_kernel"}},
		User: []uint64{7, 100, 8}, Interp: interp.Stack{Frames: py, Truncated: true, By: fakeInterp{}}, Values: []int64{1, 0, 500}}}}
	d := New(Config{Now: func() time.Time { return time.Unix(1000, 0) }}, []source.Source{cpuSrc, gpuSrc}, &evalSym{}, res, sink)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		profiles.CPU.Name: {"fn7", "Model.forward", "<module>", "fn8"},
		profiles.GPU.Name: {"gemm_kernel", "fn7", "Model.forward", "<module>", "[fake frames truncated]", "fn8"},
	}
	for _, typ := range []profiles.Type{profiles.CPU, profiles.GPU} {
		p := byJob(t, sink.outs, typ)["1"]
		if p == nil || len(p.Sample) != 1 {
			t.Fatalf("%s: %v", typ.Name, p)
		}
		var names []string
		for _, l := range p.Sample[0].Location {
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
		}
		if !slices.Equal(names, want[typ.Name]) {
			t.Errorf("%s stack %q, want %q", typ.Name, names, want[typ.Name])
		}
	}
}

// Root frames (a thread's NVTX ranges) go at the root of every source's
// stack, after its native and interpreter frames, and also where a sample
// has no user stack at all.
func TestRootFramesAtTheRoot(t *testing.T) {
	res := fixtureProcs()
	sink := &memSink{}
	root := []symbolize.Frame{{Function: "[nvtx] phase_a", Module: "[nvtx]"}, {Function: "[nvtx] step", Module: "[nvtx]"}}
	py := []interp.Frame{{Function: "Model.forward", File: "m.py", Line: 3, Entry: true}}
	cpuSrc := cpuLike([]source.Sample{
		{Proc: proc(10, 100), User: []uint64{7, 8}, Interp: interp.Stack{Root: root}, Values: []int64{1, 1e7}},
		{Proc: proc(10, 100), User: []uint64{7, 100, 9}, Interp: interp.Stack{Frames: py, By: fakeInterp{}, Root: root}, Values: []int64{1, 1e7}},
		{Proc: proc(10, 100), Kernel: []uint64{5}, Interp: interp.Stack{Root: root}, Values: []int64{1, 1e7}},
	})
	gpuSrc := newFakeSource("gpu", profiles.GPU, 1, 2)
	gpuSrc.batches = [][]source.Sample{{{Proc: proc(10, 100), Frames: []symbolize.Frame{{Function: "gemm_kernel"}},
		User: []uint64{7}, Interp: interp.Stack{Root: root}, Values: []int64{1, 0, 500}}}}
	d := New(Config{Now: func() time.Time { return time.Unix(1000, 0) }}, []source.Source{cpuSrc, gpuSrc}, &evalSym{}, res, sink)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"fn7 fn8 [nvtx] phase_a [nvtx] step",
		"fn7 Model.forward fn9 [nvtx] phase_a [nvtx] step",
		"k5 [nvtx] phase_a [nvtx] step", // no user stack: under the kernel's
		"gemm_kernel fn7 [nvtx] phase_a [nvtx] step",
	}
	got := map[string][]string{}
	for _, typ := range []profiles.Type{profiles.CPU, profiles.GPU} {
		for _, smp := range byJob(t, sink.outs, typ)["1"].Sample {
			var names []string
			for _, l := range smp.Location {
				for _, ln := range l.Line {
					names = append(names, ln.Function.Name)
				}
			}
			got[strings.Join(names, " ")] = nil
		}
	}
	for _, k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("no stack %q among %q", k, slices.Collect(maps.Keys(got)))
		}
	}
}

// With LabelStackSetup, each sample says what of the capture was set up
// for its process; without, no sample carries the label.
func TestStackSetupLabel(t *testing.T) {
	for _, on := range []bool{false, true} {
		res := fixtureProcs()
		sink := &memSink{}
		src := cpuLike([]source.Sample{
			{Proc: proc(10, 100), User: []uint64{7}, Setup: source.SetupNative | source.SetupInterp, Values: []int64{3, 3e7}},
			{Proc: proc(10, 100), User: []uint64{8}, Setup: source.SetupInterp, Values: []int64{2, 2e7}},
			{Proc: proc(10, 100), User: []uint64{9}, Values: []int64{1, 1e7}},
		})
		d := New(Config{LabelStackSetup: on, Now: func() time.Time { return time.Unix(1000, 0) }}, []source.Source{src}, &fakeSym{}, res, sink)
		if err := d.Collect(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, smp := range byJob(t, sink.outs, profiles.CPU)["1"].Sample {
			got[strings.Join(smp.Label[schema.StackSetupLabel], ",")] += smp.Value[0]
		}
		want := map[string]int64{"": 6}
		if on {
			want = map[string]int64{"native_interpreter": 3, "interpreter": 2, "none": 1}
		}
		if !maps.Equal(got, want) {
			t.Errorf("label on %v: samples by stack_setup %v, want %v", on, got, want)
		}
	}
}

// watcher records what the daemon tells it.
type watcher struct{ attached, forgotten []procfs.ID }

func (w *watcher) AttachProcess(p procfs.ID) (source.Attach, error) {
	w.attached = append(w.attached, p)
	return source.AttachDone, nil
}
func (w *watcher) ForgetProcess(p procfs.ID) { w.forgotten = append(w.forgotten, p) }

// Admit does for a process a probe met first what a rescan does for a new
// one, once, and only for a process the agent profiles; watchers hear of
// it as of a rescanned one.
func TestAdmit(t *testing.T) {
	res := fixtureProcs()
	sym := &fakeSym{}
	w := &watcher{}
	d := New(Config{Watchers: []source.ProcessAttacher{w}}, []source.Source{cpuLike()}, sym, res, &memSink{})
	for _, c := range []struct {
		id   procfs.ID
		want bool
	}{
		{proc(10, 100), true},  // in a job
		{proc(10, 100), true},  // again: nothing more to do
		{proc(30, 300), false}, // in no job
		{proc(60, 600), false}, // another node's
		{proc(50, 500), false}, // a pid reused since
		{proc(40, 400), false}, // gone
	} {
		if got := d.Admit(c.id); got != c.want {
			t.Errorf("Admit(%v) = %v, want %v", c.id, got, c.want)
		}
	}
	if !slices.Equal(sym.prepared, []int{10}) || len(w.attached) != 1 || w.attached[0] != proc(10, 100) {
		t.Errorf("prepared %v, watcher told of %v; want pid 10 once", sym.prepared, w.attached)
	}
	// A rescan finds it known; once it is gone the watcher forgets it.
	d.rescan(false)
	delete(res.procs, 10)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(w.forgotten, proc(10, 100)) {
		t.Errorf("watcher forgot %v, want pid 10", w.forgotten)
	}
}

// A process sampled while in no job (between its fork and joining the job's
// cgroup, or before pam_slurm_adopt moves it) is admitted in full once a
// rescan finds it in one: its symbols read, the watchers told.
func TestSampledBeforeItJoinedAJob(t *testing.T) {
	res := fixtureProcs()
	sym := &fakeSym{}
	w := &watcher{}
	d := New(Config{Watchers: []source.ProcessAttacher{w}}, []source.Source{cpuLike([]source.Sample{cpuSample(proc(30, 300), 1, nil, 5)})}, sym, res, &memSink{})
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := res.procs[30]
	p.Job = res.procs[10].Job
	res.procs[30] = p
	d.rescan(false)
	if !slices.Contains(sym.prepared, 30) || !slices.Contains(w.attached, proc(30, 300)) {
		t.Errorf("prepared %v, watcher told of %v; want pid 30 among them", sym.prepared, w.attached)
	}
}

// slowSym's Prepare waits until Admit has returned (admitted is closed), as
// a new interpreter's symbols take their time; it gives up after a minute,
// which only an Admit that waits for it makes it do.
type slowSym struct {
	fakeSym
	admitted chan struct{}
	prepared chan procfs.ID
	waited   atomic.Bool // Prepare gave up: Admit waited for it
}

func (s *slowSym) Prepare(p procfs.ID) {
	select {
	case <-s.admitted:
	case <-time.After(time.Minute):
		s.waited.Store(true)
	}
	s.prepared <- p
}

// Once Run has started, Admit answers without waiting for the process's
// symbols or the attaching sources: the stack capture's event reader calls
// it, and a process's interpreter is set up for its frames only after it
// returns (waiting cost a short hashing job its first 74 ms of callers and
// interpreter frames, 21% of its samples). The symbols and the attach
// follow.
func TestAdmitDoesNotWaitForSymbols(t *testing.T) {
	res := fixtureProcs()
	sym := &slowSym{admitted: make(chan struct{}), prepared: make(chan procfs.ID, 1)}
	gpu := &attachingSource{fakeSource: newFakeSource("gpu", profiles.GPU, 1, 2),
		script: map[int][]source.Attach{10: {source.AttachDone}}, calls: map[int]int{}}
	// No rescans: only Admit lets pid 10 in.
	d := New(Config{Interval: time.Hour, RescanInterval: time.Hour}, []source.Source{gpu}, sym, res, &memSink{})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- d.Run(ctx) }()
	for d.settleq.Load() == nil { // Run has started its settlers
		time.Sleep(time.Millisecond)
	}
	if !d.Admit(proc(10, 100)) {
		t.Fatal("Admit(pid 10) = false, want true")
	}
	close(sym.admitted)
	if p := <-sym.prepared; p != proc(10, 100) || sym.waited.Load() {
		t.Errorf("prepared %v (waited for by Admit: %v), want pid 10, after Admit returned", p, sym.waited.Load())
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if gpu.calls[10] != 1 {
		t.Errorf("the attaching source was called %d times for pid 10, want once", gpu.calls[10])
	}
}
