package remotewrite

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/ship"
)

// Collector exports a Writer's counters for the agent's /metrics (and so,
// through the registry, remote-writes them too).
type Collector struct {
	*ship.Collector
	w                     *Writer
	gatherErrors, skipped *prometheus.Desc
}

// NewCollector returns a collector for w. Register it once.
func NewCollector(w *Writer) *Collector {
	const ns = "slurmscope_remote_write_"
	return &Collector{
		Collector: ship.NewCollector(w.ship.Stats, ship.Metrics{
			Sent:         ship.Metric{Name: ns + "requests_sent_total", Help: "Remote-write requests delivered."},
			SentSamples:  ship.Metric{Name: ns + "samples_sent_total", Help: "Samples in the remote-write requests delivered."},
			SentBytes:    ship.Metric{Name: ns + "sent_bytes_total", Help: "Compressed bytes of the remote-write requests delivered."},
			Retries:      ship.Metric{Name: ns + "retries_total", Help: "Remote-write attempts that failed and were retried."},
			Dropped:      ship.Metric{Name: ns + "dropped_requests_total", Help: "Remote-write requests dropped, by reason."},
			SpoolEntries: ship.Metric{Name: ns + "spool_requests", Help: "Remote-write requests waiting in the spool."},
			SpoolBytes:   ship.Metric{Name: ns + "spool_bytes", Help: "Bytes of remote-write requests waiting in the spool."},
			Reasons:      dropReasons,
		}),
		w:            w,
		gatherErrors: prometheus.NewDesc(ns+"gather_errors_total", "Gathers of the agent's metrics that reported an error.", nil, nil),
		skipped:      prometheus.NewDesc(ns+"skipped_series_total", "Series left out of remote write for labels no receiver accepts.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.Collector.Describe(ch)
	ch <- c.gatherErrors
	ch <- c.skipped
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.Collector.Collect(ch)
	st := c.w.Stats()
	ch <- prometheus.MustNewConstMetric(c.gatherErrors, prometheus.CounterValue, float64(st.GatherErrors))
	ch <- prometheus.MustNewConstMetric(c.skipped, prometheus.CounterValue, float64(st.SkippedSeries))
}
