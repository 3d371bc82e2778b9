package query

import (
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/data"
)

// SeriesFrames returns one frame per series (Grafana's "timeseries-multi"
// data plane type): a time field and one numeric field whose labels are
// the group. Alert rules evaluate exactly this shape, one instance per
// group. No series gives one empty frame of the same type, so that "no
// data" is told apart from an error.
func SeriesFrames(name, unit string, ss []Series) data.Frames {
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

// RankedFrame is a table of entities and their values, largest first.
func RankedFrame(name, entity, unit string, rs []Ranked) *data.Frame {
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

// ValuesFrame lists attribute values, as template variables read them
// (one string field; text and value are the same).
func ValuesFrame(name string, values []string) *data.Frame {
	if values == nil {
		values = []string{}
	}
	return data.NewFrame(name, data.NewField("value", nil, values))
}
