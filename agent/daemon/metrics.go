package daemon

import "github.com/prometheus/client_golang/prometheus"

// metrics are the loop's own; each source's sample counters come with its
// source.Info, and its other metrics with the source.
type metrics struct {
	profiles     *prometheus.CounterVec
	payloadBytes prometheus.Counter
	errors       *prometheus.CounterVec
}

func newMetrics() metrics {
	return metrics{
		profiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_profiles_total", Help: "Profiles handed to the sink, by result."}, []string{"result"}),
		payloadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slurmscope_agent_profile_bytes_total", Help: "Bytes of encoded profiles produced."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_errors_total", Help: "Errors in the agent's main loop, by stage."}, []string{"stage"}),
	}
}

func (m metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.profiles, m.payloadBytes, m.errors}
}
