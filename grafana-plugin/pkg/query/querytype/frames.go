package querytype

import (
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
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
