package cpu

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

type fakeDrainer struct {
	samples []Sample
	stats   []Stats
	err     error
}

func (f *fakeDrainer) Drain() ([]Sample, Stats, error) {
	st := f.stats[0]
	f.stats = f.stats[1:]
	if f.err != nil && !errors.Is(f.err, ErrHotplug) {
		return nil, Stats{}, f.err
	}
	return f.samples, st, f.err
}

func TestSourceSamples(t *testing.T) {
	p := procfs.ID{PID: 7, Start: 99}
	d := &fakeDrainer{samples: []Sample{{Proc: p, Kernel: []uint64{1}, User: []uint64{2, 3}, Count: 4}},
		stats: []Stats{{AttachedCPUs: 2}, {AttachedCPUs: 2}, {AttachedCPUs: 2}}}
	s := NewSource(d, 100, nil)
	if info := s.Info(); info.Period != 1e7 || info.Type.Name != "process_cpu" || info.Counted != 0 {
		t.Errorf("info %+v", info)
	}
	b, err := s.Drain()
	if err != nil || b.Warn != nil || len(b.Samples) != 1 {
		t.Fatalf("%+v, %v", b, err)
	}
	if got := b.Samples[0]; got.Proc != p || fmt.Sprint(got.Values) != "[4 40000000]" ||
		fmt.Sprint(got.Kernel, got.User) != "[1] [2 3]" || got.Frames != nil {
		t.Errorf("sample %+v", got)
	}
	// Hotplug not followed: the samples are good, and it is a warning.
	d.err = fmt.Errorf("cpu sampler: %w: %w", ErrHotplug, errors.New("cpu 3: EBUSY"))
	if b, err := s.Drain(); err != nil || b.Warn == nil || len(b.Samples) != 1 {
		t.Errorf("hotplug failure: %+v, %v", b, err)
	}
	// Anything else drained nothing.
	d.err = errors.New("map read failed")
	if b, err := s.Drain(); err == nil || len(b.Samples) != 0 {
		t.Errorf("drain failure: %+v, %v", b, err)
	}
}

func TestSourceLostReasons(t *testing.T) {
	m := newMetrics()
	prev := Stats{LostMapFull: 1, KernelStackErrors: 1, UserStackMapFull: 2}
	cur := Stats{LostMapFull: 4, KernelStackErrors: 2, UserStackErrors: 3, KernelStackMapFull: 5, UserStackMapFull: 9, AttachedCPUs: 3}
	m.observe(prev, cur)
	for reason, want := range map[string]float64{"map_full": 3, "stack_error": 4, "stack_map_full": 12} {
		if got := testutil.ToFloat64(m.lost.WithLabelValues(reason)); got != want {
			t.Errorf("lost{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.lost); n != 3 {
		t.Errorf("%d lost reasons, want 3", n)
	}
	if got := testutil.ToFloat64(m.cpus); got != 3 {
		t.Errorf("sampled cpus %v", got)
	}
}

func TestKindChecksTheRate(t *testing.T) {
	for rate, ok := range map[int]bool{0: false, 1: true, 97: true, 10000: true, 10001: false} {
		k := &Kind{on: true, rate: rate}
		if (k.Check() == nil) != ok {
			t.Errorf("rate %d: %v", rate, k.Check())
		}
	}
	if err := (&Kind{rate: 0}).Check(); err != nil {
		t.Errorf("a rate is not checked when CPU profiling is off: %v", err)
	}
}

func TestMapSizesFollowCPUsAndInterval(t *testing.T) {
	for _, tc := range []struct {
		cpus, rate     int
		interval       time.Duration
		counts, stacks int
	}{
		{2, 97, 15 * time.Second, minMapEntries, minMapEntries}, // 3637 samples a generation
		{64, 97, 15 * time.Second, 116400, maxStackEntriesAuto}, // every sample its own key, a quarter more
		{64, 97, 60 * time.Second, maxCountEntriesAuto, maxStackEntriesAuto},
		{512, 997, 15 * time.Second, maxCountEntriesAuto, maxStackEntriesAuto},
	} {
		c, s := MapSizes(tc.cpus, tc.rate, tc.interval)
		if c != tc.counts || s != tc.stacks {
			t.Errorf("MapSizes(%d, %d, %v) = %d, %d; want %d, %d", tc.cpus, tc.rate, tc.interval, c, s, tc.counts, tc.stacks)
		}
	}
}

// TestMapsFullNamesTheJob: a generation whose maps were full names the job
// with the most distinct keys in it.
func TestMapsFullNamesTheJob(t *testing.T) {
	var samples []Sample
	for i := range 50 {
		samples = append(samples, Sample{Proc: procfs.ID{PID: 100 + i%5, Start: 1}, Count: 1}) // job 7: 5 processes
	}
	samples = append(samples, Sample{Proc: procfs.ID{PID: 9, Start: 1}, Count: 1000}) // job 8: many samples, one key
	d := &fakeDrainer{samples: samples, stats: []Stats{{}, {LostMapFull: 3}, {LostMapFull: 4, UserStackMapFull: 1, InterpStackMapFull: 2}}}
	s := NewSource(d, 97, nil).WithJobs(func(p procfs.ID) string {
		if p.PID >= 100 {
			return "7"
		}
		return "8"
	})
	for range 3 {
		if _, err := s.Drain(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		job, m string
		want   float64
	}{{"7", "counts", 2}, {"7", "stacks", 1}, {"7", "interpreter_stacks", 1}, {"8", "counts", 0}} {
		if got := testutil.ToFloat64(s.m.mapsFull.WithLabelValues(tc.job, tc.m)); got != tc.want {
			t.Errorf("maps full {job %s, map %s} = %v, want %v", tc.job, tc.m, got, tc.want)
		}
	}
}
