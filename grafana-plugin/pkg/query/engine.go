// Package query is slurmscope's query engine, shared by the Grafana
// datasource and the slurmscope CLI: a filter becomes disjoint selectors,
// a range longer than Pyroscope accepts becomes time chunks, each selector
// and chunk one backend call (made concurrently, at most MaxCalls of
// them), and the answers are summed, which merges a job across its nodes
// and its lifetime exactly.
package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/promql"
	"github.com/slurmscope/slurmscope/schema"
)

// CPUProfileType is what the agent pushes for CPU time.
var CPUProfileType = schema.ProcessCPU.ID()

// Profiles is the part of Pyroscope the engine uses. Start and end are
// Pyroscope's: milliseconds, both inclusive (see plan.go).
type Profiles interface {
	MergeStacktraces(ctx context.Context, profileType, selector string, start, end time.Time, maxNodes int64) (*querierv1.FlameGraph, error)
	SelectSeries(ctx context.Context, profileType, selector string, groupBy []string, start, end time.Time, step time.Duration) ([]*typesv1.Series, error)
	ProfileTypes(ctx context.Context, start, end time.Time) ([]*typesv1.ProfileType, error)
}

// Metrics is the part of Prometheus the engine uses.
type Metrics interface {
	QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]backends.PromSeries, error)
	Query(ctx context.Context, expr string, at time.Time) ([]backends.PromSeries, error)
	LabelValues(ctx context.Context, label string, selectors []string, start, end time.Time) ([]string, error)
}

// Engine answers slurmscope's questions. A nil backend is one that is not
// configured: queries that need it fail with ErrNoPyroscope/ErrNoPrometheus.
type Engine struct {
	Profiles Profiles
	Metrics  Metrics
	// Parallel bounds concurrent backend calls of one query; 0 means
	// DefaultParallel.
	Parallel int
	// MaxQueryLength is Pyroscope's max_query_length: longer ranges are
	// split into chunks. 0 means DefaultMaxQueryLength; under a second,
	// a second.
	MaxQueryLength time.Duration
	// MaxCalls caps the Pyroscope calls of one query (selectors × time
	// chunks, per profile type); 0 means DefaultMaxCalls.
	MaxCalls int
	// Thresholds judge findings; zero fields take findings.Defaults.
	Thresholds findings.Thresholds
}

// The engine's defaults: Pyroscope's max_query_length, and a fan-out that
// a 256-selector filter over a day fits, or a 64-selector one over a week.
const (
	DefaultParallel       = 8
	DefaultMaxQueryLength = 24 * time.Hour
	DefaultMaxCalls       = 1024
)

// ErrTooManyCalls is wrapped by the error of a query that would need more
// backend calls than MaxCalls.
var ErrTooManyCalls = errors.New("too many backend calls")

var (
	ErrNoPyroscope  = errors.New("no Pyroscope URL is configured")
	ErrNoPrometheus = errors.New("no Prometheus URL is configured")
)

// Range is a query's time range and resolution.
type Range struct {
	From, To time.Time
	Step     time.Duration
}

// Scope is what a query may see: the user's filter, and when job ownership
// applies, the login every selector must pin slurm.job.user to.
type Scope struct {
	Filter *filter.Filter // nil means everything
	Owner  string         // "" means no ownership restriction
	// Restricted with an empty Owner sees nothing (a user with no login).
	Restricted bool
}

// ErrNoLogin is the answer to a restricted request without a login.
var ErrNoLogin = errors.New("job ownership is on and the request carries no Grafana login")

// Selectors returns the scope's disjoint selectors for t. With ownership
// on, the owner's equality is ANDed in, and every selector is checked to
// carry it before anything is sent: a user's filter cannot widen past it.
func (s Scope) Selectors(t filter.Target) ([]filter.Selector, error) {
	f := s.Filter
	if f == nil {
		f = filter.True()
	}
	if !s.Restricted {
		sels := f.Selectors(t)
		return sels, f.Err()
	}
	if s.Owner == "" {
		return nil, ErrNoLogin
	}
	f = filter.And(f, filter.Equal(schema.JobUser, s.Owner))
	sels := f.Selectors(t)
	if err := f.Err(); err != nil {
		return nil, err
	}
	for _, sel := range sels {
		if !slices.Contains(sel, filter.Matcher{Label: schema.JobUser.Label, Op: filter.OpEqual, Value: s.Owner}) {
			// Fail closed: this would be a bug in the filter package.
			return nil, fmt.Errorf("internal error: selector %s escapes job ownership", sel)
		}
	}
	return sels, nil
}

func (e *Engine) parallel() int {
	if e.Parallel > 0 {
		return e.Parallel
	}
	return DefaultParallel
}

func (e *Engine) maxQueryLength() time.Duration {
	if e.MaxQueryLength <= 0 {
		return DefaultMaxQueryLength
	}
	return max(e.MaxQueryLength, time.Second)
}

func (e *Engine) maxCalls() int {
	if e.MaxCalls > 0 {
		return e.MaxCalls
	}
	return DefaultMaxCalls
}

// budget refuses, before anything is sent, a query whose selectors ×
// chunks (× profile types) exceed MaxCalls.
func (e *Engine) budget(sels, chunks, types int) error {
	n := sels * chunks * types
	if n <= e.maxCalls() {
		return nil
	}
	what := fmt.Sprintf("%d selector(s) × %d time chunk(s)", sels, chunks)
	if types > 1 {
		what += fmt.Sprintf(" × %d profile type(s)", types)
	}
	return fmt.Errorf("%w: this query needs %d Pyroscope calls (%s of at most %s), over the limit of %d per query: "+
		"narrow the filter or the time range, or raise maxCallsPerQuery in the datasource settings",
		ErrTooManyCalls, n, what, e.maxQueryLength(), e.maxCalls())
}

// fan runs fn(0..n-1), at most Parallel at a time, and returns the first
// error, cancelling the calls still running.
func (e *Engine) fan(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, e.parallel())
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// FlameGraph returns the merged call tree of profileType under scope over
// [From, To), capped at maxNodes (<= 0: Pyroscope's default per call,
// none after). One call's answer is the server's tree as it came; several
// (selectors, time chunks) are summed and truncated once, as Pyroscope
// truncates.
func (e *Engine) FlameGraph(ctx context.Context, scope Scope, profileType string, r Range, maxNodes int) (*flame.Tree, error) {
	if e.Profiles == nil {
		return nil, ErrNoPyroscope
	}
	sels, err := scope.Selectors(filter.Pyroscope)
	if err != nil {
		return nil, err
	}
	chunks := spans(r.From, r.To, e.maxQueryLength())
	if err := e.budget(len(sels), len(chunks), 1); err != nil {
		return nil, err
	}
	graphs := make([]*querierv1.FlameGraph, len(sels)*len(chunks))
	err = e.fan(ctx, len(graphs), func(ctx context.Context, i int) error {
		sel, c := sels[i/len(chunks)], chunks[i%len(chunks)]
		fg, err := e.Profiles.MergeStacktraces(ctx, profileType, sel.String(), c.From, c.last(), int64(maxNodes))
		graphs[i] = fg
		return err
	})
	if err != nil {
		return nil, err
	}
	tree, err := flame.FromFlamegraphs(graphs...)
	if err != nil {
		return nil, fmt.Errorf("pyroscope: %w", err)
	}
	if len(graphs) == 1 {
		return tree, nil
	}
	return tree.Truncate(maxNodes), nil
}

// Series is one numeric series of a group: Labels maps attribute names
// (dotted) to values.
type Series struct {
	Labels map[string]string
	Times  []time.Time
	Values []float64
}

// key identifies a group by its labels.
func key(labels map[string]string) string {
	ks := make([]string, 0, len(labels))
	for k, v := range labels {
		ks = append(ks, k+"\x00"+v)
	}
	slices.Sort(ks)
	return strings.Join(ks, "\x01")
}

// merger sums points into groups, by time.
type merger struct {
	mu     sync.Mutex
	groups map[string]*Series
	points map[string]map[int64]float64
}

func newMerger() *merger {
	return &merger{groups: map[string]*Series{}, points: map[string]map[int64]float64{}}
}

func (m *merger) add(labels map[string]string, t time.Time, v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(labels)
	if _, ok := m.groups[k]; !ok {
		m.groups[k] = &Series{Labels: labels}
		m.points[k] = map[int64]float64{}
	}
	m.points[k][t.UnixMilli()] += v
}

// series returns the groups sorted by labels, points in time order.
func (m *merger) series() []Series {
	keys := make([]string, 0, len(m.groups))
	for k := range m.groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]Series, 0, len(keys))
	for _, k := range keys {
		s := *m.groups[k]
		ts := make([]int64, 0, len(m.points[k]))
		for t := range m.points[k] {
			ts = append(ts, t)
		}
		slices.Sort(ts)
		for _, t := range ts {
			s.Times = append(s.Times, time.UnixMilli(t).UTC())
			s.Values = append(s.Values, m.points[k][t])
		}
		out = append(out, s)
	}
	return out
}

// attrLabels turns wire labels into attribute names, keeping only those
// in want (group-by labels; the server may add its own).
func attrLabels(wire map[string]string, want []schema.Attribute) map[string]string {
	out := make(map[string]string, len(want))
	for _, a := range want {
		if v, ok := wire[a.Label]; ok {
			out[a.Name] = v
		} else {
			out[a.Name] = ""
		}
	}
	return out
}

func wireLabels(attrs []schema.Attribute) []string {
	out := make([]string, len(attrs))
	for i, a := range attrs {
		out[i] = a.Label
	}
	return out
}

// ProfileSeries returns profile totals per step (SelectSeries), one series
// per group of groupBy, merged across the selectors. The points cover
// [From, To) exactly: each sums the step that ends at it, and a last,
// shorter step ends at To - 1 ms.
func (e *Engine) ProfileSeries(ctx context.Context, scope Scope, profileType string, groupBy []schema.Attribute, r Range) ([]Series, error) {
	return e.series(ctx, scope, profileType, groupBy, seriesPlan(r.From, r.To, r.Step, e.maxQueryLength()))
}

// totals is one point per group: its total over [From, To).
func (e *Engine) totals(ctx context.Context, scope Scope, profileType string, groupBy []schema.Attribute, r Range) ([]Series, error) {
	return e.series(ctx, scope, profileType, groupBy, totalsPlan(r.From, r.To, e.maxQueryLength()))
}

func (e *Engine) series(ctx context.Context, scope Scope, profileType string, groupBy []schema.Attribute, calls []seriesCall) ([]Series, error) {
	if e.Profiles == nil {
		return nil, ErrNoPyroscope
	}
	sels, err := scope.Selectors(filter.Pyroscope)
	if err != nil {
		return nil, err
	}
	if err := e.budget(len(sels), len(calls), 1); err != nil {
		return nil, err
	}
	m := newMerger()
	err = e.fan(ctx, len(sels)*len(calls), func(ctx context.Context, i int) error {
		sel, c := sels[i/len(calls)], calls[i%len(calls)]
		ss, err := e.Profiles.SelectSeries(ctx, profileType, sel.String(), wireLabels(groupBy), c.Start, c.End, c.Step)
		if err != nil {
			return err
		}
		for _, s := range ss {
			wire := map[string]string{}
			for _, l := range s.Labels {
				wire[l.Name] = l.Value
			}
			labels := attrLabels(wire, groupBy)
			for _, p := range s.Points {
				m.add(labels, time.UnixMilli(p.Timestamp), p.Value)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m.series(), nil
}

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

// AttributeValues returns the values of attr under scope, from both
// backends (GPU attributes live only in Prometheus, profiles only in
// Pyroscope). A backend that is not configured is skipped; one that fails
// fails the call, so that a partial list is never taken for the whole.
func (e *Engine) AttributeValues(ctx context.Context, scope Scope, attr schema.Attribute, r Range) ([]string, error) {
	if e.Profiles == nil && e.Metrics == nil {
		return nil, errors.Join(ErrNoPyroscope, ErrNoPrometheus)
	}
	seen := map[string]bool{}
	var mu sync.Mutex
	add := func(vs []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range vs {
			if v != "" {
				seen[v] = true
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	if e.Profiles != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vs, err := e.profileValues(ctx, scope, attr, r)
			errs[0] = err
			add(vs)
		}()
	}
	if e.Metrics != nil {
		sels, err := scope.Selectors(filter.Prometheus)
		if err != nil {
			return nil, err
		}
		if len(sels) > 0 {
			ms := make([]string, len(sels))
			for i, s := range sels {
				ms[i] = promql.Matchers(s)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				vs, err := e.Metrics.LabelValues(ctx, attr.Label, ms, r.From, r.To)
				errs[1] = err
				add(vs)
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

// profileValues lists the values of attr on profiles in [From, To):
// Pyroscope's LabelValues answers by whole blocks, which reach minutes or
// hours outside the range, so the values come from SelectSeries grouped
// by attr, one total per profile type, which is exact.
func (e *Engine) profileValues(ctx context.Context, scope Scope, attr schema.Attribute, r Range) ([]string, error) {
	sels, err := scope.Selectors(filter.Pyroscope)
	if err != nil || len(sels) == 0 {
		return nil, err
	}
	calls := totalsPlan(r.From, r.To, e.maxQueryLength())
	if err := e.budget(len(sels), len(calls), 1); err != nil {
		return nil, err
	}
	pts, err := e.ProfileTypes(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := e.budget(len(sels), len(calls), len(pts)); err != nil {
		return nil, err
	}
	// One profile type after the other, so that the calls in flight stay
	// within Parallel.
	var out []string
	for _, pt := range pts {
		ss, err := e.series(ctx, scope, pt.ID, []schema.Attribute{attr}, calls)
		if err != nil {
			return nil, err
		}
		for _, s := range ss {
			out = append(out, s.Labels[attr.Name])
		}
	}
	return out, nil
}

// ProfileTypes lists the profile types with data in the range, one call
// per time chunk. Profile types are not per job, so ownership does not
// narrow them.
func (e *Engine) ProfileTypes(ctx context.Context, r Range) ([]*typesv1.ProfileType, error) {
	if e.Profiles == nil {
		return nil, ErrNoPyroscope
	}
	chunks := spans(r.From, r.To, e.maxQueryLength())
	if err := e.budget(1, len(chunks), 1); err != nil {
		return nil, err
	}
	answers := make([][]*typesv1.ProfileType, len(chunks))
	err := e.fan(ctx, len(chunks), func(ctx context.Context, i int) error {
		pts, err := e.Profiles.ProfileTypes(ctx, chunks[i].From, chunks[i].last())
		answers[i] = pts
		return err
	})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []*typesv1.ProfileType
	for _, pts := range answers {
		for _, pt := range pts {
			if !seen[pt.ID] {
				seen[pt.ID] = true
				out = append(out, pt)
			}
		}
	}
	slices.SortFunc(out, func(a, b *typesv1.ProfileType) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// GPUProfileType returns the GPU kernel-time profile type with data in the
// range, or "" if there is none.
func (e *Engine) GPUProfileType(ctx context.Context, r Range) (string, error) {
	pts, err := e.ProfileTypes(ctx, r)
	if err != nil {
		return "", err
	}
	for _, pt := range pts {
		if schema.GPUTime.Matches(pt.ID) {
			return pt.ID, nil
		}
	}
	return "", nil
}
