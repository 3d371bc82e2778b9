// Package promschema makes the agent's Prometheus descriptors and
// collectors from the schema's metric definitions, so that a metric's name,
// help, type and labels are spelled once, in package schema.
package promschema

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/schema"
)

// Desc describes m as served by the agent of node host: host_name, where m
// carries it, is a constant label; the other labels are variable, in the
// schema's order. mig selects a MIG instance's label set.
func Desc(m schema.Metric, host string, mig bool) *prometheus.Desc {
	var constant prometheus.Labels
	labels := m.LabelNames(mig)
	if i := slices.Index(labels, schema.HostName.Label); i >= 0 {
		constant = prometheus.Labels{schema.HostName.Label: host}
		labels = slices.Delete(slices.Clone(labels), i, i+1)
	}
	return prometheus.NewDesc(m.Name, m.Help, labels, constant)
}

// ValueType is m's type for const metrics.
func ValueType(m schema.Metric) prometheus.ValueType {
	if m.Type == schema.Counter {
		return prometheus.CounterValue
	}
	return prometheus.GaugeValue
}

// Counter returns a counter for m, which must be a counter without labels.
func Counter(m schema.Metric) prometheus.Counter {
	check(m, schema.Counter, false)
	return prometheus.NewCounter(prometheus.CounterOpts{Name: m.Name, Help: m.Help})
}

// CounterVec returns a counter vector for m, which must be a counter whose
// labels are its own (no attributes).
func CounterVec(m schema.Metric) *prometheus.CounterVec {
	check(m, schema.Counter, true)
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.Name, Help: m.Help}, m.Labels)
}

// JobCounterVec returns a counter vector for m, a counter of the agent's
// own whose series name a job: its attributes (no host_name: a scrape adds
// the instance, remote write the host) then its own labels.
func JobCounterVec(m schema.Metric) *prometheus.CounterVec {
	if m.Type != schema.Counter || len(m.Attributes) == 0 || slices.Contains(m.LabelNames(false), schema.HostName.Label) {
		panic(fmt.Sprintf("promschema: %s is not a per-job counter of the agent", m.Name))
	}
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.Name, Help: m.Help}, m.LabelNames(false))
}

// CounterFunc returns a counter for m that reads f at each scrape.
func CounterFunc(m schema.Metric, f func() float64) prometheus.CounterFunc {
	check(m, schema.Counter, false)
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.Name, Help: m.Help}, f)
}

// Gauge returns a gauge for m, which must be a gauge without labels.
func Gauge(m schema.Metric) prometheus.Gauge {
	check(m, schema.Gauge, false)
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: m.Name, Help: m.Help})
}

// check panics where the code and the schema disagree about m: a bug that
// any test constructing the collector finds.
func check(m schema.Metric, typ schema.MetricType, labels bool) {
	if m.Type != typ || len(m.Attributes) > 0 || (len(m.Labels) > 0) != labels {
		panic(fmt.Sprintf("promschema: %s is a %s with attributes %d and labels %v", m.Name, m.Type, len(m.Attributes), m.Labels))
	}
}

// HistogramVec returns a histogram vector for m, which must be a histogram
// whose labels are its own (no attributes).
func HistogramVec(m schema.Metric) *prometheus.HistogramVec {
	check(m, schema.Histogram, true)
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.Name, Help: m.Help, Buckets: m.Buckets}, m.Labels)
}

// Reader is a collector of the agent's own metrics whose values are read
// at each scrape from counters kept elsewhere (a walker's, an
// interpreter's): read emits each series of the metrics in defs.
func Reader(defs []schema.Metric, read func(emit func(m schema.Metric, v float64, labels ...string))) prometheus.Collector {
	r := reader{read: read, descs: map[string]*prometheus.Desc{}}
	for _, m := range defs {
		r.descs[m.Name] = Desc(m, "", false)
	}
	return r
}

type reader struct {
	read  func(emit func(m schema.Metric, v float64, labels ...string))
	descs map[string]*prometheus.Desc
}

func (r reader) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range r.descs {
		ch <- d
	}
}

func (r reader) Collect(ch chan<- prometheus.Metric) {
	r.read(func(m schema.Metric, v float64, labels ...string) {
		d, ok := r.descs[m.Name]
		if !ok {
			panic(fmt.Sprintf("promschema: %s is not among the reader's metrics", m.Name))
		}
		ch <- prometheus.MustNewConstMetric(d, ValueType(m), v, labels...)
	})
}
