package remotewrite

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a Writer's counters for the agent's /metrics (and so,
// through the registry, remote-writes them too).
type Collector struct {
	w                                 *Writer
	requests, samples, bytes, retries *prometheus.Desc
	dropped, gatherErrors, skipped    *prometheus.Desc
	spoolRequests, spoolBytes         *prometheus.Desc
}

// NewCollector returns a collector for w. Register it once.
func NewCollector(w *Writer) *Collector {
	const ns = "slurmscope_remote_write_"
	return &Collector{
		w:             w,
		requests:      prometheus.NewDesc(ns+"requests_sent_total", "Remote-write requests delivered.", nil, nil),
		samples:       prometheus.NewDesc(ns+"samples_sent_total", "Samples in the remote-write requests delivered.", nil, nil),
		bytes:         prometheus.NewDesc(ns+"sent_bytes_total", "Compressed bytes of the remote-write requests delivered.", nil, nil),
		retries:       prometheus.NewDesc(ns+"retries_total", "Remote-write attempts that failed and were retried.", nil, nil),
		dropped:       prometheus.NewDesc(ns+"dropped_requests_total", "Remote-write requests dropped, by reason.", []string{"reason"}, nil),
		gatherErrors:  prometheus.NewDesc(ns+"gather_errors_total", "Gathers of the agent's metrics that reported an error.", nil, nil),
		skipped:       prometheus.NewDesc(ns+"skipped_series_total", "Series left out of remote write for labels no receiver accepts.", nil, nil),
		spoolRequests: prometheus.NewDesc(ns+"spool_requests", "Remote-write requests waiting in the spool.", nil, nil),
		spoolBytes:    prometheus.NewDesc(ns+"spool_bytes", "Bytes of remote-write requests waiting in the spool.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.samples, c.bytes, c.retries, c.dropped, c.gatherErrors, c.skipped, c.spoolRequests, c.spoolBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.w.Stats()
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(st.RequestsSent))
	ch <- prometheus.MustNewConstMetric(c.samples, prometheus.CounterValue, float64(st.SamplesSent))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(st.BytesSent))
	ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(st.Retries))
	// Every reason is always exported, so that rate() sees the first drop.
	for _, r := range dropReasons {
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.Dropped[r]), r)
	}
	ch <- prometheus.MustNewConstMetric(c.gatherErrors, prometheus.CounterValue, float64(st.GatherErrors))
	ch <- prometheus.MustNewConstMetric(c.skipped, prometheus.CounterValue, float64(st.SkippedSeries))
	ch <- prometheus.MustNewConstMetric(c.spoolRequests, prometheus.GaugeValue, float64(st.SpoolRequests))
	ch <- prometheus.MustNewConstMetric(c.spoolBytes, prometheus.GaugeValue, float64(st.SpoolBytes))
}
