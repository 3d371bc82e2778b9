package pyroscope

import (
	"github.com/slurmscope/slurmscope/agent/ship"
	"github.com/slurmscope/slurmscope/schema"
)

// NewCollector returns a collector of s's counters for the agent's
// /metrics: the shipper's, and the profiles dropped as too old, the
// requests held and the clock skew. Register it once.
func NewCollector(s *Shipper) *ship.Collector {
	stat := func(f func(Stats) float64) func() (float64, bool) {
		return func() (float64, bool) { return f(s.Stats()), true }
	}
	return ship.NewCollector(s.ship.Stats, ship.Metrics{
		Sent:         schema.PyroscopePushes,
		SentBytes:    schema.PyroscopePushedBytes,
		Retries:      schema.PyroscopePushRetries,
		Dropped:      schema.PyroscopeDroppedRequests,
		SpoolEntries: schema.PyroscopeSpoolRequests,
		SpoolBytes:   schema.PyroscopeSpoolBytes,
		Reasons:      dropReasons,
		Own: []ship.Own{
			{Metric: schema.PyroscopeTooOldProfiles, Value: stat(func(st Stats) float64 { return float64(st.TooOldProfiles) })},
			{Metric: schema.PyroscopeHeldRequests, Value: stat(func(st Stats) float64 { return float64(st.Held) })},
			// Known once the server answered.
			{Metric: schema.PyroscopeClockSkew, Value: func() (float64, bool) {
				skew, ok := s.snd.clock.Skew()
				return skew.Seconds(), ok
			}},
		},
	})
}
