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
	unresolved := []struct {
		n      uint64
		result string
	}{
		{st.CodeGone, "gone"}, {st.CodeUnreadable, "unreadable"}, {st.ReadBudgetExceeded, "read_budget"},
		{st.CodeRefused, "refused_mapping"}, {st.CodeNotResident, "not_resident"}, {st.Stalled, "stalled"},
		{st.CPUBudgetExceeded, "cpu_budget"},
	}
	var lost uint64
	for _, u := range unresolved {
		lost += u.n
	}
	with(schema.AgentInterpFrames, float64(st.Frames-min(st.Frames, lost)), "resolved")
	for _, u := range unresolved {
		with(schema.AgentInterpFrames, float64(u.n), u.result)
	}
	with(schema.AgentInterpFrames, float64(st.Truncated), "truncated")
	with(schema.AgentInterpCacheBytes, float64(st.CodeBytes))
}
