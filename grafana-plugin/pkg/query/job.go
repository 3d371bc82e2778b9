package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/promql"
	"github.com/slurmscope/slurmscope/schema"
)

// JobReport is what `slurmscope job` prints.
type JobReport struct {
	JobID string `json:"job_id"`
	From  string `json:"from"`
	To    string `json:"to"`
	// Findings come first, as the report prints them.
	Findings []findings.Finding `json:"findings"`
	Nodes    []string           `json:"nodes"`
	// Host is what the job's cgroup on each node says.
	Host     []HostStats `json:"host"`
	GPUs     []GPUStats  `json:"gpus"`
	IdleGPUs []GPUStats  `json:"idle_allocated_gpus"`
	CPUTotal int64       `json:"cpu_total_ns"`
	TopCPU   []FuncStats `json:"top_cpu_functions"`
	// OffCPUProfile is the blocked off-CPU profile type where the job has
	// such profiles in the range; TopOffCPU are where its threads
	// blocked, the most first, of OffCPUBlocked in all.
	OffCPUProfile string          `json:"off_cpu_profile_type,omitempty"`
	OffCPUBlocked int64           `json:"off_cpu_blocked_ns,omitempty"`
	TopOffCPU     []findings.Wait `json:"top_off_cpu_functions,omitempty"`
	GPUProfile    string          `json:"gpu_profile_type,omitempty"`
	TopKernels    []FuncStats     `json:"top_gpu_kernels,omitempty"`
	// GPUUntraced is wall time, summed over the job's processes, during
	// which GPU kernel tracing stood aside for the job's own CUPTI
	// profiler: kernels run then are in no GPU profile.
	GPUUntraced int64    `json:"gpu_untraced_ns,omitempty"`
	Warnings    []string `json:"warnings,omitempty"`
}

// GPUStats is one GPU (or MIG instance) of the job over the range.
type GPUStats struct {
	Host         string  `json:"host"`
	UUID         string  `json:"uuid"`
	Index        string  `json:"index"`
	MIGInstance  string  `json:"mig_instance,omitempty"`
	Allocated    bool    `json:"allocated"`
	UtilMean     float64 `json:"utilization_mean"`
	UtilMax      float64 `json:"utilization_max"`
	MemMeanBytes float64 `json:"memory_used_mean_bytes"`
	MemMaxBytes  float64 `json:"memory_used_max_bytes"`
}

// HostStats is the job's cgroup on one node over the range.
type HostStats struct {
	Host string `json:"host"`
	// Seconds is how long the job was seen there.
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// UsedCores is omitted where the CPU time is not known.
	UsedCores      *float64 `json:"used_cores,omitempty"`
	AllocatedCores float64  `json:"allocated_cores,omitempty"`
	MemPeakBytes   float64  `json:"memory_peak_bytes,omitempty"`
	MemLimitBytes  float64  `json:"memory_limit_bytes,omitempty"`
	OOMKills       float64  `json:"oom_kills"`
}

// FuncStats is a function's (or kernel's) share of a profile.
type FuncStats struct {
	Name  string `json:"name"`
	Self  int64  `json:"self_ns"`
	Total int64  `json:"total_ns"`
}

// TopCPUFunctions is how many CPU functions a job report lists.
const TopCPUFunctions = 15

// Job gathers a job's report. A backend that is not configured is left
// out with a warning; one that fails fails the report. Its findings name
// the job's waits from the same off-CPU graph the report lists.
func (e *Engine) Job(ctx context.Context, jobID string, r Range) (*JobReport, error) {
	rep := &JobReport{JobID: jobID, From: r.From.UTC().Format("2006-01-02T15:04:05Z"), To: r.To.UTC().Format("2006-01-02T15:04:05Z")}
	scope := Scope{Filter: filter.Equal(schema.JobID, jobID)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	run := func(fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil {
				fail(err)
			}
		}()
	}
	run(func() error {
		nodes, err := e.AttributeValues(ctx, scope, schema.HostName, r)
		rep.Nodes = nodes
		return err
	})
	if e.Profiles == nil {
		rep.Warnings = append(rep.Warnings, "no Pyroscope URL: no profiles")
	} else {
		run(func() error {
			t, err := e.FlameGraph(ctx, scope, CPUProfileType, r, 0)
			if err != nil {
				return err
			}
			rep.CPUTotal = t.Total()
			rep.TopCPU = funcStats(t.TopFunctions(TopCPUFunctions))
			return nil
		})
		run(func() error {
			pt, err := e.GPUProfileType(ctx, r)
			if err != nil || pt == "" {
				return err
			}
			t, err := e.FlameGraph(ctx, scope, pt, r, 0)
			if err != nil {
				return err
			}
			// Kernels are the leaves: rank by self time.
			rep.GPUProfile = pt
			rep.TopKernels = funcStats(t.TopFunctions(TopCPUFunctions))
			return nil
		})
		run(func() error {
			pt, err := e.heldProfileType(ctx, r, schema.GPUUntraced)
			if err != nil || pt == "" {
				return err
			}
			t, err := e.FlameGraph(ctx, scope, pt, r, 0)
			if err != nil {
				return err
			}
			rep.GPUUntraced = t.Total()
			return nil
		})
		run(func() error {
			pt, err := e.OffCPUProfileType(ctx, r)
			if err != nil || pt == "" {
				return err
			}
			t, err := e.FlameGraph(ctx, scope, pt, r, 0)
			if err != nil || t.Total() == 0 {
				return err // profiles of the type, but none of this job
			}
			rep.OffCPUProfile, rep.OffCPUBlocked, rep.TopOffCPU = pt, t.Total(), topWaits(t, TopCPUFunctions)
			return nil
		})
	}
	var jobs []findings.Job
	if e.Metrics == nil {
		rep.Warnings = append(rep.Warnings, "no Prometheus URL: no GPU metrics")
	} else {
		run(func() error {
			gpus, err := e.jobGPUs(ctx, scope, r)
			rep.GPUs = gpus
			return err
		})
		run(func() error {
			var err error
			jobs, err = e.Usage(ctx, scope, r)
			if err != nil {
				return err
			}
			for _, j := range jobs {
				for _, n := range j.Nodes {
					h := HostStats{Host: n.Host, Seconds: n.Seconds, CPUSeconds: n.CPUSeconds, AllocatedCores: n.Cores,
						MemPeakBytes: n.MemPeak, MemLimitBytes: n.MemLimit, OOMKills: n.OOMKills}
					if n.HasCPU {
						h.UsedCores = &n.UsedCores
					}
					rep.Host = append(rep.Host, h)
				}
			}
			return nil
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if e.Metrics != nil {
		for i := range jobs {
			if jobs[i].ID == jobID {
				jobs[i].Blocked, jobs[i].Waits = rep.OffCPUBlocked, rep.TopOffCPU
			}
		}
		rep.Findings = append([]findings.Finding{}, e.evaluate(jobs, "")...) // [], not null: judged, none found
	}
	for _, g := range rep.GPUs {
		if g.Allocated && g.UtilMax == 0 {
			rep.IdleGPUs = append(rep.IdleGPUs, g)
		}
	}
	return rep, nil
}

func funcStats(fs []flame.Function) []FuncStats {
	out := make([]FuncStats, len(fs))
	for i, f := range fs {
		out[i] = FuncStats{f.Name, f.Self, f.Total}
	}
	return out
}

// jobGPUs reads the per-GPU statistics of the job over the whole range.
func (e *Engine) jobGPUs(ctx context.Context, scope Scope, r Range) ([]GPUStats, error) {
	sels, err := scope.Selectors(filter.Prometheus)
	if err != nil {
		return nil, err
	}
	per := []string{schema.HostName.Label, schema.GPUUUID.Label, schema.GPUIndex.Label, schema.GPUMIGInstance.Label}
	window := r.To.Sub(r.From)
	build := func(metric string, agg promql.Agg) string {
		return promql.Build(promql.Query{Metric: mustMetric(metric), Selectors: sels, Agg: agg, GroupBy: per, Window: window})
	}
	type stat struct {
		expr string
		set  func(*GPUStats, float64)
	}
	stats := []stat{
		{build(schema.JobGPUAllocated.Name, promql.Max), func(g *GPUStats, v float64) { g.Allocated = v > 0 }},
		{build(schema.JobGPUUtilization.Name, promql.Avg), func(g *GPUStats, v float64) { g.UtilMean = v }},
		{build(schema.JobGPUUtilization.Name, promql.Max), func(g *GPUStats, v float64) { g.UtilMax = v }},
		{build(schema.JobGPUMemoryUsed.Name, promql.Avg), func(g *GPUStats, v float64) { g.MemMeanBytes = v }},
		{build(schema.JobGPUMemoryUsed.Name, promql.Max), func(g *GPUStats, v float64) { g.MemMaxBytes = v }},
	}
	results := make([][]backends.PromSeries, len(stats))
	var wg sync.WaitGroup
	errs := make([]error, len(stats))
	for i, s := range stats {
		if s.expr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.Metrics.Query(ctx, s.expr, r.To)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	gpus := map[string]*GPUStats{}
	for i, res := range results {
		for _, p := range res {
			l := p.Labels
			k := fmt.Sprint(l[schema.HostName.Label], "/", l[schema.GPUUUID.Label], "/", l[schema.GPUMIGInstance.Label])
			g := gpus[k]
			if g == nil {
				g = &GPUStats{Host: l[schema.HostName.Label], UUID: l[schema.GPUUUID.Label],
					Index: l[schema.GPUIndex.Label], MIGInstance: l[schema.GPUMIGInstance.Label]}
				gpus[k] = g
			}
			if len(p.Samples) > 0 {
				stats[i].set(g, p.Samples[0].V)
			}
		}
	}
	out := make([]GPUStats, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b GPUStats) int {
		return strings.Compare(a.Host+"\x00"+a.Index+"\x00"+a.MIGInstance, b.Host+"\x00"+b.Index+"\x00"+b.MIGInstance)
	})
	return out, nil
}
