package querytype

import (
	"context"
	"fmt"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
)

// Flamegraph is the matching profiles' call tree, merged across jobs and
// nodes, as Grafana's flame graph draws it.
const Flamegraph = "flamegraph"

func init() {
	Register[flamegraphQuery](Info{Name: Flamegraph, Key: "Flamegraph", Order: 10,
		Label: "Flame graph", Description: "Profiles merged across the matching jobs and nodes",
		Constants: map[string]int{"DEFAULT_MAX_NODES": DefaultMaxNodes, "MAX_MAX_NODES": MaxMaxNodes}})
}

// DefaultMaxNodes is Pyroscope's default max_flamegraph_nodes.
const DefaultMaxNodes = 8192

// MaxMaxNodes keeps a query from asking for an unbounded frame.
const MaxMaxNodes = 65536

type flamegraphQuery struct {
	// ProfileType "" is the settings' default.
	ProfileType string `json:"profileType"`
	// MaxNodes bounds the graph's nodes; 0 is DefaultMaxNodes.
	MaxNodes int `json:"maxNodes"`
}

func (q *flamegraphQuery) Check() error {
	if q.MaxNodes < 0 || q.MaxNodes > MaxMaxNodes {
		return fmt.Errorf("maxNodes %d: want 1 to %d", q.MaxNodes, MaxMaxNodes)
	}
	if q.MaxNodes == 0 {
		q.MaxNodes = DefaultMaxNodes
	}
	return nil
}

func (q *flamegraphQuery) Needs() Backends { return Backends{Pyroscope: true} }

func (q *flamegraphQuery) Shape() Shape { return Shape{} }

func (q *flamegraphQuery) Run(ctx context.Context, env Env) (data.Frames, error) {
	pt := env.profileType(q.ProfileType)
	t, err := env.Engine.FlameGraph(ctx, env.Scope, pt, env.Range, q.MaxNodes)
	if err != nil {
		return nil, err
	}
	return data.Frames{flameFrame(t, "flamegraph", profileUnit(pt))}, nil
}

// Frame field names Grafana's flame graph panel reads.
const (
	FieldLevel = "level"
	FieldValue = "value"
	FieldSelf  = "self"
	FieldLabel = "label"
)

// flameFrame returns the tree as Grafana's nested-set frame: one row per
// node in depth-first order (children by name), with its depth, total, self
// value and name. unit is a Grafana unit id for the values ("ns", "bytes",
// "short").
func flameFrame(t *flame.Tree, name, unit string) *data.Frame {
	s := t.NestedSet()
	value := data.NewField(FieldValue, nil, s.Totals)
	self := data.NewField(FieldSelf, nil, s.Selfs)
	if unit != "" {
		value.Config = &data.FieldConfig{Unit: unit}
		self.Config = &data.FieldConfig{Unit: unit}
	}
	f := data.NewFrame(name, data.NewField(FieldLevel, nil, s.Levels), value, self, data.NewField(FieldLabel, nil, s.Labels))
	f.Meta = &data.FrameMeta{PreferredVisualization: data.VisTypeFlameGraph}
	return f
}

// FromFrame reads a flame graph frame back into a tree; tests and the CLI
// use it to check what the datasource returned. It fails (false) on a frame
// without the four fields, of other types, or not in nested-set order.
func FromFrame(f *data.Frame) (*flame.Tree, bool) {
	var s flame.NestedSet
	var seen int
	for _, fl := range f.Fields {
		var ok bool
		switch fl.Name {
		case FieldLevel:
			s.Levels, ok = column[int64](fl)
		case FieldValue:
			s.Totals, ok = column[int64](fl)
		case FieldSelf:
			s.Selfs, ok = column[int64](fl)
		case FieldLabel:
			s.Labels, ok = column[string](fl)
		default:
			continue
		}
		if !ok {
			return nil, false
		}
		seen++
	}
	if seen != 4 {
		return nil, false
	}
	return flame.FromNestedSet(s)
}

// column reads a field's values, which must all be of type T (not null).
func column[T any](fl *data.Field) ([]T, bool) {
	out := make([]T, fl.Len())
	for i := range out {
		v, ok := fl.At(i).(T)
		if !ok {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}
