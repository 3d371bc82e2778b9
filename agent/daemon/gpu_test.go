package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"sort"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/schema"
)

type fakeGPU struct {
	batches  [][]gputrace.Sample
	attach   map[int][]error // pid -> errors of successive Attach calls, then nil
	attached []int
	calls    map[int]int
}

func (f *fakeGPU) Attach(p procfs.ID) error {
	pid := p.PID
	if f.calls == nil {
		f.calls = map[int]int{}
	}
	i := f.calls[pid]
	f.calls[pid]++
	if errs := f.attach[pid]; i < len(errs) {
		return errs[i]
	}
	f.attached = append(f.attached, pid)
	return nil
}

func (f *fakeGPU) Drain() ([]gputrace.Sample, gputrace.Stats, error) {
	if len(f.batches) == 0 {
		return nil, gputrace.Stats{AttachedFiles: 1}, nil
	}
	b := f.batches[0]
	f.batches = f.batches[1:]
	return b, gputrace.Stats{AttachedFiles: 1, LostRingBuffer: 2}, nil
}

// gpuSample flattens a gpu pprof sample: step, GPU labels, frames leaf first.
func gpuSampleKey(s *profile.Sample) string {
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

func TestCollectGPUProfiles(t *testing.T) {
	res, cpuSamples := fixture()
	sink := &memSink{}
	now := time.Unix(1000, 0)
	gs := []gputrace.Sample{
		{Proc: procfs.ID{PID: 10, Start: 100}, User: []uint64{1, 2}, Kernel: "gemm", KernelRaw: "gemm", Device: 1, GPUInstance: gputrace.GPUInstanceNone, GPUTime: 700, Launches: 7},
		{Proc: procfs.ID{PID: 10, Start: 100}, Unsampled: true, Kernel: "gemm", KernelRaw: "gemm", Device: 1, GPUInstance: gputrace.GPUInstanceNone, GPUTime: 300, Launches: 3},
		{Proc: procfs.ID{PID: 10, Start: 100}, User: []uint64{3}, Kernel: "reduce", KernelRaw: "_Z6reducev", Device: gputrace.DeviceUnknown, GPUTime: 50, Launches: 1},
		{Proc: procfs.ID{PID: 20, Start: 200}, User: []uint64{4}, Kernel: "k2", Device: 0, GPUTime: 11, Launches: 1}, // no env: no GPU label
		{Proc: procfs.ID{PID: 30, Start: 300}, User: []uint64{5}, Kernel: "k3", Device: 0, GPUTime: 13, Launches: 1}, // in no job
		{Proc: procfs.ID{PID: 40, Start: 400}, User: []uint64{6}, Kernel: "k4", Device: 0, GPUTime: 17, Launches: 1}, // exited and gone
		{Proc: procfs.ID{PID: 50, Start: 500}, User: []uint64{7}, Kernel: "k5", Device: 0, GPUTime: 19, Launches: 1}, // the old pid 50
		{Proc: procfs.ID{PID: 60, Start: 600}, User: []uint64{8}, Kernel: "k6", Device: 0, GPUTime: 23, Launches: 1}, // another node
	}
	tr := &fakeGPU{batches: [][]gputrace.Sample{gs}, attach: map[int][]error{
		20: {gputrace.ErrNotInjected, gputrace.ErrNotInjected}, // attached on the second full rescan
	}}
	envs := map[int]map[string]string{10: {"CUDA_VISIBLE_DEVICES": "2,3"}}
	d := New(Config{SampleRate: 100, Interval: 15 * time.Second, Now: func() time.Time { return now },
		GPU: tr, GPUEnvKeys: []string{"CUDA_VISIBLE_DEVICES"},
		Environ: func(pid int, _ ...string) (map[string]string, error) {
			if e, ok := envs[pid]; ok {
				return e, nil
			}
			return nil, fs.ErrNotExist
		},
		GPUDevice: func(env map[string]string, ordinal uint32) []profiles.Label {
			return []profiles.Label{{Name: schema.GPUIndex.Label, Value: fmt.Sprintf("%s#%d", env["CUDA_VISIBLE_DEVICES"], ordinal)}}
		}},
		&fakeSampler{batches: [][]cpu.Sample{cpuSamples}}, &fakeSym{}, res, sink)
	d.rescan(false) // Refresh lists every process of the fixture
	if tr.calls[20] != 1 || d.gpu.pending[procKey{20, 200}] != true {
		t.Fatalf("pid 20: %d attach calls, pending %v", tr.calls[20], d.gpu.pending)
	}
	d.rescan(false) // not full: no retry
	if tr.calls[20] != 1 {
		t.Fatalf("a partial rescan retried pid 20")
	}
	res.scan = true
	d.rescan(true)
	d.rescan(true)
	if tr.calls[20] != 3 || d.gpu.pending[procKey{20, 200}] {
		t.Fatalf("pid 20: %d attach calls (want 3), pending %v", tr.calls[20], d.gpu.pending)
	}
	if tr.calls[10] != 1 || tr.calls[30] != 0 || tr.calls[60] != 0 {
		t.Errorf("attach calls %v: want one for each profiled process, none for others", tr.calls)
	}

	now = now.Add(15 * time.Second)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	gpuByJob := map[string]*profile.Profile{}
	for _, o := range sink.outs {
		if o.Type.Name != profiles.GPU.Name {
			continue
		}
		p, err := profile.Parse(bytes.NewReader(o.Data))
		if err != nil {
			t.Fatal(err)
		}
		gpuByJob[o.JobID] = p
		if o.Type.ID() != "gpu:gpu_time:nanoseconds:gpu_time:nanoseconds" || o.Start.Unix() != 1000 || o.End.Unix() != 1015 {
			t.Errorf("output %+v", o)
		}
		if p.Period != 1 || p.SampleType[0].Type != "kernel_launches" || p.SampleType[1].Unit != "nanoseconds" {
			t.Errorf("types %v period %d", p.SampleType, p.Period)
		}
	}
	if len(gpuByJob) != 2 {
		t.Fatalf("gpu profiles for jobs %v, want 1 and 2", gpuByJob)
	}
	got := map[string][2]int64{}
	for _, s := range gpuByJob["1"].Sample {
		k := gpuSampleKey(s)
		got[k] = [2]int64{got[k][0] + s.Value[0], got[k][1] + s.Value[1]}
	}
	idx := schema.GPUIndex.Label
	want := map[string][2]int64{
		"[0] [" + idx + "=2,3#1] [gemm fn1 fn2]":                         {7, 700},
		"[0] [" + idx + "=2,3#1] [gemm " + gputrace.UnsampledFrame + "]": {3, 300},
		"[0] [] [reduce fn3]":                                            {1, 50},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("job 1 = %v\nwant %v", got, want)
	}
	if c := gpuByJob["1"].Comments; len(c) == 0 || c[0] != schema.JobID.Label+"=1" {
		t.Errorf("job 1 comments %q", c)
	}
	if p2 := gpuByJob["2"]; len(p2.Sample) != 1 || p2.Sample[0].Value[1] != 11 || len(p2.Sample[0].Label) != 1 {
		t.Errorf("job 2: %v", p2.Sample)
	}
	for reason, n := range map[string]float64{"exited": 17 + 19, "not_in_job": 13, "other_node": 23} {
		if v := testutil.ToFloat64(d.m.gpuUnattributed.WithLabelValues(reason)); v != n {
			t.Errorf("gpu unattributed %s = %v, want %v", reason, v, n)
		}
	}
	if v := testutil.ToFloat64(d.m.gpuLost.WithLabelValues("ring_buffer")); v != 2 {
		t.Errorf("ring buffer losses %v", v)
	}
	// The CPU profiles are as without the tracer.
	cpuOuts := 0
	for _, o := range sink.outs {
		if o.Type.Name == profiles.CPU.Name {
			cpuOuts++
		}
	}
	if cpuOuts != 2 {
		t.Errorf("%d cpu profiles, want 2", cpuOuts)
	}
}

func TestCollectWithoutGPUTracerWritesNoGPUProfile(t *testing.T) {
	res, samples := fixture()
	sink := &memSink{}
	d := New(Config{}, &fakeSampler{batches: [][]cpu.Sample{samples}}, &fakeSym{}, res, sink)
	d.rescan(false)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, o := range sink.outs {
		if o.Type.Name != profiles.CPU.Name {
			t.Errorf("profile of type %s without a GPU tracer", o.Type.Name)
		}
	}
}
