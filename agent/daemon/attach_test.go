package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

// attachingSource is a fake source that attaches to processes, answering
// from a script per pid (then AttachReload).
type attachingSource struct {
	*fakeSource
	script    map[int][]source.Attach
	errs      map[int]error
	calls     map[int]int
	forgotten []procfs.ID
}

var _ source.ProcessAttacher = (*attachingSource)(nil)

func (a *attachingSource) AttachProcess(p procfs.ID) (source.Attach, error) {
	i := a.calls[p.PID]
	a.calls[p.PID]++
	if s := a.script[p.PID]; i < len(s) {
		return s[i], a.errs[p.PID]
	}
	return source.AttachReload, nil
}

func (a *attachingSource) ForgetProcess(p procfs.ID) { a.forgotten = append(a.forgotten, p) }

// The daemon attaches a source to each profiled process when a rescan
// first finds it, retries at full rescans only while the source asks, and
// re-reads symbols when the source says the process exec'd. Its samples
// keep their own frames and labels.
func TestAttachingSource(t *testing.T) {
	res := fixtureProcs()
	sink := &memSink{}
	sym := &fakeSym{}
	now := time.Unix(1000, 0)
	gpu := &attachingSource{fakeSource: newFakeSource("gpu", profiles.GPU, 1, 2),
		script: map[int][]source.Attach{
			20: {source.AttachRetry, source.AttachRetry}, // attached on the second full rescan
			11: {source.AttachRetry},                     // fails, and is retried
			10: {source.AttachDone},                      // nothing to do: no reload
		},
		errs:  map[int]error{11: errors.New("uprobe failed")},
		calls: map[int]int{}}
	gpuLabel := []profiles.Label{{Name: schema.GPUIndex.Label, Value: "1"}}
	gpu.batches = [][]source.Sample{{
		{Proc: proc(10, 100), Frames: []symbolize.Frame{{Function: "gemm"}}, User: []uint64{1, 2}, Labels: gpuLabel, Values: []int64{7, 0, 700}},
		{Proc: proc(10, 100), Frames: []symbolize.Frame{{Function: "gemm"}, {Function: "[unsampled]"}}, Values: []int64{3, 0, 300}},
		{Proc: proc(40, 400), Frames: []symbolize.Frame{{Function: "k4"}}, Values: []int64{1, 0, 17}}, // exited and gone
		{Proc: proc(30, 300), Frames: []symbolize.Frame{{Function: "k3"}}, Values: []int64{1, 0, 13}}, // in no job
	}}
	cpu := cpuLike([]source.Sample{cpuSample(proc(10, 100), 1, nil, 1)})
	d := New(Config{Now: func() time.Time { return now }}, []source.Source{cpu, gpu}, sym, res, sink)

	d.rescan(false) // Refresh lists every process of the fixture
	if gpu.calls[20] != 1 || !d.srcs[1].pending[proc(20, 200)] || d.srcs[0].pending[proc(20, 200)] {
		t.Fatalf("pid 20: %d attach calls, pending %v", gpu.calls[20], d.srcs[1].pending)
	}
	d.rescan(false) // not full: no retry
	if gpu.calls[20] != 1 {
		t.Fatalf("a partial rescan retried pid 20")
	}
	res.scan = true
	d.rescan(true)
	d.rescan(true)
	if gpu.calls[20] != 3 || d.srcs[1].pending[proc(20, 200)] || gpu.calls[11] != 2 {
		t.Fatalf("attach calls %v (want 3 for pid 20, 2 for 11), pending %v", gpu.calls, d.srcs[1].pending)
	}
	if gpu.calls[10] != 1 || gpu.calls[30] != 0 || gpu.calls[60] != 0 {
		t.Errorf("attach calls %v: want one for each profiled process, none for others", gpu.calls)
	}
	if v := testutil.ToFloat64(d.m.errors.WithLabelValues("gpu_attach")); v != 1 {
		t.Errorf("gpu_attach errors %v, want 1", v)
	}
	// Reloaded: 11 (after its retry), 20 and 50; not 10, which needed none.
	slices.Sort(sym.forgotten)
	if fmt.Sprint(sym.forgotten) != "[11 20 50]" {
		t.Errorf("symbols re-read for %v, want [11 20 50]", sym.forgotten)
	}

	now = now.Add(15 * time.Second)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	gp := byJob(t, sink.outs, profiles.GPU)["1"]
	if gp == nil || len(byJob(t, sink.outs, profiles.CPU)) != 1 {
		t.Fatalf("outputs %+v", sink.outs)
	}
	want := map[string][2]int64{
		"[0] [" + schema.GPUIndex.Label + "=1] [gemm fn1 fn2]": {7, 700},
		"[0] [] [gemm [unsampled]]":                            {3, 300},
	}
	if got := sums(gp); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("gpu job 1 = %v\nwant %v", got, want)
	}
	if gp.Period != 1 {
		t.Errorf("period %d", gp.Period)
	}
	for reason, n := range map[string]float64{"exited": 17, "not_in_job": 13} {
		if v := testutil.ToFloat64(gpu.info.Unattributed.WithLabelValues(reason)); v != n {
			t.Errorf("gpu unattributed %s = %v, want %v", reason, v, n)
		}
	}
	if v := testutil.ToFloat64(gpu.info.Drained); v != 700+300+17+13 {
		t.Errorf("gpu drained %v", v)
	}

	// A process gone from the resolver is forgotten by the source too.
	delete(res.procs, 20)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(gpu.forgotten) != 1 || gpu.forgotten[0] != proc(20, 200) {
		t.Errorf("forgotten by the source: %v", gpu.forgotten)
	}
}
