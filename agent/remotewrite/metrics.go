package remotewrite

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/agent/ship"
	"github.com/slurmscope/slurmscope/schema"
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
	desc := func(m schema.Metric) *prometheus.Desc { return promschema.Desc(m, "", false) }
	return &Collector{
		Collector: ship.NewCollector(w.ship.Stats, ship.Metrics{
			Sent:         schema.RemoteWriteRequestsSent,
			SentSamples:  schema.RemoteWriteSamplesSent,
			SentBytes:    schema.RemoteWriteSentBytes,
			Retries:      schema.RemoteWriteRetries,
			Dropped:      schema.RemoteWriteDroppedRequests,
			SpoolEntries: schema.RemoteWriteSpoolRequests,
			SpoolBytes:   schema.RemoteWriteSpoolBytes,
			Reasons:      dropReasons,
		}),
		w:            w,
		gatherErrors: desc(schema.RemoteWriteGatherErrors),
		skipped:      desc(schema.RemoteWriteSkippedSeries),
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
