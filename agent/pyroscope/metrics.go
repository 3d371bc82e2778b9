package pyroscope

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/ship"
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
	const ns = "slurmscope_pyroscope_"
	return &Collector{
		Collector: ship.NewCollector(s.ship.Stats, ship.Metrics{
			Sent:         ship.Metric{Name: ns + "pushes_total", Help: "Push requests delivered to Pyroscope."},
			SentBytes:    ship.Metric{Name: ns + "pushed_bytes_total", Help: "Encoded bytes of the push requests delivered to Pyroscope."},
			Retries:      ship.Metric{Name: ns + "push_retries_total", Help: "Push attempts that failed and were retried."},
			Dropped:      ship.Metric{Name: ns + "dropped_requests_total", Help: "Push requests dropped, by reason."},
			SpoolEntries: ship.Metric{Name: ns + "spool_requests", Help: "Push requests waiting in the spool."},
			SpoolBytes:   ship.Metric{Name: ns + "spool_bytes", Help: "Bytes waiting in the spool."},
			Reasons:      dropReasons,
		}),
		s: s,
		tooOld: prometheus.NewDesc(ns+"too_old_profiles_total",
			"Profiles dropped before sending as older than Pyroscope's ingestion window, with their request (dropped_requests_total{reason=\"too_old\"}) or cut from it.", nil, nil),
		held: prometheus.NewDesc(ns+"held_requests_total",
			"Push requests held back until Pyroscope's ingestion window takes them, after it refused their profiles as stamped ahead of its clock (this node's clock is fast).", nil, nil),
		skew: prometheus.NewDesc(ns+"clock_skew_seconds",
			"Pyroscope's clock minus this node's, from the Date header of its last response (to about a second); absent before the first response.", nil, nil),
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
