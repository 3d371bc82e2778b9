package plugin

import (
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/schema"
)

// seriesFrames returns one frame per series (Grafana's "timeseries-multi"
// data plane type): a time field and one numeric field whose labels are
// the group. Alert rules evaluate exactly this shape, one instance per
// group. No series gives one empty frame of the same type, so that "no
// data" is told apart from an error.
func seriesFrames(name, unit string, ss []query.Series) data.Frames {
	meta := func() *data.FrameMeta {
		return &data.FrameMeta{Type: data.FrameTypeTimeSeriesMulti, TypeVersion: data.FrameTypeVersion{0, 1}}
	}
	if len(ss) == 0 {
		f := data.NewFrame(name, data.NewField(data.TimeSeriesTimeFieldName, nil, []time.Time{}),
			data.NewField(data.TimeSeriesValueFieldName, nil, []float64{}))
		f.Meta = meta()
		return data.Frames{f}
	}
	out := make(data.Frames, 0, len(ss))
	for _, s := range ss {
		v := data.NewField(data.TimeSeriesValueFieldName, data.Labels(s.Labels), s.Values)
		if unit != "" {
			v.Config = &data.FieldConfig{Unit: unit}
		}
		f := data.NewFrame(name, data.NewField(data.TimeSeriesTimeFieldName, nil, s.Times), v)
		f.Meta = meta()
		out = append(out, f)
	}
	return out
}

// rankedFrame is a table of entities and their values, largest first.
func rankedFrame(name, entity, unit string, rs []query.Ranked) *data.Frame {
	names := make([]string, len(rs))
	values := make([]float64, len(rs))
	for i, r := range rs {
		names[i], values[i] = r.Value, r.Total
	}
	v := data.NewField(data.TimeSeriesValueFieldName, nil, values)
	if unit != "" {
		v.Config = &data.FieldConfig{Unit: unit}
	}
	f := data.NewFrame(name, data.NewField(entity, nil, names), v)
	f.Meta = &data.FrameMeta{PreferredVisualization: data.VisTypeTable}
	return f
}

// Findings table columns: the job's attributes by their dotted names, then
// the finding.
var findingColumns = []string{"severity", "finding", schema.JobID.Name, schema.JobUser.Name, schema.JobName.Name,
	"summary", "advice", "value", "threshold"}

// findingsFrame is one row per finding, the most severe first.
func findingsFrame(fs []findings.Finding) *data.Frame {
	str := func(get func(f findings.Finding) string) []string {
		out := make([]string, len(fs))
		for i, f := range fs {
			out[i] = get(f)
		}
		return out
	}
	num := func(get func(f findings.Finding) float64) []float64 {
		out := make([]float64, len(fs))
		for i, f := range fs {
			out[i] = get(f)
		}
		return out
	}
	c := findingColumns
	f := data.NewFrame("findings",
		data.NewField(c[0], nil, str(func(f findings.Finding) string { return string(f.Severity) })),
		data.NewField(c[1], nil, str(func(f findings.Finding) string { return string(f.Kind) })),
		data.NewField(c[2], nil, str(func(f findings.Finding) string { return f.JobID })),
		data.NewField(c[3], nil, str(func(f findings.Finding) string { return f.User })),
		data.NewField(c[4], nil, str(func(f findings.Finding) string { return f.Name })),
		data.NewField(c[5], nil, str(func(f findings.Finding) string { return f.Summary })),
		data.NewField(c[6], nil, str(func(f findings.Finding) string { return f.Advice })),
		data.NewField(c[7], nil, num(func(f findings.Finding) float64 { return f.Value })),
		data.NewField(c[8], nil, num(func(f findings.Finding) float64 { return f.Threshold })),
	)
	f.Meta = &data.FrameMeta{PreferredVisualization: data.VisTypeTable}
	return f
}

// FindingLabels are the labels of a finding's number: alert rules name
// them in their summaries ({{ index $labels "slurm.job.id" }}).
var FindingLabels = []string{schema.JobID.Name, schema.JobUser.Name, schema.JobName.Name, "finding", "severity"}

// findingNumbers are Grafana's "numeric-multi" frames, which alert rules
// evaluate: one per finding, its value labelled by its job. No finding
// gives one empty frame of the same type ("no data", not an error).
func findingNumbers(fs []findings.Finding) data.Frames {
	meta := func() *data.FrameMeta {
		return &data.FrameMeta{Type: data.FrameTypeNumericMulti, TypeVersion: data.FrameTypeVersion{0, 1}}
	}
	if len(fs) == 0 {
		f := data.NewFrame("findings", data.NewField("value", nil, []float64{}))
		f.Meta = meta()
		return data.Frames{f}
	}
	out := make(data.Frames, 0, len(fs))
	for _, x := range fs {
		l := data.Labels{FindingLabels[0]: x.JobID, FindingLabels[1]: x.User, FindingLabels[2]: x.Name,
			FindingLabels[3]: string(x.Kind), FindingLabels[4]: string(x.Severity)}
		f := data.NewFrame("findings", data.NewField("value", l, []float64{x.Value}))
		f.Meta = meta()
		out = append(out, f)
	}
	return out
}

// valuesFrame lists attribute values, as template variables read them
// (one string field; text and value are the same).
func valuesFrame(name string, values []string) *data.Frame {
	if values == nil {
		values = []string{}
	}
	return data.NewFrame(name, data.NewField("value", nil, values))
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
