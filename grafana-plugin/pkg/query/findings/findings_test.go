package findings

import (
	"math"
	"strings"
	"testing"
)

const gib = float64(1 << 30)

// node is one node of a job: 16 cores for an hour, 32 GiB requested.
func node(used, peak float64) Node {
	return Node{Host: "node-a", Seconds: 3600, CPUSeconds: used * 3600, UsedCores: used, HasCPU: true, Cores: 16,
		MemPeak: peak, MemLimit: 32 * gib}
}

// quiet is a job that gives no finding: cores and memory well used.
func quiet() Job {
	return Job{ID: "42", User: "alice", Name: "train", Nodes: []Node{node(12, 16*gib)}}
}

func kinds(fs []Finding) string {
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Kind))
	}
	return strings.Join(out, ",")
}

func find(fs []Finding, k Kind) (Finding, bool) {
	for _, f := range fs {
		if f.Kind == k {
			return f, true
		}
	}
	return Finding{}, false
}

func number(f Finding, name string) float64 {
	for _, n := range f.Numbers {
		if n.Name == name {
			return n.Value
		}
	}
	return math.NaN()
}

func TestQuietJob(t *testing.T) {
	if fs := Evaluate(quiet(), Thresholds{}); len(fs) != 0 {
		t.Errorf("findings for a job that used what it asked for: %+v", fs)
	}
	if fs := Evaluate(Job{ID: "1"}, Thresholds{}); len(fs) != 0 {
		t.Errorf("findings for a job with nothing known: %+v", fs)
	}
}

// at runs a job with one figure at, just below and just above a threshold,
// and checks where the finding fires.
func at(t *testing.T, k Kind, threshold float64, job func(v float64) Job, firesBelow bool) {
	t.Helper()
	const eps = 1e-9
	for _, tc := range []struct {
		v     float64
		fires bool
	}{
		{threshold - eps, firesBelow},
		{threshold, !firesBelow}, // "below" is strict, "above" inclusive
		{threshold + eps, !firesBelow},
	} {
		f, ok := find(Evaluate(job(tc.v), Thresholds{}), k)
		if ok != tc.fires {
			t.Errorf("%s at %v (threshold %v): fires %v, want %v", k, tc.v, threshold, ok, tc.fires)
		}
		// A GPU finding's value is how many GPUs it found idle.
		value := tc.v
		if k == GPUIdle {
			value = 1
		}
		if ok && (f.Threshold != threshold || math.Abs(f.Value-value) > 1e-6 || f.Summary == "" || f.Advice == "") {
			t.Errorf("%s at %v: %+v", k, tc.v, f)
		}
	}
}

func TestCPUUnderused(t *testing.T) {
	d := Defaults()
	at(t, CPUUnderused, d.CPUEfficiencyBelow, func(v float64) Job {
		j := quiet()
		j.Nodes[0].UsedCores = 16 * v
		return j
	}, true)
	j := quiet()
	j.Nodes[0].UsedCores = 1.9
	f, ok := find(Evaluate(j, Thresholds{}), CPUUnderused)
	if !ok || f.Summary != "used 1.9 of 16 cores (12%)" || f.Severity != Warning {
		t.Fatalf("%+v", f)
	}
	if w := number(f, "wasted_core_hours"); math.Abs(w-14.1) > 1e-9 {
		t.Errorf("wasted core-hours %v, want 14.1", w)
	}
	// Two nodes: the job's cores and use are summed.
	j.Nodes = append(j.Nodes, node(0.1, 16*gib))
	f, _ = find(Evaluate(j, Thresholds{}), CPUUnderused)
	if f.Summary != "used 2 of 32 cores (6%) on 2 nodes" {
		t.Errorf("two nodes: %q", f.Summary)
	}
	// No allocation known (cores not constrained): nothing to judge.
	j = quiet()
	j.Nodes[0].UsedCores, j.Nodes[0].Cores = 0.1, 0
	if _, ok := find(Evaluate(j, Thresholds{}), CPUUnderused); ok {
		t.Error("judged a job whose allocation is unknown")
	}
	// A setting moves the threshold.
	j = quiet()
	j.Nodes[0].UsedCores = 12
	if _, ok := find(Evaluate(j, Thresholds{CPUEfficiencyBelow: 0.8}), CPUUnderused); !ok {
		t.Error("75% of the cores under an 80% threshold")
	}
}

func TestMemoryThresholds(t *testing.T) {
	d := Defaults()
	peakAt := func(v float64) Job {
		j := quiet()
		j.Nodes[0].MemPeak = 32 * gib * v
		return j
	}
	at(t, MemoryOverRequested, d.MemoryUsedBelow, peakAt, true)
	at(t, MemoryNearLimit, d.MemoryUsedAbove, peakAt, false)
	f, _ := find(Evaluate(peakAt(1.2/32), Thresholds{}), MemoryOverRequested)
	if f.Summary != "peak memory 1.2 GiB of 32.0 GiB requested (4%)" || f.Severity != Info || !strings.Contains(f.Advice, "about 1.4 GiB") {
		t.Errorf("%+v", f)
	}
	// The busiest node decides: one well-used node is not over-requested.
	j := peakAt(0.01)
	j.Nodes = append(j.Nodes, node(12, 20*gib))
	if fs := Evaluate(j, Thresholds{}); kinds(fs) != "" {
		t.Errorf("two nodes, one used at 62%%: %s", kinds(fs))
	}
	// No limit: nothing to compare with.
	j = peakAt(0.01)
	j.Nodes[0].MemLimit = 0
	if fs := Evaluate(j, Thresholds{}); len(fs) != 0 {
		t.Errorf("no limit: %s", kinds(fs))
	}
}

func TestOOMKilled(t *testing.T) {
	j := quiet()
	j.Nodes[0].MemPeak = 32 * gib
	j.Nodes[0].OOMKills = 0
	if _, ok := find(Evaluate(j, Thresholds{}), OOMKilled); ok {
		t.Error("no kill, a finding")
	}
	if kinds(Evaluate(j, Thresholds{})) != string(MemoryNearLimit) {
		t.Errorf("at the limit without a kill: %s", kinds(Evaluate(j, Thresholds{})))
	}
	j.Nodes[0].OOMKills = 1
	fs := Evaluate(j, Thresholds{})
	// The kill says it all: no "near the limit" beside it.
	if kinds(fs) != string(OOMKilled) {
		t.Fatalf("findings %s", kinds(fs))
	}
	if fs[0].Severity != Critical || fs[0].Summary != "1 process OOM-killed (peak 32.0 GiB of a 32.0 GiB limit)" || fs[0].Value != 1 {
		t.Errorf("%+v", fs[0])
	}
	j.Nodes = append(j.Nodes, Node{Host: "node-b", OOMKills: 2})
	if f, _ := find(Evaluate(j, Thresholds{}), OOMKilled); f.Value != 3 || !strings.HasPrefix(f.Summary, "3 processes") {
		t.Errorf("kills over nodes: %+v", f)
	}
}

func gpu(index string, mean, max, mem float64) GPU {
	return GPU{Host: "node-a", UUID: "GPU-" + index, Index: index, UtilMean: mean, UtilMax: max, HasUtil: true,
		MemMax: mem, MemTotal: 80 * gib, Hours: 1}
}

func TestGPUIdle(t *testing.T) {
	d := Defaults()
	at(t, GPUIdle, d.GPUIdleBelow, func(v float64) Job {
		j := quiet()
		j.GPUs = []GPU{gpu("0", 0.5, 0.9, 40*gib), gpu("1", v/2, v, 0)}
		return j
	}, true)
	j := quiet()
	j.GPUs = []GPU{gpu("0", 0.5, 0.9, 40*gib), gpu("1", 0, 0, 0)}
	f, _ := find(Evaluate(j, Thresholds{}), GPUIdle)
	if f.Severity != Warning || f.Summary != "1 of 2 allocated GPUs idle (GPU 1 on node-a), 1.0 GPU-hours" {
		t.Errorf("%+v", f)
	}
	j.GPUs[0] = gpu("0", 0, 0.001, 0)
	if f, _ := find(Evaluate(j, Thresholds{}), GPUIdle); f.Severity != Critical || f.Value != 2 {
		t.Errorf("every GPU idle: %+v", f)
	}
	// A MIG instance has no utilisation: idle when the job never held
	// memory on it.
	mig := GPU{Host: "node-a", Index: "2", MIGInstance: "1", MemTotal: 40 * gib, Hours: 2}
	j.GPUs = []GPU{mig}
	if f, ok := find(Evaluate(j, Thresholds{}), GPUIdle); !ok || !strings.Contains(f.Summary, "GPU 2 MIG 1 on node-a") {
		t.Errorf("idle MIG instance: %+v", f)
	}
	j.GPUs[0].MemMax = 30 * gib
	if _, ok := find(Evaluate(j, Thresholds{}), GPUIdle); ok {
		t.Error("a MIG instance with the job's memory on it called idle")
	}
}

func TestGPUMemoryUnderused(t *testing.T) {
	d := Defaults()
	at(t, GPUMemoryUnderused, d.GPUMemoryUsedBelow, func(v float64) Job {
		j := quiet()
		j.GPUs = []GPU{gpu("0", 0.6, 0.9, 80*gib*v), gpu("1", 0.6, 0.9, 80*gib*v/2)}
		return j
	}, true)
	// An idle GPU is not counted (it has its own finding).
	j := quiet()
	j.GPUs = []GPU{gpu("0", 0.6, 0.9, 60*gib), gpu("1", 0, 0, 0)}
	if _, ok := find(Evaluate(j, Thresholds{}), GPUMemoryUnderused); ok {
		t.Error("the idle GPU's empty memory was counted")
	}
}

func TestInputBound(t *testing.T) {
	d := Defaults()
	busy := func(gpuMean, cpuEff float64) Job {
		j := quiet()
		j.Nodes[0].UsedCores = 16 * cpuEff
		j.GPUs = []GPU{gpu("0", gpuMean, 0.9, 40*gib), gpu("1", gpuMean, 0.9, 40*gib)}
		return j
	}
	at(t, InputBound, d.GPUUtilizationBelow, func(v float64) Job { return busy(v, 1) }, true)
	at(t, InputBound, d.GPUUtilizationBelow, func(v float64) Job { return busy(v, 0.95) }, true)
	// The CPU side: at or above cpuSaturatedAbove.
	for cpu, want := range map[float64]bool{d.CPUSaturatedAbove - 1e-9: false, d.CPUSaturatedAbove: true, 1: true} {
		if _, ok := find(Evaluate(busy(0.1, cpu), Thresholds{}), InputBound); ok != want {
			t.Errorf("GPUs at 10%%, CPUs at %v: input bound %v, want %v", cpu, ok, want)
		}
	}
	f, _ := find(Evaluate(busy(0.18, 0.97), Thresholds{}), InputBound)
	if f.Summary != "its GPUs were 18% busy on average while its CPUs were 97% busy" {
		t.Errorf("%q", f.Summary)
	}
	// Idle GPUs do not count towards the mean, nor make a job input bound.
	j := busy(0.1, 1)
	j.GPUs = []GPU{gpu("0", 0, 0, 0)}
	if _, ok := find(Evaluate(j, Thresholds{}), InputBound); ok {
		t.Error("input bound with only idle GPUs")
	}
}

func TestOrderAndWaste(t *testing.T) {
	j := quiet()
	j.Nodes[0].UsedCores = 2
	j.Nodes[0].MemPeak = 32 * gib
	j.Nodes[0].OOMKills = 1
	j.GPUs = []GPU{gpu("0", 0.25, 0.5, 4*gib), gpu("1", 0, 0, 0)}
	got := kinds(Evaluate(j, Thresholds{}))
	if want := "oomKilled,gpuIdle,cpuUnderused,gpuMemoryUnderused"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
	for _, f := range Evaluate(j, Thresholds{}) {
		if f.JobID != "42" || f.User != "alice" || f.Name != "train" || len(f.Numbers) == 0 {
			t.Errorf("%+v", f)
		}
	}
	core, gpuH := Waste(j, Thresholds{})
	if core != 14 || gpuH != 0.75+1 {
		t.Errorf("waste %v core-hours, %v GPU-hours; want 14 and 1.75", core, gpuH)
	}
}

func TestThresholdSettings(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Fatal(err)
	}
	if got := (Thresholds{MemoryUsedAbove: 0.95}).WithDefaults(); got.MemoryUsedAbove != 0.95 || got.CPUEfficiencyBelow != 0.5 {
		t.Errorf("%+v", got)
	}
	for _, bad := range []Thresholds{{CPUEfficiencyBelow: 1.5}, {GPUIdleBelow: -0.1}, {MemoryUsedBelow: 0.95},
		{StragglerAbove: 1}, {StragglerAbove: 0.5}, {StragglerAbove: 101}} {
		if err := bad.WithDefaults().Validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, err := ParseKind("gpuIdle"); err != nil {
		t.Error(err)
	}
	if _, err := ParseKind("idle"); err == nil || !strings.Contains(err.Error(), "cpuUnderused") {
		t.Errorf("unknown kind: %v", err)
	}
}
