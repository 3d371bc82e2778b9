package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

type metrics struct {
	samples      prometheus.Counter
	lost         *prometheus.CounterVec
	unattributed *prometheus.CounterVec
	profiles     *prometheus.CounterVec
	payloadBytes prometheus.Counter
	errors       *prometheus.CounterVec
	cpus         prometheus.Gauge

	gpuTime         prometheus.Counter
	gpuUnattributed *prometheus.CounterVec
	gpuLost         *prometheus.CounterVec
	gpuFiles        prometheus.Gauge
}

func newMetrics() metrics {
	return metrics{
		samples:         promschema.Counter(schema.AgentCPUSamples),
		lost:            promschema.CounterVec(schema.AgentCPUSamplesLost),
		unattributed:    promschema.CounterVec(schema.AgentCPUSamplesUnattributed),
		profiles:        promschema.CounterVec(schema.AgentProfiles),
		payloadBytes:    promschema.Counter(schema.AgentProfileBytes),
		errors:          promschema.CounterVec(schema.AgentErrors),
		cpus:            promschema.Gauge(schema.AgentSampledCPUs),
		gpuTime:         promschema.Counter(schema.AgentGPUKernelTime),
		gpuUnattributed: promschema.CounterVec(schema.AgentGPUKernelTimeUnattributed),
		gpuLost:         promschema.CounterVec(schema.AgentGPUTraceLost),
		gpuFiles:        promschema.Gauge(schema.AgentGPUTraceAttachedFiles),
	}
}

func (m metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.samples, m.lost, m.unattributed, m.profiles, m.payloadBytes, m.errors, m.cpus,
		m.gpuTime, m.gpuUnattributed, m.gpuLost, m.gpuFiles}
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
	add("stack_map_full", prev.KernelStackMapFull+prev.UserStackMapFull, cur.KernelStackMapFull+cur.UserStackMapFull)
	m.cpus.Set(float64(cur.AttachedCPUs))
}

// observeGPU turns the GPU tracer's running totals into counter increments.
func (m metrics) observeGPU(prev, cur gputrace.Stats) {
	add := func(reason string, p, c uint64) {
		if c > p {
			m.gpuLost.WithLabelValues(reason).Add(float64(c - p))
		}
	}
	add("ring_buffer", prev.LostRingBuffer, cur.LostRingBuffer)
	add("bad_args", prev.BadArgs, cur.BadArgs)
	add("read_error", prev.ReadErrors, cur.ReadErrors)
	add("decode_error", prev.DecodeErrors, cur.DecodeErrors)
	add("stack_error", prev.StackErrors, cur.StackErrors)
	add("expired_launch", prev.ExpiredLaunches, cur.ExpiredLaunches)
	add("evicted_launch", prev.EvictedLaunches, cur.EvictedLaunches)
	add("name", prev.RejectedNames+prev.DroppedNames, cur.RejectedNames+cur.DroppedNames)
	m.gpuFiles.Set(float64(cur.AttachedFiles))
}
