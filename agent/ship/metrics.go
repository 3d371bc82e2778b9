package ship

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// Metrics names what a Collector exports, from the schema; a metric without
// a name is left out. They are the backend's own
// (schema.PyroscopePushes, schema.RemoteWriteRequestsSent, ...).
type Metrics struct {
	Sent, SentBytes, SentSamples, Retries schema.Metric // counters
	Dropped                               schema.Metric // a counter with a reason label
	SpoolEntries, SpoolBytes              schema.Metric // gauges
	// Reasons are the drop reasons exported from the start, so that rate()
	// sees the first drop. Others are exported once they occur.
	Reasons []string
}

// Collector exports a shipper's counters for the agent's /metrics.
type Collector struct {
	stats   func() Stats
	reasons []string
	dropped *prometheus.Desc
	values  []value
}

type value struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	get  func(Stats) float64
}

// NewCollector returns a collector of what stats (a Shipper's Stats)
// returns, under the names in m. Register it once.
func NewCollector(stats func() Stats, m Metrics) *Collector {
	c := &Collector{stats: stats, reasons: m.Reasons}
	add := func(m schema.Metric, typ prometheus.ValueType, get func(Stats) float64) {
		if m.Name != "" {
			c.values = append(c.values, value{promschema.Desc(m, "", false), typ, get})
		}
	}
	add(m.Sent, prometheus.CounterValue, func(s Stats) float64 { return float64(s.Sent) })
	add(m.SentBytes, prometheus.CounterValue, func(s Stats) float64 { return float64(s.SentBytes) })
	add(m.SentSamples, prometheus.CounterValue, func(s Stats) float64 { return float64(s.SentSamples) })
	add(m.Retries, prometheus.CounterValue, func(s Stats) float64 { return float64(s.Retries) })
	add(m.SpoolEntries, prometheus.GaugeValue, func(s Stats) float64 { return float64(s.SpoolEntries) })
	add(m.SpoolBytes, prometheus.GaugeValue, func(s Stats) float64 { return float64(s.SpoolBytes) })
	if m.Dropped.Name != "" {
		c.dropped = promschema.Desc(m.Dropped, "", false)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.values {
		ch <- v.desc
	}
	if c.dropped != nil {
		ch <- c.dropped
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for _, v := range c.values {
		ch <- prometheus.MustNewConstMetric(v.desc, v.typ, v.get(st))
	}
	if c.dropped == nil {
		return
	}
	reasons := slices.Clone(c.reasons)
	for _, r := range slices.Sorted(maps.Keys(st.Dropped)) {
		if st.Dropped[r] > 0 && !slices.Contains(reasons, r) {
			reasons = append(reasons, r)
		}
	}
	for _, r := range reasons {
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.Dropped[r]), r)
	}
}
