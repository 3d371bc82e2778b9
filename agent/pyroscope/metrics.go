package pyroscope

import "github.com/slurmscope/slurmscope/agent/ship"

// Collector exports a shipper's counters for the agent's /metrics.
type Collector struct{ *ship.Collector }

// NewCollector returns a collector for s. Register it once.
func NewCollector(s *Shipper) *Collector {
	const ns = "slurmscope_pyroscope_"
	return &Collector{ship.NewCollector(s.ship.Stats, ship.Metrics{
		Sent:         ship.Metric{Name: ns + "pushes_total", Help: "Push requests delivered to Pyroscope."},
		SentBytes:    ship.Metric{Name: ns + "pushed_bytes_total", Help: "Encoded bytes of the push requests delivered to Pyroscope."},
		Retries:      ship.Metric{Name: ns + "push_retries_total", Help: "Push attempts that failed and were retried."},
		Dropped:      ship.Metric{Name: ns + "dropped_requests_total", Help: "Push requests dropped, by reason."},
		SpoolEntries: ship.Metric{Name: ns + "spool_requests", Help: "Push requests waiting in the spool."},
		SpoolBytes:   ship.Metric{Name: ns + "spool_bytes", Help: "Bytes waiting in the spool."},
		Reasons:      dropReasons,
	})}
}
