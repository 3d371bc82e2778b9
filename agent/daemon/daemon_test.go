package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

type fakeSampler struct {
	batches [][]cpu.Sample
	err     error
}

func (f *fakeSampler) Drain() ([]cpu.Sample, cpu.Stats, error) {
	if f.err != nil {
		return nil, cpu.Stats{}, f.err
	}
	if len(f.batches) == 0 {
		return nil, cpu.Stats{}, nil
	}
	b := f.batches[0]
	f.batches = f.batches[1:]
	return b, cpu.Stats{AttachedCPUs: 2}, nil
}

// fakeSym names address a as "fn<a>", so stacks are easy to check.
type fakeSym struct{ forgotten, prepared []int }

func (f *fakeSym) User(_ procfs.ID, addrs []uint64) []symbolize.Frame {
	var out []symbolize.Frame
	for _, a := range addrs {
		out = append(out, symbolize.Frame{Function: fmt.Sprintf("fn%d", a), Module: "/bin/w", Address: a})
	}
	return out
}
func (f *fakeSym) Kernel(addrs []uint64) []symbolize.Frame {
	var out []symbolize.Frame
	for _, a := range addrs {
		out = append(out, symbolize.Frame{Function: fmt.Sprintf("k%d", a), Module: symbolize.KernelModule, Address: a})
	}
	return out
}
func (f *fakeSym) Forget(p procfs.ID)  { f.forgotten = append(f.forgotten, p.PID) }
func (f *fakeSym) Prepare(p procfs.ID) { f.prepared = append(f.prepared, p.PID) }

type fakeRes struct {
	procs map[int]attribution.Process
	scan  bool // Scan lists the processes too (else nothing)
}

func (f *fakeRes) Cached(pid int, start uint64) (attribution.Process, bool) {
	p, ok := f.procs[pid]
	return p, ok && p.StartTime == start
}
func (f *fakeRes) Resolve(pid int) (attribution.Process, error) {
	p, ok := f.procs[pid]
	if !ok {
		return attribution.Process{}, errors.New("process exited")
	}
	return p, nil
}
func (f *fakeRes) Scan() ([]attribution.Process, error) {
	if !f.scan {
		return nil, nil
	}
	return f.Refresh()
}
func (f *fakeRes) Refresh() ([]attribution.Process, error) {
	var out []attribution.Process
	for _, p := range f.procs {
		out = append(out, p)
	}
	return out, nil
}

type memSink struct{ outs []Output }

func (m *memSink) Write(_ context.Context, outs []Output) error {
	m.outs = append(m.outs, outs...)
	return nil
}

func fixture() (*fakeRes, []cpu.Sample) {
	job1 := &attribution.Job{ID: "1", Name: `train "llama" ✓`, User: "bob", UID: 1001, Host: "node-a", Account: "phys"}
	job2 := &attribution.Job{ID: "2", Name: "other", User: "alice", UID: 1002, Host: "node-a"}
	res := &fakeRes{procs: map[int]attribution.Process{
		10: {PID: 10, StartTime: 100, Comm: "python3", Host: "node-a", Step: "0", Job: job1},
		11: {PID: 11, StartTime: 110, Comm: "bash", Host: "node-a", Step: "batch", Job: job1},
		20: {PID: 20, StartTime: 200, Comm: "worker", Host: "node-a", Step: "0", Job: job2},
		30: {PID: 30, StartTime: 300, Comm: "sshd", Host: "node-a"},
		50: {PID: 50, StartTime: 999, Comm: "new", Host: "node-a", Job: job2}, // pid 50 was reused
		60: {PID: 60, StartTime: 600, Comm: "x", Host: "node-b", Foreign: true, Job: job2},
	}}
	samples := []cpu.Sample{
		{Proc: procfs.ID{PID: 10, Start: 100}, User: []uint64{1, 2}, Kernel: []uint64{9}, Count: 3},
		{Proc: procfs.ID{PID: 10, Start: 100}, User: []uint64{1, 2}, Count: 2},
		{Proc: procfs.ID{PID: 11, Start: 110}, User: []uint64{3}, Count: 1},
		{Proc: procfs.ID{PID: 20, Start: 200}, User: []uint64{4}, Count: 5},
		{Proc: procfs.ID{PID: 30, Start: 300}, User: []uint64{5}, Count: 7},
		{Proc: procfs.ID{PID: 40, Start: 400}, User: []uint64{6}, Count: 11}, // exited and gone
		{Proc: procfs.ID{PID: 50, Start: 500}, User: []uint64{7}, Count: 13}, // the old pid 50
		{Proc: procfs.ID{PID: 60, Start: 600}, User: []uint64{8}, Count: 17},
	}
	return res, samples
}

func TestCollectOneProfilePerJob(t *testing.T) {
	res, samples := fixture()
	sink := &memSink{}
	now := time.Unix(1000, 0)
	d := New(Config{SampleRate: 100, Interval: 15 * time.Second, Now: func() time.Time { return now }},
		&fakeSampler{batches: [][]cpu.Sample{samples}}, &fakeSym{}, res, sink)
	now = now.Add(15 * time.Second)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.outs) != 2 {
		t.Fatalf("%d profiles, want 2 (one per job)", len(sink.outs))
	}
	byJob := map[string]*profile.Profile{}
	for _, o := range sink.outs {
		p, err := profile.Parse(bytes.NewReader(o.Data))
		if err != nil {
			t.Fatalf("job %s: %v", o.JobID, err)
		}
		byJob[o.JobID] = p
		if o.Start.Unix() != 1000 || o.End.Unix() != 1015 || o.Type.ID() != "process_cpu:cpu:nanoseconds:cpu:nanoseconds" {
			t.Errorf("output %+v", o)
		}
	}
	p1 := byJob["1"]
	wantComments := []string{schema.JobID.Label + "=1", schema.JobName.Label + `=train "llama" ✓`, schema.JobUser.Label + "=bob",
		schema.JobAccount.Label + "=phys", schema.HostName.Label + "=node-a", schema.ServiceName + `=train "llama" ✓`}
	if fmt.Sprint(p1.Comments) != fmt.Sprint(wantComments) {
		t.Errorf("comments = %q\nwant %q", p1.Comments, wantComments)
	}
	// Values: samples and cpu nanoseconds (period 10ms), by step label.
	got := map[string][2]int64{}
	for _, s := range p1.Sample {
		var names []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
		}
		k := fmt.Sprint(s.Label[schema.JobStep.Label], names)
		v := got[k]
		got[k] = [2]int64{v[0] + s.Value[0], v[1] + s.Value[1]}
	}
	want := map[string][2]int64{
		"[0] [k9 fn1 fn2]": {3, 3e7},
		"[0] [fn1 fn2]":    {2, 2e7},
		"[batch] [fn3]":    {1, 1e7},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("job 1 samples = %v\nwant %v", got, want)
	}
	if p2 := byJob["2"]; len(p2.Sample) != 1 || p2.Sample[0].Value[0] != 5 {
		t.Errorf("job 2: the reused pid's or another node's samples leaked in: %v", p2.Sample)
	}
	for reason, n := range map[string]float64{"exited": 11 + 13, "not_in_job": 7, "other_node": 17} {
		if v := testutil.ToFloat64(d.m.unattributed.WithLabelValues(reason)); v != n {
			t.Errorf("unattributed %s = %v, want %v", reason, v, n)
		}
	}
	if v := testutil.ToFloat64(d.m.samples); v != 59 {
		t.Errorf("samples = %v", v)
	}
}

func TestAllProcessesProfilesTheRestWithoutSlurmLabels(t *testing.T) {
	res, samples := fixture()
	sink := &memSink{}
	d := New(Config{AllProcesses: true}, &fakeSampler{batches: [][]cpu.Sample{samples}}, &fakeSym{}, res, sink)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	var nojob *Output
	for i := range sink.outs {
		if sink.outs[i].JobID == "" {
			nojob = &sink.outs[i]
		}
	}
	if nojob == nil || nojob.ServiceName != "sshd" {
		t.Fatalf("no profile for the process outside jobs: %+v", sink.outs)
	}
	for _, l := range nojob.Labels {
		if _, ok := schema.ByLabel(l.Name); ok && l.Name != schema.HostName.Label {
			t.Errorf("a process in no job carries %s", l.Name)
		}
	}
}

func TestDrainErrorKeepsTheInterval(t *testing.T) {
	res, _ := fixture()
	sink := &memSink{}
	now := time.Unix(1000, 0)
	s := &fakeSampler{err: errors.New("map read failed")}
	d := New(Config{Now: func() time.Time { return now }}, s, &fakeSym{}, res, sink)
	now = now.Add(time.Minute)
	if err := d.Collect(context.Background()); err == nil {
		t.Fatal("drain error swallowed")
	}
	s.err = nil
	s.batches = [][]cpu.Sample{{{Proc: procfs.ID{PID: 10, Start: 100}, User: []uint64{1}, Count: 1}}}
	now = now.Add(time.Minute)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.outs) != 1 || sink.outs[0].Start.Unix() != 1000 {
		t.Fatalf("the next interval should start where the failed one did: %+v", sink.outs)
	}
}

func TestRunFlushesTheLastIntervalOnStop(t *testing.T) {
	res, samples := fixture()
	sink := &memSink{}
	d := New(Config{Interval: time.Hour}, &fakeSampler{batches: [][]cpu.Sample{samples}}, &fakeSym{}, res, sink)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sink.outs) != 2 {
		t.Fatalf("stop wrote %d profiles, want 2", len(sink.outs))
	}
}

func TestRescanPreparesOnlyProcessesThatWillBeProfiled(t *testing.T) {
	res, _ := fixture()
	sym := &fakeSym{}
	d := New(Config{}, &fakeSampler{}, sym, res, &memSink{})
	d.rescan(false)
	d.rescan(false) // a second pass prepares nothing again
	slices.Sort(sym.prepared)
	got := fmt.Sprint(sym.prepared)
	if got != "[10 11 20 50]" {
		t.Errorf("prepared %s, want the job processes of this node once each", got)
	}
}
