package cpu

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

type metrics struct {
	samples      prometheus.Counter
	unattributed *prometheus.CounterVec
	lost         *prometheus.CounterVec
	cpus         prometheus.Gauge
	mapsFull     *prometheus.CounterVec // slurm_job_id, map
	interpWalks  *prometheus.CounterVec
}

func newMetrics() metrics {
	return metrics{
		samples:      promschema.Counter(schema.AgentCPUSamples),
		unattributed: promschema.CounterVec(schema.AgentCPUSamplesUnattributed),
		lost:         promschema.CounterVec(schema.AgentCPUSamplesLost),
		cpus:         promschema.Gauge(schema.AgentSampledCPUs),
		mapsFull:     promschema.JobCounterVec(schema.AgentCPUMapsFull),
		interpWalks:  promschema.CounterVec(schema.AgentInterpWalks),
	}
}

// own are the metrics the source exports itself; the daemon exports
// samples and unattributed (source.Info).
func (m metrics) own() []prometheus.Collector {
	return []prometheus.Collector{m.lost, m.cpus, m.interpWalks, m.mapsFull}
}

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
	add("interpreter_stack_map_full", prev.InterpStackMapFull, cur.InterpStackMapFull)
	add("interpreter_share", prev.InterpShare, cur.InterpShare)
	for i := range cur.InterpWalks {
		st := bpf.InterpStatus(i) // #nosec G115 -- i indexes a short fixed array
		if c, p := cur.InterpWalks[i], prev.InterpWalks[i]; c > p && st != bpf.InterpNone {
			m.interpWalks.WithLabelValues(st.String()).Add(float64(c - p))
		}
	}
	m.cpus.Set(float64(cur.AttachedCPUs))
}

// programStats exports the sampling program's kernel-side cost. Only
// meaningful while kernel.bpf_stats_enabled=1 (the kernel does not time BPF
// programs otherwise); the bench command turns it on.
func programStats(s *Sampler) []prometheus.Collector { return ProgramMetrics(s.ProgramStats) }

// ProgramMetrics exports a BPF program's run time and runs, as the kernel
// counts them.
func ProgramMetrics(stats func() (ns, runs uint64, ok bool)) []prometheus.Collector {
	return []prometheus.Collector{
		promschema.CounterFunc(schema.AgentBPFRunTime, func() float64 { ns, _, _ := stats(); return float64(ns) / 1e9 }),
		promschema.CounterFunc(schema.AgentBPFRuns, func() float64 { _, n, _ := stats(); return float64(n) }),
	}
}
