package pyroscope

import (
	"github.com/slurmscope/slurmscope/agent/ship"
	"github.com/slurmscope/slurmscope/schema"
)

// Collector exports a shipper's counters for the agent's /metrics.
type Collector struct{ *ship.Collector }

// NewCollector returns a collector for s. Register it once.
func NewCollector(s *Shipper) *Collector {
	return &Collector{ship.NewCollector(s.ship.Stats, ship.Metrics{
		Sent:         schema.PyroscopePushes,
		SentBytes:    schema.PyroscopePushedBytes,
		Retries:      schema.PyroscopePushRetries,
		Dropped:      schema.PyroscopeDroppedRequests,
		SpoolEntries: schema.PyroscopeSpoolRequests,
		SpoolBytes:   schema.PyroscopeSpoolBytes,
		Reasons:      dropReasons,
	})}
}
