package cpu

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	samples      prometheus.Counter
	unattributed *prometheus.CounterVec
	lost         *prometheus.CounterVec
	cpus         prometheus.Gauge
}

func newMetrics() metrics {
	return metrics{
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slurmscope_agent_cpu_samples_total", Help: "CPU samples taken by the eBPF sampler and drained."}),
		unattributed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_cpu_samples_unattributed_total", Help: "CPU samples not put in any profile, by reason (exited, other_node, not_in_job)."}, []string{"reason"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_cpu_samples_lost_total", Help: "CPU samples lost in the kernel (map_full), or kept without a stack (stack_error, stack_map_full)."}, []string{"reason"}),
		cpus: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slurmscope_agent_sampled_cpus", Help: "CPUs the sampler is attached to."}),
	}
}

// own are the metrics the source exports itself; the daemon exports
// samples and unattributed (source.Info).
func (m metrics) own() []prometheus.Collector { return []prometheus.Collector{m.lost, m.cpus} }

// observe turns the sampler's running totals into counter increments.
func (m metrics) observe(prev, cur Stats) {
	add := func(reason string, p, c uint64) {
		if c > p {
			m.lost.WithLabelValues(reason).Add(float64(c - p))
		}
	}
	add("map_full", prev.LostMapFull, cur.LostMapFull)
	add("stack_error", prev.KernelStackErrors+prev.UserStackErrors, cur.KernelStackErrors+cur.UserStackErrors)
	add("stack_map_full", prev.KernelStackMapFull+prev.UserStackMapFull, cur.KernelStackMapFull+cur.UserStackMapFull)
	m.cpus.Set(float64(cur.AttachedCPUs))
}

// programStats exports the sampling program's kernel-side cost. Only
// meaningful while kernel.bpf_stats_enabled=1 (the kernel does not time BPF
// programs otherwise); the bench command turns it on.
func programStats(s *Sampler) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "slurmscope_agent_bpf_run_seconds_total",
			Help: "Time the kernel spent in the sampling program (needs kernel.bpf_stats_enabled=1)."},
			func() float64 { ns, _, _ := s.ProgramStats(); return float64(ns) / 1e9 }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "slurmscope_agent_bpf_runs_total",
			Help: "Runs of the sampling program (needs kernel.bpf_stats_enabled=1)."},
			func() float64 { _, n, _ := s.ProgramStats(); return float64(n) }),
	}
}
