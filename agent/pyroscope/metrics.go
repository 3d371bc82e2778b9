package pyroscope

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/agent/ship"
	"github.com/slurmscope/slurmscope/schema"
)

// Collector exports a shipper's counters for the agent's /metrics.
type Collector struct {
	*ship.Collector
	s                  *Shipper
	tooOld, held, skew *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector for s. Register it once.
func NewCollector(s *Shipper) *Collector {
	desc := func(m schema.Metric) *prometheus.Desc { return promschema.Desc(m, "", false) }
	return &Collector{
		Collector: ship.NewCollector(s.ship.Stats, ship.Metrics{
			Sent:         schema.PyroscopePushes,
			SentBytes:    schema.PyroscopePushedBytes,
			Retries:      schema.PyroscopePushRetries,
			Dropped:      schema.PyroscopeDroppedRequests,
			SpoolEntries: schema.PyroscopeSpoolRequests,
			SpoolBytes:   schema.PyroscopeSpoolBytes,
			Reasons:      dropReasons,
		}),
		s:      s,
		tooOld: desc(schema.PyroscopeTooOldProfiles),
		held:   desc(schema.PyroscopeHeldRequests),
		skew:   desc(schema.PyroscopeClockSkew),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.Collector.Describe(ch)
	ch <- c.tooOld
	ch <- c.held
	ch <- c.skew
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.Collector.Collect(ch)
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(c.tooOld, prometheus.CounterValue, float64(st.TooOldProfiles))
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.CounterValue, float64(st.Held))
	if st.ClockSkewKnown {
		ch <- prometheus.MustNewConstMetric(c.skew, prometheus.GaugeValue, st.ClockSkew.Seconds())
	}
}
