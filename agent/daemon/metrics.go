package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// metrics are the loop's own; each source's sample counters come with its
// source.Info, and its other metrics with the source.
type metrics struct {
	profiles     *prometheus.CounterVec
	payloadBytes prometheus.Counter
	errors       *prometheus.CounterVec
}

func newMetrics() metrics {
	return metrics{
		profiles:     promschema.CounterVec(schema.AgentProfiles),
		payloadBytes: promschema.Counter(schema.AgentProfileBytes),
		errors:       promschema.CounterVec(schema.AgentErrors),
	}
}

func (m metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.profiles, m.payloadBytes, m.errors}
}
