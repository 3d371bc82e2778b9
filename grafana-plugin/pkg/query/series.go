package query

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/schema"
)

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
