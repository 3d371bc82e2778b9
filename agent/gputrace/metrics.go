package gputrace

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

type metrics struct {
	// GPU time is counted in integer nanoseconds, exported in seconds.
	gpuTime      *promschema.ScaledCounter
	unattributed *promschema.ScaledCounterVec
	lost         *prometheus.CounterVec
	files        prometheus.Gauge
	// Per job: time the library stood aside, processes with another
	// injection library.
	steppedAside, otherInjection *prometheus.CounterVec
}

func newMetrics() metrics {
	return metrics{
		gpuTime:        promschema.NewScaledCounter(schema.AgentGPUKernelTime, 1e9),
		unattributed:   promschema.NewScaledCounterVec(schema.AgentGPUKernelTimeUnattributed, 1e9),
		lost:           promschema.CounterVec(schema.AgentGPUTraceLost),
		files:          promschema.Gauge(schema.AgentGPUTraceAttachedFiles),
		steppedAside:   promschema.JobCounterVec(schema.AgentGPUTraceSteppedAside),
		otherInjection: promschema.JobCounterVec(schema.AgentGPUTraceOtherInjection),
	}
}

// own are the metrics the source exports itself; the daemon exports
// gpuTime and unattributed (source.Info).
func (m metrics) own() []prometheus.Collector {
	return []prometheus.Collector{m.lost, m.files, m.steppedAside, m.otherInjection}
}

// observe turns the tracer's running totals into counter increments.
func (m metrics) observe(prev, cur Stats) {
	add := func(reason string, p, c uint64) {
		if c > p {
			m.lost.WithLabelValues(reason).Add(float64(c - p))
		}
	}
	add("ring_buffer", prev.LostRingBuffer, cur.LostRingBuffer)
	add("bad_args", prev.BadArgs, cur.BadArgs)
	add("rate_limited", prev.RateLimited, cur.RateLimited)
	add("read_error", prev.ReadErrors, cur.ReadErrors)
	add("decode_error", prev.DecodeErrors, cur.DecodeErrors)
	add("stack_error", prev.StackErrors, cur.StackErrors)
	add("expired_launch", prev.ExpiredLaunches, cur.ExpiredLaunches)
	add("evicted_launch", prev.EvictedLaunches, cur.EvictedLaunches)
	add("name", prev.RejectedNames+prev.DroppedNames, cur.RejectedNames+cur.DroppedNames)
	add("over_budget", prev.OverBudgetLaunches+prev.OverBudgetNames, cur.OverBudgetLaunches+cur.OverBudgetNames)
	add("folded", prev.FoldedRecords, cur.FoldedRecords)
	m.files.Set(float64(cur.AttachedFiles))
}
