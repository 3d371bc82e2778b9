package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/gputrace"
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
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slurmscope_agent_cpu_samples_total", Help: "CPU samples taken by the eBPF sampler and drained."}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_cpu_samples_lost_total", Help: "CPU samples lost in the kernel (map_full), or kept without a stack (stack_error, stack_map_full)."}, []string{"reason"}),
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
		gpuTime: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slurmscope_agent_gpu_kernel_nanoseconds_total", Help: "GPU kernel time drained from the GPU tracer."}),
		gpuUnattributed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_gpu_kernel_nanoseconds_unattributed_total", Help: "GPU kernel time not put in any profile, by reason (exited, other_node, not_in_job)."}, []string{"reason"}),
		gpuLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_gpu_trace_lost_total", Help: "GPU tracer events lost (ring_buffer, bad_args, read_error, decode_error), launches without a stack (stack_error, expired_launch, evicted_launch) and names dropped (name)."}, []string{"reason"}),
		gpuFiles: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slurmscope_agent_gpu_trace_attached_files", Help: "Injection library files the GPU tracer is attached to."}),
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
