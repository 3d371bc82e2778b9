package query

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/promtest"
	"github.com/slurmscope/slurmscope/schema"
)

// samples builds an OpenMetrics exposition of series with their own
// timestamps, grouped by family as the format wants.
type samples map[string]map[string][][2]float64 // name -> labels -> (t, v)

func (s samples) add(m schema.Metric, labels map[string]string, t0 time.Time, from, to, every int, v func(t int) float64) {
	var ls []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		ls = append(ls, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	key := "{" + strings.Join(ls, ",") + "}"
	if s[m.Name] == nil {
		s[m.Name] = map[string][][2]float64{}
	}
	for t := from; t <= to; t += every {
		s[m.Name][key] = append(s[m.Name][key], [2]float64{float64(t0.Unix() + int64(t)), v(t)})
	}
}

func (s samples) String() string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(s)) {
		for _, key := range slices.Sorted(maps.Keys(s[name])) {
			for _, p := range s[name][key] {
				fmt.Fprintf(&b, "%s%s %g %d\n", name, key, p[1], int64(p[0]))
			}
		}
	}
	b.WriteString("# EOF\n")
	return b.String()
}

func jobLabels(id, user, host string) map[string]string {
	return map[string]string{schema.JobID.Label: id, schema.JobUser.Label: user, schema.JobName.Label: "job" + id, schema.HostName.Label: host}
}

func with(l map[string]string, kv ...string) map[string]string {
	out := maps.Clone(l)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

const gib = float64(1 << 30)

// TestUsageAgainstPrometheus writes three jobs' agent series into a real
// Prometheus and checks what the engine makes of them over [From, To):
//
//   - job 1 (alice) starts in the range on two nodes of 16 cores, busy 2
//     and 1 of them, peaks at 1 and 2 GiB of 32, and holds two GPUs on
//     node-a: GPU 0 busy (10 of its 80 GiB), GPU 1 idle;
//   - job 2 (bob) started before the range, saturates its 4 cores, had 2
//     OOM kills before the range and 1 in it, peaks at 3.9 GiB of 4, and
//     holds one GPU it keeps 10% busy: input bound;
//   - job 3 has one poll, exactly at To: outside the range.
func TestUsageAgainstPrometheus(t *testing.T) {
	testenv.RequireIntegration(t, promtest.Installed)
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s := samples{}
	h := schema.HostMetrics
	const poll = 10
	for _, n := range []struct {
		host  string
		cores float64
		peak  float64
	}{{"node-a", 2, 1 * gib}, {"node-b", 1, 2 * gib}} {
		l := jobLabels("1", "alice", n.host)
		s.add(schema.JobLastSeen, l, t0, 0, 600, poll, func(t int) float64 { return float64(t0.Unix() + int64(t)) })
		s.add(h[mCPUIdx].Job, l, t0, 0, 600, poll, func(t int) float64 { return n.cores * float64(t) })
		s.add(h[mCPUsIdx].Job, l, t0, 0, 600, poll, func(int) float64 { return 16 })
		s.add(h[mPeakIdx].Job, l, t0, 0, 600, poll, func(t int) float64 { return math.Min(float64(t)/100, 1) * n.peak })
		s.add(h[mLimitIdx].Job, l, t0, 0, 600, poll, func(int) float64 { return 32 * gib })
		s.add(h[mOOMIdx].Job, l, t0, 0, 600, poll, func(int) float64 { return 0 })
	}
	a := jobLabels("1", "alice", "node-a")
	for _, g := range []struct {
		uuid, index string
		util, mem   float64
	}{{"GPU-0", "0", 0.6, 10 * gib}, {"GPU-1", "1", 0, 0}} {
		gl := with(a, schema.GPUUUID.Label, g.uuid, schema.GPUIndex.Label, g.index, schema.GPUName.Label, "H100")
		s.add(schema.JobGPUAllocated, gl, t0, 0, 600, poll, func(int) float64 { return 1 })
		s.add(schema.JobGPUUtilization, gl, t0, 0, 600, poll, func(int) float64 { return g.util })
		s.add(schema.JobGPUMemoryUsed, gl, t0, 0, 600, poll, func(int) float64 { return g.mem })
	}
	b := jobLabels("2", "bob", "node-a")
	s.add(schema.JobLastSeen, b, t0, -300, 300, poll, func(t int) float64 { return float64(t0.Unix() + int64(t)) })
	s.add(h[mCPUIdx].Job, b, t0, -300, 300, poll, func(t int) float64 { return 4 * float64(t+300) })
	s.add(h[mCPUsIdx].Job, b, t0, -300, 300, poll, func(int) float64 { return 4 })
	s.add(h[mPeakIdx].Job, b, t0, -300, 300, poll, func(int) float64 { return 3.9 * gib })
	s.add(h[mLimitIdx].Job, b, t0, -300, 300, poll, func(int) float64 { return 4 * gib })
	s.add(h[mOOMIdx].Job, b, t0, -300, 300, poll, func(t int) float64 {
		if t >= 100 {
			return 3
		}
		return 2
	})
	gl := with(b, schema.GPUUUID.Label, "GPU-2", schema.GPUIndex.Label, "2", schema.GPUName.Label, "H100")
	s.add(schema.JobGPUAllocated, gl, t0, -300, 300, poll, func(int) float64 { return 1 })
	s.add(schema.JobGPUUtilization, gl, t0, -300, 300, poll, func(int) float64 { return 0.1 })
	s.add(schema.JobGPUMemoryUsed, gl, t0, -300, 300, poll, func(int) float64 { return 40 * gib })
	for i, uuid := range []string{"GPU-0", "GPU-1", "GPU-2"} {
		s.add(schema.GPUMemoryTotal, map[string]string{schema.HostName.Label: "node-a", schema.GPUUUID.Label: uuid,
			schema.GPUIndex.Label: fmt.Sprint(i), schema.GPUName.Label: "H100"}, t0, -300, 600, poll, func(int) float64 { return 80 * gib })
	}
	from, to := t0.Add(-60*time.Second), t0.Add(601*time.Second)
	late := jobLabels("3", "carol", "node-a")
	s.add(schema.JobLastSeen, late, to, 0, 0, poll, func(int) float64 { return float64(to.Unix()) })
	s.add(h[mCPUIdx].Job, late, to, 0, 0, poll, func(int) float64 { return 1 })

	base := promtest.WithSamples(t, s.String())
	p, err := backends.NewPrometheus(backends.Config{URL: base})
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{Metrics: p}
	r := Range{From: from, To: to, Step: time.Minute}
	jobs, err := e.Usage(context.Background(), Scope{}, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != "1" || jobs[1].ID != "2" {
		t.Fatalf("jobs %+v, want 1 and 2 (job 3's one poll is at To, outside [From, To))", jobs)
	}
	j1, j2 := jobs[0], jobs[1]
	if j1.User != "alice" || j1.Name != "job1" || len(j1.Nodes) != 2 || len(j1.GPUs) != 2 {
		t.Fatalf("job 1: %+v", j1)
	}
	for i, want := range []findings.Node{
		{Host: "node-a", Seconds: 600, CPUSeconds: 1200, UsedCores: 2, HasCPU: true, Cores: 16, MemPeak: 1 * gib, MemLimit: 32 * gib},
		{Host: "node-b", Seconds: 600, CPUSeconds: 600, UsedCores: 1, HasCPU: true, Cores: 16, MemPeak: 2 * gib, MemLimit: 32 * gib},
	} {
		if got := j1.Nodes[i]; got != want {
			t.Errorf("job 1 node %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if g := j1.GPUs[0]; g.UUID != "GPU-0" || math.Abs(g.UtilMean-0.6) > 1e-9 || g.MemMax != 10*gib || g.MemTotal != 80*gib || g.Hours != 600.0/3600 || !g.HasUtil {
		t.Errorf("job 1 GPU 0: %+v", g)
	}
	// Job 2 was there before From: only what it did in the range counts,
	// from its first sample in it (t = -60 s).
	want2 := findings.Node{Host: "node-a", Seconds: 360, CPUSeconds: 1440, UsedCores: 4, HasCPU: true, Cores: 4,
		MemPeak: 3.9 * gib, MemLimit: 4 * gib, OOMKills: 1}
	if len(j2.Nodes) != 1 || j2.Nodes[0] != want2 {
		t.Errorf("job 2: %+v\nwant %+v", j2.Nodes, want2)
	}

	fs, err := e.Findings(context.Background(), Scope{}, r, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fs {
		got = append(got, f.JobID+" "+string(f.Kind)+": "+f.Summary)
	}
	want := []string{
		// Critical, then warnings, then info; by job within each.
		"2 oomKilled: 1 process OOM-killed (peak 3.9 GiB of a 4.0 GiB limit)",
		"1 gpuIdle: 1 of 2 allocated GPUs idle (GPU 1 on node-a), 0.2 GPU-hours",
		"1 cpuUnderused: used 3 of 32 cores (9%) on 2 nodes",
		"2 inputBound: its GPUs were 10% busy on average while its CPUs were 100% busy",
		"1 memoryOverRequested: peak memory 2.0 GiB of 32.0 GiB requested (6%)",
		"1 gpuMemoryUnderused: GPU memory peak 10.0 GiB of 80.0 GiB (12%) on its fullest GPU",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// One kind, and a filter on the user.
	fs, err = e.Findings(context.Background(), jobScope(t, `slurm.job.user == "bob"`), r, findings.OOMKilled)
	if err != nil || len(fs) != 1 || fs[0].JobID != "2" {
		t.Errorf("bob's OOM kills: %+v, %v", fs, err)
	}
	// Ownership: alice sees only hers.
	fs, err = e.Findings(context.Background(), Scope{Restricted: true, Owner: "alice"}, r, "")
	for _, f := range fs {
		if f.User != "alice" {
			t.Errorf("alice sees %+v", f)
		}
	}
	if err != nil || len(fs) == 0 {
		t.Errorf("alice's findings: %v", err)
	}

	// Waste ranks users: alice left 14+15 cores idle for 10 minutes and a
	// GPU, bob nothing but 90% of one GPU for 6 minutes.
	top, err := e.TopEntities(context.Background(), Scope{}, schema.JobUser, ByWastedCoreHours, r, 0)
	if err != nil || len(top) != 2 || top[0].Value != "alice" || math.Abs(top[0].Total-29.0/6) > 1e-9 || top[1].Total != 0 {
		t.Errorf("wasted core-hours: %+v, %v", top, err)
	}
	top, err = e.TopEntities(context.Background(), Scope{}, schema.JobUser, ByWastedGPUHours, r, 0)
	if err != nil || len(top) != 2 || top[0].Value != "alice" || math.Abs(top[0].Total-(0.4+1)/6) > 1e-9 ||
		math.Abs(top[1].Total-0.9*0.1) > 1e-9 {
		t.Errorf("wasted GPU-hours: %+v, %v", top, err)
	}
}

// The HostMetrics order the test writes series in.
const (
	mCPUIdx   = 0
	mCPUsIdx  = 1
	mPeakIdx  = 3
	mLimitIdx = 4
	mOOMIdx   = 5
)
