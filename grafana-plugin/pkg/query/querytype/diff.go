package querytype

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
)

// Diff is two selections of profiles, each over its own range, laid over
// one another: Grafana's flame graph panel draws it as a diff, the left
// side the baseline and the right the comparison.
const Diff = "diff"

func init() {
	Register[diffQuery](Info{Name: Diff, Key: "Diff", Order: 15,
		Label: "Diff flame graph", Description: "Two selections (jobs, ranks, nodes), each over its own range, compared in one flame graph"})
}

type diffQuery struct {
	// ProfileType "" is the settings' default.
	ProfileType string `json:"profileType"`
	// MaxNodes bounds the graph's nodes; 0 is DefaultMaxNodes.
	MaxNodes int `json:"maxNodes"`
	// LeftFilter and RightFilter are CEL, each ANDed with the query's
	// filter; "" is the query's filter alone.
	LeftFilter  string `json:"leftFilter"`
	RightFilter string `json:"rightFilter"`
	// A side's own range, each end as epoch milliseconds (Grafana's
	// ${__from}) or RFC 3339; "" is the panel's.
	LeftFrom  string `json:"leftFrom"`
	LeftTo    string `json:"leftTo"`
	RightFrom string `json:"rightFrom"`
	RightTo   string `json:"rightTo"`

	left, right side
}

// side is one side's filter and the ends of its range it sets (zero:
// the panel's).
type side struct {
	filter   *filter.Filter
	from, to time.Time
}

func (q *diffQuery) Check() (err error) {
	if q.MaxNodes < 0 || q.MaxNodes > MaxMaxNodes {
		return fmt.Errorf("maxNodes %d: want 1 to %d", q.MaxNodes, MaxMaxNodes)
	}
	if q.MaxNodes == 0 {
		q.MaxNodes = DefaultMaxNodes
	}
	if q.left, err = parseSide("left", q.LeftFilter, q.LeftFrom, q.LeftTo); err != nil {
		return err
	}
	q.right, err = parseSide("right", q.RightFilter, q.RightFrom, q.RightTo)
	return err
}

func parseSide(name, src, from, to string) (side, error) {
	var s side
	var err error
	if src != "" {
		if s.filter, err = filter.Compile(src); err != nil {
			return s, fmt.Errorf("%sFilter: %w", name, err)
		}
	}
	if s.from, err = parseTime(from); err != nil {
		return s, fmt.Errorf("%sFrom: %w", name, err)
	}
	if s.to, err = parseTime(to); err != nil {
		return s, fmt.Errorf("%sTo: %w", name, err)
	}
	if !s.from.IsZero() && !s.to.IsZero() && !s.from.Before(s.to) {
		return s, fmt.Errorf("%sFrom %s is not before %sTo %s", name, from, name, to)
	}
	return s, nil
}

// parseTime reads epoch milliseconds or RFC 3339; "" is the zero time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want epoch milliseconds or an RFC 3339 time", s)
	}
	return t, nil
}

// over is the side's range: its own ends where it sets them, else the
// panel's.
func (s side) over(r query.Range) (query.Range, error) {
	if !s.from.IsZero() {
		r.From = s.from
	}
	if !s.to.IsZero() {
		r.To = s.to
	}
	if !r.From.Before(r.To) {
		return r, fmt.Errorf("%s to %s is not a range", r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339))
	}
	return r, nil
}

func (q *diffQuery) Needs() Backends { return Backends{Pyroscope: true} }

func (q *diffQuery) Shape() Shape { return Shape{} }

func (q *diffQuery) Run(ctx context.Context, env Env) (data.Frames, error) {
	lr, err := q.left.over(env.Range)
	if err != nil {
		return nil, fmt.Errorf("left: %w", err)
	}
	rr, err := q.right.over(env.Range)
	if err != nil {
		return nil, fmt.Errorf("right: %w", err)
	}
	pt := env.profileType(q.ProfileType)
	d, err := env.Engine.Diff(ctx, env.Scope, pt, query.Side{Filter: q.left.filter, Range: lr}, query.Side{Filter: q.right.filter, Range: rr}, q.MaxNodes)
	if err != nil {
		return nil, err
	}
	return data.Frames{diffFrame(d, "diff", profileUnit(pt))}, nil
}

// Frame field names Grafana's flame graph panel reads of a diff, besides
// the flame graph's: the right side's values; value and self are the
// left's.
const (
	FieldValueRight = "valueRight"
	FieldSelfRight  = "selfRight"
)

// diffFrame is the diff as Grafana's nested-set frame of a diff: a flame
// graph frame of the left side (the baseline) with the right side's total
// and self beside it on each row. unit is a Grafana unit id.
func diffFrame(d flame.Diff, name, unit string) *data.Frame {
	fields := []*data.Field{
		data.NewField(FieldLevel, nil, d.Levels),
		data.NewField(FieldValue, nil, d.Left),
		data.NewField(FieldSelf, nil, d.LeftSelf),
		data.NewField(FieldLabel, nil, d.Labels),
		data.NewField(FieldValueRight, nil, d.Right),
		data.NewField(FieldSelfRight, nil, d.RightSelf),
	}
	if unit != "" {
		for _, f := range fields {
			if f.Name != FieldLevel && f.Name != FieldLabel {
				f.Config = &data.FieldConfig{Unit: unit}
			}
		}
	}
	f := data.NewFrame(name, fields...)
	f.Meta = &data.FrameMeta{PreferredVisualization: data.VisTypeFlameGraph}
	return f
}
