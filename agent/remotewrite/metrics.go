package remotewrite

import (
	"github.com/slurmscope/slurmscope/agent/ship"
	"github.com/slurmscope/slurmscope/schema"
)

// NewCollector returns a collector of w's counters for the agent's
// /metrics (and so, through the registry, remote-writes them too): the
// shipper's, and the failed gathers and series left out. Register it
// once.
func NewCollector(w *Writer) *ship.Collector {
	stat := func(f func(Stats) float64) func() (float64, bool) {
		return func() (float64, bool) { return f(w.Stats()), true }
	}
	return ship.NewCollector(w.ship.Stats, ship.Metrics{
		Sent:         schema.RemoteWriteRequestsSent,
		SentSamples:  schema.RemoteWriteSamplesSent,
		SentBytes:    schema.RemoteWriteSentBytes,
		Retries:      schema.RemoteWriteRetries,
		Dropped:      schema.RemoteWriteDroppedRequests,
		SpoolEntries: schema.RemoteWriteSpoolRequests,
		SpoolBytes:   schema.RemoteWriteSpoolBytes,
		Reasons:      dropReasons,
		Own: []ship.Own{
			{Metric: schema.RemoteWriteGatherErrors, Value: stat(func(st Stats) float64 { return float64(st.GatherErrors) })},
			{Metric: schema.RemoteWriteSkippedSeries, Value: stat(func(st Stats) float64 { return float64(st.SkippedSeries) })},
		},
	})
}
