package query

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/promql"
	"github.com/slurmscope/slurmscope/schema"
)

// What findings are judged on, gathered from Prometheus with one instant
// query per figure at To - 1 ms over the window To - From: a sample counts
// when From <= its time < To, as in every other query type.
//
// A job's cgroup counters start at zero with the job. Over the range, a
// job seen before From used max - min of them; one that started in the
// range used max. Its mean cores are (max - min) of its CPU time over the
// span between its first and last reads in the range (its last-seen time),
// taken from the same polls, so the ratio is exact whatever the scrape
// interval.

// usageLabels are what host and GPU series are grouped by per job.
var usageLabels = append([]string{schema.HostName.Label}, wireLabels(schema.JobKey)...)

// gpuLabels identify a GPU or MIG instance on a node.
var gpuLabels = []string{schema.HostName.Label, schema.GPUUUID.Label, schema.GPUIndex.Label, schema.GPUMIGInstance.Label}

// figure is one instant query of Usage and what it sets.
type figure struct {
	expr string
	at   time.Time
	set  func(u *gathered, labels map[string]string, v float64)
	// late figures only mark what the others found; any is a figure
	// whose series carry no job.
	late, any bool
}

// gathered collects the answers, keyed by job and node, and by GPU.
type gathered struct {
	nodes map[string]*nodeFigures // job id \x00 host
	gpus  map[string]*gpuFigures
	total map[string]float64
	jobs  map[string]*findings.Job
}

type gpuFigures struct {
	findings.GPU
	job       string
	allocated bool
}

type nodeFigures struct {
	findings.Node
	seenMin, seenMax, cpuMin, cpuMax, oomMin, oomMax float64
	haveSeen, haveCPU, haveOOM                       int // bit 0: min, bit 1: max
	seenBefore                                       bool
}

func (g *gathered) job(l map[string]string) *findings.Job {
	id := l[schema.JobID.Label]
	j := g.jobs[id]
	if j == nil {
		j = &findings.Job{ID: id}
		g.jobs[id] = j
	}
	// A node that had no metadata yet gives the job no name: take any.
	if j.User == "" {
		j.User = l[schema.JobUser.Label]
	}
	if j.Name == "" {
		j.Name = l[schema.JobName.Label]
	}
	return j
}

func (g *gathered) node(l map[string]string) *nodeFigures {
	g.job(l)
	k := l[schema.JobID.Label] + "\x00" + l[schema.HostName.Label]
	n := g.nodes[k]
	if n == nil {
		n = &nodeFigures{Node: findings.Node{Host: l[schema.HostName.Label]}}
		g.nodes[k] = n
	}
	return n
}

func gpuKey(l map[string]string) string {
	return l[schema.HostName.Label] + "\x00" + l[schema.GPUUUID.Label] + "\x00" + l[schema.GPUMIGInstance.Label]
}

func (g *gathered) gpu(l map[string]string) *gpuFigures {
	g.job(l)
	k := l[schema.JobID.Label] + "\x00" + gpuKey(l)
	x := g.gpus[k]
	if x == nil {
		x = &gpuFigures{GPU: findings.GPU{Host: l[schema.HostName.Label], UUID: l[schema.GPUUUID.Label], Index: l[schema.GPUIndex.Label],
			MIGInstance: l[schema.GPUMIGInstance.Label]}, job: l[schema.JobID.Label]}
		g.gpus[k] = x
	}
	return x
}

// Usage returns what every job under scope used in the range, for the
// jobs with host metrics or GPUs allocated in it, sorted by job id.
func (e *Engine) Usage(ctx context.Context, scope Scope, r Range) ([]findings.Job, error) {
	if e.Metrics == nil {
		return nil, ErrNoPrometheus
	}
	sels, err := scope.Selectors(filter.Prometheus)
	if err != nil || len(sels) == 0 {
		return nil, err
	}
	w := r.To.Sub(r.From)
	if w < time.Millisecond {
		return nil, nil
	}
	at := r.To.Add(-time.Millisecond)
	build := func(m schema.Metric, agg promql.Agg, window time.Duration, by []string, sels []filter.Selector) string {
		return promql.Build(promql.Query{Metric: promql.Of(m), Selectors: sels, Agg: agg, GroupBy: by, Window: window})
	}
	host := func(m schema.Metric, agg promql.Agg, set func(n *nodeFigures, v float64)) figure {
		return figure{expr: build(m, agg, w, usageLabels, sels), at: at, set: func(g *gathered, l map[string]string, v float64) { set(g.node(l), v) }}
	}
	gpuBy := append(slices.Clone(gpuLabels), wireLabels(schema.JobKey)...)
	gpu := func(m schema.Metric, agg promql.Agg, set func(x *gpuFigures, v float64)) figure {
		return figure{expr: build(m, agg, w, gpuBy, sels), at: at, set: func(g *gathered, l map[string]string, v float64) { set(g.gpu(l), v) }}
	}
	figs := []figure{
		host(schema.JobLastSeen, promql.Min, func(n *nodeFigures, v float64) { n.seenMin, n.haveSeen = v, n.haveSeen|1 }),
		host(schema.JobLastSeen, promql.Max, func(n *nodeFigures, v float64) { n.seenMax, n.haveSeen = v, n.haveSeen|2 }),
		host(schema.HostCPUUsage.Job, promql.Min, func(n *nodeFigures, v float64) { n.cpuMin, n.haveCPU = v, n.haveCPU|1 }),
		host(schema.HostCPUUsage.Job, promql.Max, func(n *nodeFigures, v float64) { n.cpuMax, n.haveCPU = v, n.haveCPU|2 }),
		host(schema.HostCPUs.Job, promql.Max, func(n *nodeFigures, v float64) { n.Cores = v }),
		host(schema.HostMemoryPeak.Job, promql.Max, func(n *nodeFigures, v float64) { n.MemPeak = v }),
		host(schema.HostMemoryLimit.Job, promql.Max, func(n *nodeFigures, v float64) { n.MemLimit = v }),
		host(schema.HostOOMKills.Job, promql.Min, func(n *nodeFigures, v float64) { n.oomMin, n.haveOOM = v, n.haveOOM|1 }),
		host(schema.HostOOMKills.Job, promql.Max, func(n *nodeFigures, v float64) { n.oomMax, n.haveOOM = v, n.haveOOM|2 }),
		// Was the job there just before the range? Then its counters
		// did not start in it.
		{expr: build(schema.JobLastSeen, promql.Max, 0, usageLabels, sels), at: r.From.Add(-time.Millisecond), late: true,
			set: func(g *gathered, l map[string]string, _ float64) {
				if n := g.nodes[l[schema.JobID.Label]+"\x00"+l[schema.HostName.Label]]; n != nil {
					n.seenBefore = true
				}
			}},
		gpu(schema.JobGPUAllocated, promql.Max, func(x *gpuFigures, v float64) { x.allocated = v > 0 }),
		gpu(schema.JobGPUUtilization, promql.Avg, func(x *gpuFigures, v float64) { x.UtilMean, x.HasUtil = v, true }),
		gpu(schema.JobGPUUtilization, promql.Max, func(x *gpuFigures, v float64) { x.UtilMax = v }),
		gpu(schema.JobGPUMemoryUsed, promql.Max, func(x *gpuFigures, v float64) { x.MemMax = v }),
		// Device sizes carry no job: those of the GPUs the scope's jobs
		// held in the range, joined below.
		{expr: heldTotals(sels, w), at: at, any: true,
			set: func(g *gathered, l map[string]string, v float64) { g.total[gpuKey(l)] = v }},
	}
	answers := make([][]backends.PromSeries, len(figs))
	err = e.fan(ctx, len(figs), func(ctx context.Context, i int) error {
		var err error
		answers[i], err = e.Metrics.Query(ctx, figs[i].expr, figs[i].at)
		return err
	})
	if err != nil {
		return nil, err
	}
	g := &gathered{nodes: map[string]*nodeFigures{}, gpus: map[string]*gpuFigures{},
		total: map[string]float64{}, jobs: map[string]*findings.Job{}}
	for _, late := range []bool{false, true} {
		for i, f := range figs {
			if f.late != late {
				continue
			}
			for _, s := range answers[i] {
				if len(s.Samples) == 0 || !f.any && s.Labels[schema.JobID.Label] == "" {
					continue // a series without a job is not the agent's
				}
				f.set(g, s.Labels, s.Samples[0].V)
			}
		}
	}
	return g.jobsOut(), nil
}

// heldTotals is the device memory of every GPU or MIG instance allocated
// to a job under sels at some time in the window (not only at its end, as
// a join on the allocation's last value would be).
func heldTotals(sels []filter.Selector, w time.Duration) string {
	join := []string{schema.HostName.Label, schema.GPUUUID.Label, schema.GPUMIGInstance.Label}
	held := make([]string, len(sels))
	for i, s := range sels {
		held[i] = fmt.Sprintf("max_over_time(%s[%s])", promql.Series(schema.JobGPUAllocated.Name, s), promql.Duration(w))
	}
	on := strings.Join(join, ", ")
	return fmt.Sprintf("max by (%s) (max_over_time(%s[%s]) * on (%s) group_left () (max by (%s) (%s) > 0))",
		strings.Join(gpuLabels, ", "), schema.GPUMemoryTotal.Name, promql.Duration(w), on, on, strings.Join(held, " or "))
}

// jobsOut turns the answers into the findings' input.
func (g *gathered) jobsOut() []findings.Job {
	seen := map[string]float64{} // job id \x00 host -> seconds seen
	keys := slices.Sorted(maps.Keys(g.nodes))
	for _, k := range keys {
		n := g.nodes[k]
		if n.haveSeen == 3 {
			n.Seconds = n.seenMax - n.seenMin
		}
		started := !n.seenBefore
		if n.haveCPU == 3 {
			n.CPUSeconds = n.cpuMax - n.cpuMin
			if started {
				n.CPUSeconds = n.cpuMax
			}
			if n.Seconds > 0 {
				n.UsedCores, n.HasCPU = (n.cpuMax-n.cpuMin)/n.Seconds, true
			}
		}
		if n.haveOOM == 3 {
			n.OOMKills = n.oomMax - n.oomMin
			if started {
				n.OOMKills = n.oomMax
			}
		}
		seen[k] = n.Seconds
		id, _, _ := strings.Cut(k, "\x00")
		g.jobs[id].Nodes = append(g.jobs[id].Nodes, n.Node)
	}
	for _, k := range slices.Sorted(maps.Keys(g.gpus)) {
		x := g.gpus[k]
		if !x.allocated {
			continue // the job's process on a GPU it was not given
		}
		x.MemTotal = g.total[gpuKey(map[string]string{schema.HostName.Label: x.Host, schema.GPUUUID.Label: x.UUID, schema.GPUMIGInstance.Label: x.MIGInstance})]
		x.Hours = seen[x.job+"\x00"+x.Host] / 3600
		g.jobs[x.job].GPUs = append(g.jobs[x.job].GPUs, x.GPU)
	}
	out := make([]findings.Job, 0, len(g.jobs))
	for _, id := range slices.Sorted(maps.Keys(g.jobs)) {
		out = append(out, *g.jobs[id])
	}
	return out
}

// Findings returns the findings of every job under scope in the range,
// the most severe first, then by job; kind "" is every kind.
func (e *Engine) Findings(ctx context.Context, scope Scope, r Range, kind findings.Kind) ([]findings.Finding, error) {
	jobs, err := e.Usage(ctx, scope, r)
	if err != nil {
		return nil, err
	}
	return e.evaluate(jobs, kind), nil
}

func (e *Engine) evaluate(jobs []findings.Job, kind findings.Kind) []findings.Finding {
	var out []findings.Finding
	for _, j := range jobs {
		for _, f := range findings.Evaluate(j, e.Thresholds) {
			if kind == "" || f.Kind == kind {
				out = append(out, f)
			}
		}
	}
	findings.Sort(out)
	return out
}
