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
	// Own are the backend's own metrics, after the shipper's.
	Own []Own
}

// Own is a metric of one backend's own, read at each scrape; ok false
// leaves it out (a value not known yet).
type Own struct {
	Metric schema.Metric
	Value  func() (v float64, ok bool)
}

// Collector exports a shipper's counters for the agent's /metrics.
type Collector struct {
	stats   func() Stats
	reasons []string
	dropped *prometheus.Desc
	values  []value
	own     []value
}

var _ prometheus.Collector = (*Collector)(nil)

type value struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	get  func(Stats) (float64, bool)
}

// NewCollector returns a collector of what stats (a Shipper's Stats)
// returns, under the names in m. Register it once.
func NewCollector(stats func() Stats, m Metrics) *Collector {
	c := &Collector{stats: stats, reasons: m.Reasons}
	add := func(m schema.Metric, typ prometheus.ValueType, get func(Stats) float64) {
		if m.Name != "" {
			c.values = append(c.values, value{promschema.Desc(m, "", false), typ, func(s Stats) (float64, bool) { return get(s), true }})
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
	c.own = make([]value, len(m.Own))
	for i, o := range m.Own {
		c.own[i] = value{promschema.Desc(o.Metric, "", false), promschema.ValueType(o.Metric), func(Stats) (float64, bool) { return o.Value() }}
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
	for _, v := range c.own {
		ch <- v.desc
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	send := func(vs []value) {
		for _, v := range vs {
			if x, ok := v.get(st); ok {
				ch <- prometheus.MustNewConstMetric(v.desc, v.typ, x)
			}
		}
	}
	send(c.values)
	if c.dropped != nil {
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
	send(c.own)
}
