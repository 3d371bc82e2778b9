package remotewrite

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// MetricNameLabel is the label that carries a series' metric name.
const MetricNameLabel = "__name__"

// Label is one label of a series.
type Label struct {
	Name, Value string
}

// Sample is one value of a series at a time in milliseconds since the Unix
// epoch.
type Sample struct {
	Value     float64
	Timestamp int64
}

// TimeSeries is one series as remote-write carries it: its labels, sorted by
// name and including __name__, and its samples in time order.
type TimeSeries struct {
	Labels  []Label
	Samples []Sample
}

// staleNaN is the bit pattern Prometheus reserves for staleness markers.
// A gauge that happens to hold exactly this NaN must not end a series.
const staleNaN = 0x7ff0000000000002

// FromGatherer gathers g once and returns its metrics as series with one
// sample each at at (or at the metric's own timestamp, where it has one).
// Counters, gauges and untyped metrics are taken as they are; histograms
// become _bucket{le}, _sum and _count series and summaries {quantile}, _sum
// and _count series, as in the text exposition format. Native histogram
// buckets are not sent (remote-write 1.0 has no room for them in samples).
//
// Series that no receiver would accept (empty or invalid UTF-8 names, a
// label given twice) are left out and counted in skipped. A Gather error
// is returned along with whatever was gathered, as client_golang does.
func FromGatherer(g prometheus.Gatherer, at time.Time) (series []TimeSeries, skipped int, err error) {
	mfs, err := g.Gather()
	series, skipped = FromFamilies(mfs, at)
	return series, skipped, err
}

// FromFamilies is FromGatherer for families already gathered.
func FromFamilies(mfs []*dto.MetricFamily, at time.Time) (series []TimeSeries, skipped int) {
	ts := at.UnixMilli()
	b := builder{}
	for _, mf := range mfs {
		name := mf.GetName()
		for _, m := range mf.GetMetric() {
			if m == nil {
				continue
			}
			t := ts
			if m.TimestampMs != nil {
				t = m.GetTimestampMs()
			}
			b.metric(name, mf.GetType(), m, t)
		}
	}
	return b.out, b.skipped
}

type builder struct {
	out     []TimeSeries
	skipped int
}

func (b *builder) metric(name string, typ dto.MetricType, m *dto.Metric, ts int64) {
	// Take the value from the field that is set, preferring the family's
	// type: a hand-built family may leave the type at its zero (counter).
	switch {
	case typ == dto.MetricType_COUNTER && m.Counter != nil:
		b.add(name, m.Label, "", "", m.Counter.GetValue(), ts)
	case typ == dto.MetricType_GAUGE && m.Gauge != nil:
		b.add(name, m.Label, "", "", m.Gauge.GetValue(), ts)
	case (typ == dto.MetricType_HISTOGRAM || typ == dto.MetricType_GAUGE_HISTOGRAM) && m.Histogram != nil:
		b.histogram(name, m, ts)
	case typ == dto.MetricType_SUMMARY && m.Summary != nil:
		b.summary(name, m, ts)
	case m.Untyped != nil:
		b.add(name, m.Label, "", "", m.Untyped.GetValue(), ts)
	case m.Counter != nil:
		b.add(name, m.Label, "", "", m.Counter.GetValue(), ts)
	case m.Gauge != nil:
		b.add(name, m.Label, "", "", m.Gauge.GetValue(), ts)
	case m.Histogram != nil:
		b.histogram(name, m, ts)
	case m.Summary != nil:
		b.summary(name, m, ts)
	default:
		b.skipped++ // no value at all
	}
}

func (b *builder) histogram(name string, m *dto.Metric, ts int64) {
	h := m.Histogram
	count := float64(h.GetSampleCount())
	if h.GetSampleCountFloat() > 0 {
		count = h.GetSampleCountFloat()
	}
	sawInf := false
	for _, bk := range h.GetBucket() {
		if bk == nil {
			continue
		}
		c := float64(bk.GetCumulativeCount())
		if bk.GetCumulativeCountFloat() > 0 {
			c = bk.GetCumulativeCountFloat()
		}
		ub := bk.GetUpperBound()
		sawInf = sawInf || math.IsInf(ub, 1)
		b.add(name+"_bucket", m.Label, "le", formatFloat(ub), c, ts)
	}
	if !sawInf {
		// client_golang leaves the +Inf bucket implicit; the exposition
		// formats (and histogram_quantile) need it explicit.
		b.add(name+"_bucket", m.Label, "le", "+Inf", count, ts)
	}
	b.add(name+"_sum", m.Label, "", "", h.GetSampleSum(), ts)
	b.add(name+"_count", m.Label, "", "", count, ts)
}

func (b *builder) summary(name string, m *dto.Metric, ts int64) {
	s := m.Summary
	for _, q := range s.GetQuantile() {
		if q == nil {
			continue
		}
		b.add(name, m.Label, "quantile", formatFloat(q.GetQuantile()), q.GetValue(), ts)
	}
	b.add(name+"_sum", m.Label, "", "", s.GetSampleSum(), ts)
	b.add(name+"_count", m.Label, "", "", float64(s.GetSampleCount()), ts)
}

// add appends one series. extraName/extraValue is the le or quantile label.
func (b *builder) add(name string, pairs []*dto.LabelPair, extraName, extraValue string, v float64, ts int64) {
	labels := make([]Label, 0, len(pairs)+2)
	labels = append(labels, Label{MetricNameLabel, name})
	if extraName != "" {
		labels = append(labels, Label{extraName, extraValue})
	}
	for _, p := range pairs {
		if p == nil {
			continue
		}
		labels = append(labels, Label{p.GetName(), p.GetValue()})
	}
	labels, err := normalizeLabels(labels)
	if err != nil {
		b.skipped++
		return
	}
	if math.Float64bits(v) == staleNaN {
		v = math.NaN()
	}
	b.out = append(b.out, TimeSeries{Labels: labels, Samples: []Sample{{Value: v, Timestamp: ts}}})
}

var (
	errEmptyName   = errors.New("empty label name")
	errInvalidName = errors.New("label or metric name is not valid UTF-8")
	errDuplicate   = errors.New("label given twice")
	errNoName      = errors.New("series without a metric name")
)

// normalizeLabels makes labels what the remote-write spec requires: sorted by
// name, names unique and non-empty, __name__ present. Labels with an empty
// value are dropped, since Prometheus treats them as absent anyway. Values
// that are not valid UTF-8 are repaired rather than refused: a protobuf
// string must be UTF-8, and one bad byte from a driver should not cost the
// whole series.
func normalizeLabels(labels []Label) ([]Label, error) {
	out := labels[:0]
	for _, l := range labels {
		if l.Name == "" {
			return nil, errEmptyName
		}
		if !utf8.ValidString(l.Name) {
			return nil, errInvalidName
		}
		if l.Value == "" {
			continue
		}
		if !utf8.ValidString(l.Value) {
			if l.Name == MetricNameLabel {
				// A repaired name would be a different metric.
				return nil, errInvalidName
			}
			l.Value = strings.ToValidUTF8(l.Value, "\uFFFD")
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
	hasName := false
	for i, l := range out {
		if i > 0 && out[i-1].Name == l.Name {
			return nil, fmt.Errorf("%w: %q", errDuplicate, l.Name)
		}
		hasName = hasName || l.Name == MetricNameLabel
	}
	if !hasName {
		return nil, errNoName
	}
	return out, nil
}

// withExternalLabels adds labels to every series that does not already carry
// them, as Prometheus' external_labels do: a series' own label wins.
func withExternalLabels(series []TimeSeries, ext []Label) []TimeSeries {
	if len(ext) == 0 {
		return series
	}
	for i := range series {
		ls := series[i].Labels
		merged := make([]Label, 0, len(ls)+len(ext))
		merged = append(merged, ls...)
		for _, e := range ext {
			if !slices.ContainsFunc(ls, func(l Label) bool { return l.Name == e.Name }) {
				merged = append(merged, e)
			}
		}
		slices.SortFunc(merged, func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
		series[i].Labels = merged
	}
	return series
}

// formatFloat writes le and quantile values as the text exposition format
// does, so remote-written series match scraped ones.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// split cuts series into batches of at most max samples each, never
// splitting one series' samples across batches out of order.
func split(series []TimeSeries, max int) [][]TimeSeries {
	if max <= 0 {
		max = 1
	}
	var batches [][]TimeSeries
	var cur []TimeSeries
	n := 0
	for _, s := range series {
		for len(s.Samples) > 0 {
			room := max - n
			if room == 0 {
				batches = append(batches, cur)
				cur, n = nil, 0
				room = max
			}
			take := min(room, len(s.Samples))
			cur = append(cur, TimeSeries{Labels: s.Labels, Samples: s.Samples[:take]})
			n += take
			s.Samples = s.Samples[take:]
		}
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return batches
}
