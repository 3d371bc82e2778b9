package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/cpu"
)

type metrics struct {
	samples      prometheus.Counter
	lost         *prometheus.CounterVec
	unattributed *prometheus.CounterVec
	profiles     *prometheus.CounterVec
	payloadBytes prometheus.Counter
	errors       *prometheus.CounterVec
	cpus         prometheus.Gauge
}

func newMetrics() metrics {
	return metrics{
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slurmscope_agent_cpu_samples_total", Help: "CPU samples taken by the eBPF sampler and drained."}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_cpu_samples_lost_total", Help: "CPU samples lost in the kernel (map_full), or kept without a stack (stack_error, stack_collision)."}, []string{"reason"}),
		unattributed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_cpu_samples_unattributed_total", Help: "CPU samples not put in any profile, by reason (exited, other_node, not_in_job)."}, []string{"reason"}),
		profiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_profiles_total", Help: "Profiles handed to the sink, by result."}, []string{"result"}),
		payloadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slurmscope_agent_profile_bytes_total", Help: "Bytes of encoded profiles produced."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_errors_total", Help: "Errors in the agent's main loop, by stage."}, []string{"stage"}),
		cpus: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slurmscope_agent_sampled_cpus", Help: "CPUs the sampler is attached to."}),
	}
}

func (m metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.samples, m.lost, m.unattributed, m.profiles, m.payloadBytes, m.errors, m.cpus}
}

// observeSampler turns the sampler's running totals into counter increments.
func (m metrics) observeSampler(prev, cur cpu.Stats) {
	add := func(reason string, p, c uint64) {
		if c > p {
			m.lost.WithLabelValues(reason).Add(float64(c - p))
		}
	}
	add("map_full", prev.LostMapFull, cur.LostMapFull)
	add("stack_error", prev.KernelStackErrors+prev.UserStackErrors, cur.KernelStackErrors+cur.UserStackErrors)
	add("stack_collision", prev.KernelStackCollisions+prev.UserStackCollisions, cur.KernelStackCollisions+cur.UserStackCollisions)
	m.cpus.Set(float64(cur.AttachedCPUs))
}
