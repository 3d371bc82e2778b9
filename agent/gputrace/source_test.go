package gputrace

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/schema"
)

type fakeTracer struct {
	attach  map[int]error
	samples []Sample
	stats   Stats
	err     error
}

func (f *fakeTracer) Attach(p procfs.ID) error { return f.attach[p.PID] }

func (f *fakeTracer) Drain() ([]Sample, Stats, error) {
	if errors.Is(f.err, errClosed) {
		return nil, Stats{}, f.err
	}
	return f.samples, f.stats, f.err
}

// environs writes /proc/<pid>/environ files under a fixture root.
func environs(t *testing.T, envs map[int]string) procfs.FS {
	t.Helper()
	root := t.TempDir()
	for pid, env := range envs {
		d := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "environ"), []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return procfs.New(root)
}

func TestSourceAttachAnswers(t *testing.T) {
	tr := &fakeTracer{attach: map[int]error{
		2: ErrNotInjected,
		3: fmt.Errorf("pid 3: %w", fs.ErrNotExist),
		4: errors.New("uprobe: EBUSY"),
	}}
	g := NewSource(tr, environs(t, nil), nil, nil)
	for pid, want := range map[int]source.Attach{1: source.AttachReload, 2: source.AttachRetry, 3: source.AttachDone, 4: source.AttachRetry} {
		got, err := g.AttachProcess(procfs.ID{PID: pid, Start: 1})
		if got != want || (err != nil) != (pid == 4) {
			t.Errorf("pid %d: %v, %v; want %v", pid, got, err, want)
		}
	}
}

func TestSourceSamples(t *testing.T) {
	a, b := procfs.ID{PID: 10, Start: 100}, procfs.ID{PID: 20, Start: 200}
	tr := &fakeTracer{samples: []Sample{
		{Proc: a, User: []uint64{1, 2}, Kernel: "gemm", KernelRaw: "gemm", Device: 1, GPUInstance: GPUInstanceNone, GPUTime: 700, Launches: 7},
		{Proc: a, Unsampled: true, Kernel: "gemm", KernelRaw: "gemm", Device: 1, GPUTime: 300, Launches: 3},
		{Proc: a, User: []uint64{3}, KernelRaw: "_Z6reducev", Device: DeviceUnknown, GPUTime: 50, Launches: 1},
		{Proc: b, User: []uint64{4}, Kernel: "k2", Device: 0, GPUTime: 11, Launches: 1}, // no environment: no GPU label
	}, stats: Stats{AttachedFiles: 1, LostRingBuffer: 2}}
	devices := func(env map[string]string, ordinal uint32) []profiles.Label {
		return []profiles.Label{{Name: schema.GPUIndex.Label, Value: fmt.Sprintf("%s#%d", env["CUDA_VISIBLE_DEVICES"], ordinal)}}
	}
	g := NewSource(tr, environs(t, map[int]string{10: "CUDA_VISIBLE_DEVICES=2,3\x00"}), []string{"CUDA_VISIBLE_DEVICES"}, devices)
	for _, p := range []procfs.ID{a, b} {
		if _, err := g.AttachProcess(p); err != nil {
			t.Fatal(err)
		}
	}
	if info := g.Info(); info.Period != 1 || info.Counted != 2 || info.Type.Name != profiles.GPU.Name {
		t.Errorf("info %+v", info)
	}
	batch, err := g.Drain()
	if err != nil || batch.Warn != nil || len(batch.Samples) != 4 {
		t.Fatalf("%+v, %v", batch, err)
	}
	var got []string
	for _, s := range batch.Samples {
		var fns []string
		for _, f := range s.Frames {
			fns = append(fns, f.Function)
		}
		got = append(got, fmt.Sprint(s.Proc.PID, fns, s.User, s.Labels, s.Values))
	}
	idx := schema.GPUIndex.Label
	want := []string{
		"10 [gemm] [1 2] [{" + idx + " 2,3#1}] [7 0 700]",
		"10 [gemm " + UnsampledFrame + "] [] [{" + idx + " 2,3#1}] [3 0 300]",
		"10 [_Z6reducev] [3] [] [1 0 50]", // no demangled name: the raw one; unknown device: no label
		"20 [k2] [4] [] [1 0 11]",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("samples\n%q\nwant\n%q", got, want)
	}
	if v := testutil.ToFloat64(g.m.lost.WithLabelValues("ring_buffer")); v != 2 {
		t.Errorf("ring buffer losses %v", v)
	}
	// Forgotten processes lose their labels.
	g.ForgetProcess(a)
	if l := g.labels(a, 1); l != nil {
		t.Errorf("labels after forget: %v", l)
	}

	// Counters that could not be read only warn; a closed tracer fails.
	tr.err = errors.New("read stats: EFAULT")
	if b, err := g.Drain(); err != nil || b.Warn == nil || len(b.Samples) != 4 {
		t.Errorf("stats failure: %+v, %v", b, err)
	}
	tr.err = errClosed
	if _, err := g.Drain(); err == nil {
		t.Error("closed tracer drained")
	}
}

// The daemon adds GPU time in nanoseconds, as the samples carry it; the
// counters export it in seconds, exactly.
func TestSourceCountsGPUTimeInSeconds(t *testing.T) {
	info := NewSource(&fakeTracer{}, procfs.FS{}, nil, nil).Info()
	if info.Counted != 2 {
		t.Fatalf("counted value %d, want the gpu_time one", info.Counted)
	}
	for range 3 {
		info.Drained.Add(500_000_001)
		info.Unattributed.WithLabelValues("exited").Add(1)
	}
	if got := testutil.ToFloat64(info.Drained); got != 1.500000003 {
		t.Errorf("drained = %v s, want 1.500000003", got)
	}
	if got := testutil.ToFloat64(info.Unattributed.WithLabelValues("exited")); got != 3e-9 {
		t.Errorf("unattributed = %v s, want 3e-9", got)
	}
	if schema.AgentGPUKernelTime.Unit != "seconds" {
		t.Errorf("unit %q", schema.AgentGPUKernelTime.Unit)
	}
}

// Forged records can push a counter past what pprof's int64 holds: it
// saturates, never wraps negative.
func TestSaturate(t *testing.T) {
	for in, want := range map[uint64]int64{0: 0, 42: 42, math.MaxInt64: math.MaxInt64, math.MaxInt64 + 1: math.MaxInt64, math.MaxUint64: math.MaxInt64} {
		if got := saturate(in); got != want {
			t.Errorf("saturate(%d) = %d, want %d", in, got, want)
		}
	}
}

// A process that CUDA gives another injection library (Nsight sets
// CUDA_INJECTION64_PATH for what it profiles) is counted once for its job,
// whatever the name of ours or how often the daemon asks; time the library
// stood aside is its job's too, in seconds.
func TestSourcePerJobReasons(t *testing.T) {
	tr := &fakeTracer{attach: map[int]error{2: ErrNotInjected, 3: ErrNotInjected, 4: ErrNotInjected, 5: ErrNotInjected}}
	g := NewSource(tr, environs(t, map[int]string{
		2: "A=1\x00CUDA_INJECTION64_PATH=/opt/nvidia/nsight-systems/target-linux-x64/libToolsInjection64.so\x00",
		3: "CUDA_INJECTION64_PATH=/usr/lib/slurmscope/libslurmscope_inject.so\x00", // ours, not loaded yet
		4: "CUDA_INJECTION64_PATH=\x00",
		5: "HOME=/\x00",
	}), nil, nil).WithJobs(func(p procfs.ID) string { return map[int]string{2: "77", 3: "77", 4: "78", 5: "78"}[p.PID] })
	for range 3 {
		for pid := 2; pid <= 5; pid++ {
			if got, _ := g.AttachProcess(procfs.ID{PID: pid, Start: 1}); got != source.AttachRetry {
				t.Errorf("pid %d: %v", pid, got)
			}
		}
	}
	if n := testutil.ToFloat64(g.m.otherInjection.WithLabelValues("77")); n != 1 {
		t.Errorf("job 77: %v processes with another injection, want 1", n)
	}
	if n := testutil.CollectAndCount(g.m.otherInjection); n != 1 {
		t.Errorf("%d series, want only job 77's", n)
	}
	tr.samples = []Sample{{Proc: procfs.ID{PID: 2, Start: 1}, Kernel: UntracedFrame, KernelRaw: UntracedFrame, Device: DeviceUnknown, Untraced: 1_500_000_000}}
	b, err := g.Drain()
	if err != nil || len(b.Samples) != 1 {
		t.Fatalf("%+v %v", b, err)
	}
	if v := b.Samples[0].Values; fmt.Sprint(v) != "[0 1500000000 0]" || b.Samples[0].Frames[0].Function != UntracedFrame {
		t.Errorf("untraced sample %+v", b.Samples[0])
	}
	if s := testutil.ToFloat64(g.m.steppedAside.WithLabelValues("77", "cupti_client")); s != 1.5 {
		t.Errorf("job 77 stepped aside %v s, want 1.5", s)
	}
}
