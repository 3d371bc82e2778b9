package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

// fakeSource hands out its batches one Drain at a time.
type fakeSource struct {
	info    source.Info
	batches [][]source.Sample
	err     error
}

func newFakeSource(name string, typ profiles.Type, period int64, counted int) *fakeSource {
	return &fakeSource{info: source.Info{Name: name, Type: typ, Period: period, Counted: counted,
		Drained:      prometheus.NewCounter(prometheus.CounterOpts{Name: name + "_drained"}),
		Unattributed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name + "_unattributed"}, []string{"reason"})}}
}

func (f *fakeSource) Info() source.Info { return f.info }

func (f *fakeSource) Drain() (source.Batch, error) {
	if f.err != nil {
		return source.Batch{}, f.err
	}
	if len(f.batches) == 0 {
		return source.Batch{}, nil
	}
	b := f.batches[0]
	f.batches = f.batches[1:]
	return source.Batch{Samples: b}, nil
}

// cpuLike is a source shaped like the CPU sampler at 100 Hz.
func cpuLike(batches ...[]source.Sample) *fakeSource {
	f := newFakeSource("cpu", profiles.CPU, 1e7, 0)
	f.batches = batches
	return f
}

// fakeSym names address a as "fn<a>", so stacks are easy to check.
type fakeSym struct {
	forgotten, prepared []int
	userCalls           int
}

func (f *fakeSym) User(_ procfs.ID, addrs []uint64) []symbolize.Frame {
	f.userCalls++
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

func (f *fakeRes) Cached(id procfs.ID) (attribution.Process, bool) {
	p, ok := f.procs[id.PID]
	return p, ok && p.Start == id.Start
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

func proc(pid int, start uint64) procfs.ID { return procfs.ID{PID: pid, Start: start} }

func fixtureProcs() *fakeRes {
	job1 := &attribution.Job{ID: "1", Name: `train "llama" ✓`, User: "bob", UID: 1001, Host: "node-a",
		Meta: map[string]string{schema.JobAccount.Name: "phys"}}
	job2 := &attribution.Job{ID: "2", Name: "other", User: "alice", UID: 1002, Host: "node-a"}
	return &fakeRes{procs: map[int]attribution.Process{
		10: {ID: proc(10, 100), Comm: "python3", Host: "node-a", Step: "0", Job: job1},
		11: {ID: proc(11, 110), Comm: "bash", Host: "node-a", Step: "batch", Job: job1},
		20: {ID: proc(20, 200), Comm: "worker", Host: "node-a", Step: "0", Job: job2},
		30: {ID: proc(30, 300), Comm: "sshd", Host: "node-a"},
		50: {ID: proc(50, 999), Comm: "new", Host: "node-a", Job: job2}, // pid 50 was reused
		60: {ID: proc(60, 600), Comm: "x", Host: "node-b", Foreign: true, Job: job2},
	}}
}

// cpuSample is n samples of a CPU-like source at 100 Hz.
func cpuSample(p procfs.ID, n int64, kernel []uint64, user ...uint64) source.Sample {
	return source.Sample{Proc: p, Kernel: kernel, User: user, Values: []int64{n, n * 1e7}}
}

func fixture() (*fakeRes, []source.Sample) {
	return fixtureProcs(), []source.Sample{
		cpuSample(proc(10, 100), 3, []uint64{9}, 1, 2),
		cpuSample(proc(10, 100), 2, nil, 1, 2),
		cpuSample(proc(11, 110), 1, nil, 3),
		cpuSample(proc(20, 200), 5, nil, 4),
		cpuSample(proc(30, 300), 7, nil, 5),
		cpuSample(proc(40, 400), 11, nil, 6),      // exited and gone
		cpuSample(proc(50, 500), 13, nil, 7),      // the old pid 50
		cpuSample(proc(60, 600), 17, nil, 8),      // another node
		cpuSample(proc(30, 300), 19, []uint64{1}), // a kernel thread: no user stack
	}
}

// sampleKey flattens a pprof sample: step, the other labels, frames leaf first.
func sampleKey(s *profile.Sample) string {
	var names []string
	for _, l := range s.Location {
		for _, ln := range l.Line {
			names = append(names, ln.Function.Name)
		}
	}
	var ls []string
	for k, v := range s.Label {
		if k != schema.JobStep.Label {
			ls = append(ls, k+"="+v[0])
		}
	}
	sort.Strings(ls)
	return fmt.Sprint(s.Label[schema.JobStep.Label], ls, names)
}

// byJob parses the outputs of one profile type, by job id.
func byJob(t *testing.T, outs []Output, typ profiles.Type) map[string]*profile.Profile {
	t.Helper()
	m := map[string]*profile.Profile{}
	for _, o := range outs {
		if o.Type.Name != typ.Name {
			continue
		}
		p, err := profile.Parse(bytes.NewReader(o.Data))
		if err != nil {
			t.Fatalf("job %s: %v", o.JobID, err)
		}
		m[o.JobID] = p
	}
	return m
}

func sums(p *profile.Profile) map[string][2]int64 {
	got := map[string][2]int64{}
	for _, s := range p.Sample {
		k := sampleKey(s)
		// The count and the main value: the first and the last.
		got[k] = [2]int64{got[k][0] + s.Value[0], got[k][1] + s.Value[len(s.Value)-1]}
	}
	return got
}

func TestCollectOneProfilePerJob(t *testing.T) {
	res, samples := fixture()
	sink := &memSink{}
	now := time.Unix(1000, 0)
	src := cpuLike(samples)
	sym := &fakeSym{}
	d := New(Config{Interval: 15 * time.Second, Now: func() time.Time { return now }},
		[]source.Source{src}, sym, res, sink)
	now = now.Add(15 * time.Second)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.outs) != 2 {
		t.Fatalf("%d profiles, want 2 (one per job)", len(sink.outs))
	}
	for _, o := range sink.outs {
		if o.Start.Unix() != 1000 || o.End.Unix() != 1015 || o.Type.ID() != "process_cpu:cpu:nanoseconds:cpu:nanoseconds" {
			t.Errorf("output %+v", o)
		}
	}
	profs := byJob(t, sink.outs, profiles.CPU)
	p1 := profs["1"]
	wantComments := []string{schema.JobID.Label + "=1", schema.JobName.Label + `=train "llama" ✓`, schema.JobUser.Label + "=bob",
		schema.JobAccount.Label + "=phys", schema.HostName.Label + "=node-a", schema.ServiceName + `=train "llama" ✓`}
	if fmt.Sprint(p1.Comments) != fmt.Sprint(wantComments) {
		t.Errorf("comments = %q\nwant %q", p1.Comments, wantComments)
	}
	if p1.Period != 1e7 {
		t.Errorf("period %d, want the source's", p1.Period)
	}
	// Values: samples and cpu nanoseconds, by step label.
	want := map[string][2]int64{
		"[0] [] [k9 fn1 fn2]": {3, 3e7},
		"[0] [] [fn1 fn2]":    {2, 2e7},
		"[batch] [] [fn3]":    {1, 1e7},
	}
	if got := sums(p1); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("job 1 samples = %v\nwant %v", got, want)
	}
	if p2 := profs["2"]; len(p2.Sample) != 1 || p2.Sample[0].Value[0] != 5 {
		t.Errorf("job 2: the reused pid's or another node's samples leaked in: %v", p2.Sample)
	}
	for reason, n := range map[string]float64{"exited": 11 + 13, "not_in_job": 7 + 19, "other_node": 17} {
		if v := testutil.ToFloat64(src.info.Unattributed.WithLabelValues(reason)); v != n {
			t.Errorf("unattributed %s = %v, want %v", reason, v, n)
		}
	}
	if v := testutil.ToFloat64(src.info.Drained); v != 78 {
		t.Errorf("samples = %v", v)
	}
}

func TestAllProcessesProfilesTheRestWithoutSlurmLabels(t *testing.T) {
	res, samples := fixture()
	sink := &memSink{}
	sym := &fakeSym{}
	d := New(Config{AllProcesses: true}, []source.Source{cpuLike(samples)}, sym, res, sink)
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
	// The kernel thread's sample has no user stack: nothing to symbolise,
	// and its process's maps are not read for it.
	if got := sums(byJob(t, sink.outs, profiles.CPU)[""]); got["[] [] [k1]"] != [2]int64{19, 19e7} {
		t.Errorf("kernel-only sample: %v", got)
	}
	if sym.userCalls != 5 {
		t.Errorf("%d user stacks symbolised, want 5 (the attributed samples with one)", sym.userCalls)
	}
}

func TestDrainErrorKeepsTheInterval(t *testing.T) {
	res := fixtureProcs()
	sink := &memSink{}
	now := time.Unix(1000, 0)
	s := cpuLike()
	s.err = errors.New("map read failed")
	d := New(Config{Now: func() time.Time { return now }}, []source.Source{s}, &fakeSym{}, res, sink)
	now = now.Add(time.Minute)
	if err := d.Collect(context.Background()); err == nil {
		t.Fatal("drain error swallowed")
	}
	s.err = nil
	s.batches = [][]source.Sample{{cpuSample(proc(10, 100), 1, nil, 1)}}
	now = now.Add(time.Minute)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.outs) != 1 || sink.outs[0].Start.Unix() != 1000 {
		t.Fatalf("the next interval should start where the failed one did: %+v", sink.outs)
	}
}

// Each source has its own interval: one that fails does not hold back the
// others, and they do not move its start.
func TestSourcesKeepTheirOwnIntervals(t *testing.T) {
	res := fixtureProcs()
	sink := &memSink{}
	now := time.Unix(1000, 0)
	broken := cpuLike()
	broken.err = errors.New("map read failed")
	other := newFakeSource("other", profiles.GPU, 1, 2)
	other.batches = [][]source.Sample{{{Proc: proc(10, 100), User: []uint64{1}, Values: []int64{1, 0, 5}}}}
	d := New(Config{Now: func() time.Time { return now }}, []source.Source{broken, other}, &fakeSym{}, res, sink)
	now = now.Add(time.Minute)
	if err := d.Collect(context.Background()); err == nil {
		t.Fatal("drain error swallowed")
	}
	if len(sink.outs) != 1 || sink.outs[0].Type.Name != profiles.GPU.Name || sink.outs[0].Start.Unix() != 1000 {
		t.Fatalf("the working source's profile: %+v", sink.outs)
	}
	broken.err = nil
	broken.batches = [][]source.Sample{{cpuSample(proc(10, 100), 1, nil, 1)}}
	now = now.Add(time.Minute)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.outs) != 2 || sink.outs[1].Type.Name != profiles.CPU.Name || sink.outs[1].Start.Unix() != 1000 {
		t.Fatalf("the recovered source's profile: %+v", sink.outs)
	}
}

func TestRunFlushesTheLastIntervalOnStop(t *testing.T) {
	res, samples := fixture()
	sink := &memSink{}
	d := New(Config{Interval: time.Hour}, []source.Source{cpuLike(samples)}, &fakeSym{}, res, sink)
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
	res := fixtureProcs()
	sym := &fakeSym{}
	d := New(Config{}, []source.Source{cpuLike()}, sym, res, &memSink{})
	d.rescan(false)
	d.rescan(false) // a second pass prepares nothing again
	slices.Sort(sym.prepared)
	got := fmt.Sprint(sym.prepared)
	if got != "[10 11 20 50]" {
		t.Errorf("prepared %s, want the job processes of this node once each", got)
	}
}

func TestNoSamplesNoProfile(t *testing.T) {
	sink := &memSink{}
	d := New(Config{}, []source.Source{cpuLike(), newFakeSource("other", profiles.GPU, 1, 2)}, &fakeSym{}, fixtureProcs(), sink)
	d.rescan(false)
	if err := d.Collect(context.Background()); err != nil || len(sink.outs) != 0 {
		t.Errorf("%v, outputs %+v", err, sink.outs)
	}
}

type failSink struct{ err error }

func (f *failSink) Write(context.Context, []Output) error { return f.err }

// TestLastIntervalIsTheHeartbeat: the end of an interval counts as
// delivered once the sink took its profiles, or when it made none; a
// failed write leaves the heartbeat where it was.
func TestLastIntervalIsTheHeartbeat(t *testing.T) {
	now := time.Unix(1000, 0)
	s := cpuLike()
	sink := &failSink{}
	d := New(Config{Now: func() time.Time { return now }}, []source.Source{s}, &fakeSym{}, fixtureProcs(), sink)
	if _, ok := d.LastInterval(); ok {
		t.Fatal("a heartbeat before the first interval")
	}
	now = now.Add(time.Minute) // nothing sampled: delivered
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, ok := d.LastInterval(); !ok || !got.Equal(now) {
		t.Fatalf("LastInterval after an empty interval = %v, %v; want %v", got, ok, now)
	}
	delivered := now
	sink.err = errors.New("disk full")
	s.batches = [][]source.Sample{{cpuSample(proc(10, 100), 1, nil, 1)}}
	now = now.Add(time.Minute)
	if err := d.Collect(context.Background()); err == nil {
		t.Fatal("write error swallowed")
	}
	if got, _ := d.LastInterval(); !got.Equal(delivered) {
		t.Fatalf("LastInterval after a failed write = %v, want %v", got, delivered)
	}
	sink.err = nil
	s.batches = [][]source.Sample{{cpuSample(proc(10, 100), 1, nil, 1)}}
	now = now.Add(time.Minute)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.LastInterval(); !got.Equal(now) {
		t.Fatalf("LastInterval after a written interval = %v, want %v", got, now)
	}
}
