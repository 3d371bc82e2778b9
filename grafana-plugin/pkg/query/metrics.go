package query

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/promql"
	"github.com/slurmscope/slurmscope/schema"
)

// GPUQuery is a metric query (GPU or host metrics).
type GPUQuery struct {
	Metric  promql.Metric
	Agg     promql.Agg
	GroupBy []schema.Attribute
	Window  time.Duration
	// Rate is the window a counter's per-second rate is taken over;
	// GPUMetric sets it for counters: Window, or the step and at least a
	// minute (two samples at the agent's slowest scrape).
	Rate time.Duration
}

// Expr is the PromQL of q under scope ("" if nothing can match).
func (e *Engine) Expr(scope Scope, q GPUQuery) (string, error) {
	sels, err := scope.Selectors(filter.Prometheus)
	if err != nil {
		return "", err
	}
	return promql.Build(promql.Query{Metric: q.Metric, Selectors: sels, Agg: q.Agg, GroupBy: wireLabels(q.GroupBy), Window: q.Window, Rate: q.Rate}), nil
}

// GPUMetric evaluates a GPU metric over the range, one series per group.
func (e *Engine) GPUMetric(ctx context.Context, scope Scope, q GPUQuery, r Range) ([]Series, error) {
	if e.Metrics == nil {
		return nil, ErrNoPrometheus
	}
	if q.Metric.Counter && q.Rate == 0 {
		q.Rate = q.Window
		if q.Rate == 0 {
			q.Rate = max(r.Step, time.Minute)
		}
	}
	expr, err := e.Expr(scope, q)
	if err != nil || expr == "" {
		return nil, err
	}
	ps, err := e.Metrics.QueryRange(ctx, expr, r.From, r.To, r.Step)
	if err != nil {
		return nil, err
	}
	out := make([]Series, 0, len(ps))
	for _, p := range ps {
		s := Series{Labels: attrLabels(p.Labels, q.GroupBy)}
		for _, smp := range p.Samples {
			s.Times = append(s.Times, smp.T.UTC())
			s.Values = append(s.Values, smp.V)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Series) int { return strings.Compare(key(a.Labels), key(b.Labels)) })
	return out, nil
}
