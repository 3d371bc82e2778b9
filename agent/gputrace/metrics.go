package gputrace

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	gpuTime      prometheus.Counter
	unattributed *prometheus.CounterVec
	lost         *prometheus.CounterVec
	files        prometheus.Gauge
}

func newMetrics() metrics {
	return metrics{
		gpuTime: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slurmscope_agent_gpu_kernel_nanoseconds_total", Help: "GPU kernel time drained from the GPU tracer."}),
		unattributed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_gpu_kernel_nanoseconds_unattributed_total", Help: "GPU kernel time not put in any profile, by reason (exited, other_node, not_in_job)."}, []string{"reason"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slurmscope_agent_gpu_trace_lost_total", Help: "GPU tracer events lost (ring_buffer, bad_args, read_error, decode_error), launches without a stack (stack_error, expired_launch, evicted_launch) and names dropped (name)."}, []string{"reason"}),
		files: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slurmscope_agent_gpu_trace_attached_files", Help: "Injection library files the GPU tracer is attached to."}),
	}
}

// own are the metrics the source exports itself; the daemon exports
// gpuTime and unattributed (source.Info).
func (m metrics) own() []prometheus.Collector { return []prometheus.Collector{m.lost, m.files} }

// observe turns the tracer's running totals into counter increments.
func (m metrics) observe(prev, cur Stats) {
	add := func(reason string, p, c uint64) {
		if c > p {
			m.lost.WithLabelValues(reason).Add(float64(c - p))
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
	m.files.Set(float64(cur.AttachedFiles))
}
