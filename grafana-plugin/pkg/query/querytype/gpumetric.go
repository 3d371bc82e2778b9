package querytype

import (
	"context"
	"fmt"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/promql"
	"github.com/slurmscope/slurmscope/schema"
)

// GPUMetric is one of the agent's GPU metrics, or a host metric of the
// jobs' cgroups, from Prometheus, one series per group.
const GPUMetric = "gpuMetric"

func init() {
	Register[gpuMetricQuery](Info{Name: GPUMetric, Key: "GPUMetric", Order: 30,
		Label: "Metrics", Description: "A GPU metric, or a host metric from the jobs' cgroups, from Prometheus, per group (counters as per-second rates)",
		Enums: map[string][]string{"Aggregation": strs(promql.Aggs)}})
}

type gpuMetricQuery struct {
	// Metric is a name of promql.Metrics; "" is the job GPU utilisation.
	Metric string `json:"metric"`
	// Aggregation "" is the metric's own.
	Aggregation string `json:"aggregation" ts:"Aggregation"`
	// Window, a duration such as "30m", averages each series over a
	// trailing window; for a counter, the window its rate is taken over.
	Window string `json:"window"`
	// GroupBy are attribute names; without host.name, series merge
	// across nodes.
	GroupBy []string `json:"groupBy"`

	q query.GPUQuery
}

func (q *gpuMetricQuery) Check() error {
	name := q.Metric
	if name == "" {
		name = schema.JobGPUUtilization.Name
	}
	metric, ok := promql.Lookup(name)
	if !ok {
		return fmt.Errorf("unknown metric %q", name)
	}
	agg, err := promql.ParseAgg(q.Aggregation, metric.Agg)
	if err != nil {
		return err
	}
	gb, err := attributes(q.GroupBy...)
	if err != nil {
		return err
	}
	var window time.Duration
	if q.Window != "" {
		if window, err = time.ParseDuration(q.Window); err != nil || window < time.Second || window > 366*24*time.Hour {
			return fmt.Errorf("window %q: want a duration from 1s to 366 days, like 30m", q.Window)
		}
	}
	q.q = query.GPUQuery{Metric: metric, Agg: agg, GroupBy: gb, Window: window}
	return nil
}

func (q *gpuMetricQuery) Needs() Backends { return Backends{Prometheus: true} }

func (q *gpuMetricQuery) Shape() Shape {
	return Shape{Type: data.FrameTypeTimeSeriesMulti, Labels: q.GroupBy}
}

func (q *gpuMetricQuery) Run(ctx context.Context, env Env) (data.Frames, error) {
	ss, err := env.Engine.GPUMetric(ctx, env.Scope, q.q, env.Range)
	if err != nil {
		return nil, err
	}
	return seriesFrames(q.q.Metric.Name, q.q.Metric.Unit, ss), nil
}
