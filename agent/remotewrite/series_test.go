package remotewrite

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/schema"
)

// render writes series one per line, labels in order, for comparison.
func render(series []TimeSeries) string {
	var b strings.Builder
	for _, s := range series {
		for i, l := range s.Labels {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=%q", l.Name, l.Value)
		}
		for _, smp := range s.Samples {
			fmt.Fprintf(&b, " %v@%d", smp.Value, smp.Timestamp)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestFromGatherer(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "events_total", Help: "h"})
	c.Add(3)
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "util_ratio", Help: "h"}, []string{schema.JobName.Label, schema.GPUIndex.Label})
	g.WithLabelValues(hostile, "0").Set(0.5)
	g.WithLabelValues("", "1").Set(0.25) // an empty value is an absent label
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lat_seconds", Help: "h", Buckets: []float64{0.1, 1}})
	h.Observe(0.05)
	h.Observe(0.5)
	h.Observe(5)
	s := prometheus.NewSummary(prometheus.SummaryOpts{Name: "size_bytes", Help: "h", Objectives: map[float64]float64{0.5: 0.05}})
	s.Observe(10)
	u := prometheus.NewUntypedFunc(prometheus.UntypedOpts{Name: "raw", Help: "h"}, func() float64 { return -2 })
	reg.MustRegister(c, g, h, s, u)

	at := time.UnixMilli(1700000000123)
	series, skipped, err := FromGatherer(reg, at)
	if err != nil || skipped != 0 {
		t.Fatalf("err %v, skipped %d", err, skipped)
	}
	const ts = "@1700000000123"
	job := schema.JobName.Label
	gpu := schema.GPUIndex.Label
	want := strings.Join([]string{
		`__name__="events_total" 3` + ts,
		`__name__="lat_seconds_bucket",le="0.1" 1` + ts,
		`__name__="lat_seconds_bucket",le="1" 2` + ts,
		`__name__="lat_seconds_bucket",le="+Inf" 3` + ts,
		`__name__="lat_seconds_sum" 5.55` + ts,
		`__name__="lat_seconds_count" 3` + ts,
		`__name__="raw" -2` + ts,
		`__name__="size_bytes",quantile="0.5" 10` + ts,
		`__name__="size_bytes_sum" 10` + ts,
		`__name__="size_bytes_count" 1` + ts,
		// Label order is by name: the GPU index sorts before the job name.
		fmt.Sprintf(`__name__="util_ratio",%s="0",%s=%q 0.5`, gpu, job, hostile) + ts,
		fmt.Sprintf(`__name__="util_ratio",%s="1" 0.25`, gpu) + ts,
	}, "\n") + "\n"
	if got := render(series); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	for _, s := range series {
		if !slices.IsSortedFunc(s.Labels, func(a, b Label) int { return strings.Compare(a.Name, b.Name) }) {
			t.Errorf("labels not sorted: %v", s.Labels)
		}
	}
}

func TestExternalLabels(t *testing.T) {
	host := schema.HostName.Label
	series := []TimeSeries{
		{Labels: []Label{{MetricNameLabel, "a"}}},
		{Labels: []Label{{MetricNameLabel, "b"}, {host, "own"}}},
	}
	got := render(withExternalLabels(series, []Label{{"aaa", "1"}, {host, "n1"}}))
	want := fmt.Sprintf("__name__=\"a\",aaa=\"1\",%[1]s=\"n1\"\n__name__=\"b\",aaa=\"1\",%[1]s=\"own\"\n", host)
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// gathererFunc adapts a function to prometheus.Gatherer.
type gathererFunc func() ([]*dto.MetricFamily, error)

func (f gathererFunc) Gather() ([]*dto.MetricFamily, error) { return f() }

func TestFromFamiliesHostile(t *testing.T) {
	stale := math.Float64frombits(staleNaN)
	mfs := []*dto.MetricFamily{
		nil,
		{Name: proto.String("no_metrics")},
		{Name: proto.String("nil_metric"), Metric: []*dto.Metric{nil}},
		{Name: proto.String("no_value"), Metric: []*dto.Metric{{}}},
		// The type says counter (its zero value) but only a gauge is set.
		{Name: proto.String("mistyped"), Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: proto.Float64(7)}}}},
		{Name: proto.String("dup"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{
			Label: []*dto.LabelPair{{Name: proto.String("a"), Value: proto.String("1")}, {Name: proto.String("a"), Value: proto.String("2")}},
			Gauge: &dto.Gauge{Value: proto.Float64(1)},
		}}},
		{Name: proto.String("badutf8"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{
			Label: []*dto.LabelPair{nil, {Name: proto.String("v"), Value: proto.String("ok\xffok")}},
			Gauge: &dto.Gauge{Value: proto.Float64(stale)},
		}}},
		{Name: proto.String("bad\xffname"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: proto.Float64(1)}}}},
		{Name: proto.String(""), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: proto.Float64(1)}}}},
		{Name: proto.String("emptylabelname"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{
			Label: []*dto.LabelPair{{Value: proto.String("x")}},
			Gauge: &dto.Gauge{Value: proto.Float64(1)},
		}}},
		{Name: proto.String("own_ts"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{
			Gauge: &dto.Gauge{Value: proto.Float64(1)}, TimestampMs: proto.Int64(42),
		}}},
		{Name: proto.String("h"), Type: dto.MetricType_HISTOGRAM.Enum(), Metric: []*dto.Metric{{
			Histogram: &dto.Histogram{Bucket: []*dto.Bucket{nil, {UpperBound: proto.Float64(math.Inf(1)), CumulativeCount: proto.Uint64(2)}}},
		}}},
		{Name: proto.String("s"), Type: dto.MetricType_SUMMARY.Enum(), Metric: []*dto.Metric{{Summary: &dto.Summary{Quantile: []*dto.Quantile{nil}}}}},
	}
	gerr := errors.New("a collector failed")
	series, skipped, err := FromGatherer(gathererFunc(func() ([]*dto.MetricFamily, error) { return mfs, gerr }), time.UnixMilli(1000))
	if !errors.Is(err, gerr) {
		t.Errorf("the gather error must be returned, got %v", err)
	}
	if skipped != 5 {
		t.Errorf("skipped %d, want 5 (no value, duplicate label, invalid name, empty name, empty label name)", skipped)
	}
	got := render(series)
	want := strings.Join([]string{
		`__name__="mistyped" 7@1000`,
		`__name__="badutf8",v="ok` + "\uFFFD" + `ok" NaN@1000`,
		`__name__="own_ts" 1@42`,
		`__name__="h_bucket",le="+Inf" 2@1000`,
		`__name__="h_sum" 0@1000`,
		`__name__="h_count" 0@1000`,
		`__name__="s_sum" 0@1000`,
		`__name__="s_count" 0@1000`,
	}, "\n") + "\n"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	for _, s := range series {
		for _, smp := range s.Samples {
			if math.Float64bits(smp.Value) == staleNaN {
				t.Errorf("%v: a stale marker must never be sent for a value", s.Labels)
			}
		}
	}
}
