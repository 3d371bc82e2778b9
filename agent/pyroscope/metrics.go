package pyroscope

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a shipper's counters for the agent's /metrics.
type Collector struct {
	s                                     *Shipper
	pushed, pushedBytes, retries, dropped *prometheus.Desc
	spoolEntries, spoolBytes              *prometheus.Desc
}

// NewCollector returns a collector for s. Register it once.
func NewCollector(s *Shipper) *Collector {
	const ns = "slurmscope_pyroscope_"
	return &Collector{
		s:            s,
		pushed:       prometheus.NewDesc(ns+"pushes_total", "Push requests delivered to Pyroscope.", nil, nil),
		pushedBytes:  prometheus.NewDesc(ns+"pushed_bytes_total", "Encoded bytes of the push requests delivered to Pyroscope.", nil, nil),
		retries:      prometheus.NewDesc(ns+"push_retries_total", "Push attempts that failed and were retried.", nil, nil),
		dropped:      prometheus.NewDesc(ns+"dropped_requests_total", "Push requests dropped, by reason.", []string{"reason"}, nil),
		spoolEntries: prometheus.NewDesc(ns+"spool_requests", "Push requests waiting in the spool.", nil, nil),
		spoolBytes:   prometheus.NewDesc(ns+"spool_bytes", "Bytes waiting in the spool.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pushed, c.pushedBytes, c.retries, c.dropped, c.spoolEntries, c.spoolBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(c.pushed, prometheus.CounterValue, float64(st.Pushed))
	ch <- prometheus.MustNewConstMetric(c.pushedBytes, prometheus.CounterValue, float64(st.PushedBytes))
	ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(st.Retries))
	// Every reason is always exported, so that rate() sees the first drop.
	for _, r := range []string{DropRejected, DropSpoolFull, DropCorrupt, DropTooLarge, DropInvalid} {
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.Dropped[r]), r)
	}
	ch <- prometheus.MustNewConstMetric(c.spoolEntries, prometheus.GaugeValue, float64(st.SpoolEntries))
	ch <- prometheus.MustNewConstMetric(c.spoolBytes, prometheus.GaugeValue, float64(st.SpoolBytes))
}
