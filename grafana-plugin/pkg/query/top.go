package query

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/promql"
	"github.com/slurmscope/slurmscope/schema"
)

// Rank is what top entities are ranked by.
type Rank string

const (
	ByCPUTime        Rank = "cpuTime"        // CPU profile totals, ns
	ByGPUTime        Rank = "gpuTime"        // GPU kernel profile totals, ns
	ByGPUUtilization Rank = "gpuUtilization" // mean job GPU utilisation, ratio
	// Allocated and left unused in the range (findings.Waste), hours.
	ByWastedCoreHours Rank = "wastedCoreHours"
	ByWastedGPUHours  Rank = "wastedGPUHours"
)

// Ranks lists every rank.
var Ranks = []Rank{ByCPUTime, ByGPUTime, ByGPUUtilization, ByWastedCoreHours, ByWastedGPUHours}

// ParseRank accepts the ranks above; "" is CPU time.
func ParseRank(s string) (Rank, error) {
	if s == "" {
		return ByCPUTime, nil
	}
	if slices.Contains(Ranks, Rank(s)) {
		return Rank(s), nil
	}
	return "", fmt.Errorf("rank %q: want cpuTime, gpuTime, gpuUtilization, wastedCoreHours or wastedGPUHours", s)
}

// Unit is the Grafana unit of the rank's values.
func (r Rank) Unit() string {
	switch r {
	case ByGPUUtilization:
		return "percentunit"
	case ByWastedCoreHours, ByWastedGPUHours:
		return "h"
	}
	return "ns"
}

// FromMetrics says whether the rank is answered by Prometheus (else by
// Pyroscope).
func (r Rank) FromMetrics() bool {
	return r == ByGPUUtilization || r == ByWastedCoreHours || r == ByWastedGPUHours
}

// wasteEntities are the attributes waste can be summed by: those of a
// job's cgroup series.
var wasteEntities = append([]schema.Attribute{schema.HostName}, schema.JobKey...)

// Ranked is one entity and its value.
type Ranked struct {
	Value string // the entity: a job id, a user, a host
	Total float64
}

// TopEntities ranks the values of entity (slurm.job.id, slurm.job.user,
// host.name, ...) by rank over the whole range, largest first, at most
// limit (<= 0: all).
func (e *Engine) TopEntities(ctx context.Context, scope Scope, entity schema.Attribute, rank Rank, r Range, limit int) ([]Ranked, error) {
	totals := map[string]float64{}
	switch rank {
	case ByCPUTime, ByGPUTime:
		pt := CPUProfileType
		if rank == ByGPUTime {
			var err error
			if pt, err = e.GPUProfileType(ctx, r); err != nil || pt == "" {
				return nil, err
			}
		}
		ss, err := e.totals(ctx, scope, pt, []schema.Attribute{entity}, r)
		if err != nil {
			return nil, err
		}
		for _, s := range ss {
			for _, v := range s.Values {
				totals[s.Labels[entity.Name]] += v
			}
		}
	case ByGPUUtilization:
		if e.Metrics == nil {
			return nil, ErrNoPrometheus
		}
		sels, err := scope.Selectors(filter.Prometheus)
		if err != nil {
			return nil, err
		}
		expr := promql.Build(promql.Query{Metric: mustMetric(schema.JobGPUUtilization.Name), Selectors: sels,
			Agg: promql.Avg, GroupBy: []string{entity.Label}, Window: r.To.Sub(r.From)})
		if expr == "" {
			return nil, nil
		}
		ps, err := e.Metrics.Query(ctx, expr, r.To)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			for _, s := range p.Samples {
				totals[p.Labels[entity.Label]] += s.V
			}
		}
	case ByWastedCoreHours, ByWastedGPUHours:
		if !slices.Contains(wasteEntities, entity) {
			return nil, fmt.Errorf("rank %s sums jobs' waste by job, user, name or node, not by %s", rank, entity.Name)
		}
		jobs, err := e.Usage(ctx, scope, r)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			for _, n := range j.Nodes {
				// One node at a time, so that waste can be summed by node.
				part := findings.Job{ID: j.ID, User: j.User, Name: j.Name, Nodes: []findings.Node{n}}
				for _, g := range j.GPUs {
					if g.Host == n.Host {
						part.GPUs = append(part.GPUs, g)
					}
				}
				core, gpu := findings.Waste(part, e.Thresholds)
				v := core
				if rank == ByWastedGPUHours {
					v = gpu
				}
				totals[wasteKey(entity, j, n)] += v
			}
		}
	default:
		return nil, fmt.Errorf("rank %q: want cpuTime, gpuTime, gpuUtilization, wastedCoreHours or wastedGPUHours", rank)
	}
	out := make([]Ranked, 0, len(totals))
	for v, t := range totals {
		out = append(out, Ranked{v, t})
	}
	slices.SortFunc(out, func(a, b Ranked) int {
		if a.Total != b.Total {
			if a.Total > b.Total {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Value, b.Value)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func wasteKey(entity schema.Attribute, j findings.Job, n findings.Node) string {
	switch entity {
	case schema.HostName:
		return n.Host
	case schema.JobUser:
		return j.User
	case schema.JobName:
		return j.Name
	}
	return j.ID
}

func mustMetric(name string) promql.Metric {
	m, ok := promql.Lookup(name)
	if !ok {
		panic("unknown metric " + name)
	}
	return m
}
