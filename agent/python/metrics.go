package python

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// Collectors are the tracker's metrics, read from its counters at each
// scrape.
func (t *Tracker) Collectors() []prometheus.Collector {
	return []prometheus.Collector{promschema.Reader(metricDefs, t.readMetrics)}
}

var metricDefs = []schema.Metric{schema.AgentInterpProcesses, schema.AgentInterpSkipped, schema.AgentInterpFrames, schema.AgentInterpCacheBytes}

func (t *Tracker) readMetrics(emit func(m schema.Metric, v float64, labels ...string)) {
	name := CPython{}.Name()
	with := func(m schema.Metric, v float64, labels ...string) { emit(m, v, append([]string{name}, labels...)...) }
	st := t.Stats()
	for v, n := range st.Found {
		with(schema.AgentInterpProcesses, float64(n), v)
	}
	with(schema.AgentInterpProcesses, float64(st.Forked), "forked")
	for r, n := range st.Skipped {
		with(schema.AgentInterpSkipped, float64(n), r)
	}
	with(schema.AgentInterpFrames, float64(st.Frames-min(st.Frames, st.CodeGone+st.ReadBudgetExceeded+st.CodeUnreadable)), "resolved")
	with(schema.AgentInterpFrames, float64(st.CodeGone), "gone")
	with(schema.AgentInterpFrames, float64(st.CodeUnreadable), "unreadable")
	with(schema.AgentInterpFrames, float64(st.ReadBudgetExceeded), "read_budget")
	with(schema.AgentInterpFrames, float64(st.Truncated), "truncated")
	with(schema.AgentInterpCacheBytes, float64(st.CodeBytes))
}
