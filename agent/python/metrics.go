package python

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// Collectors are the tracker's metrics, read from its counters at each
// scrape.
func (t *Tracker) Collectors() []prometheus.Collector { return []prometheus.Collector{collector{t}} }

type collector struct{ t *Tracker }

var metricDefs = []schema.Metric{schema.AgentInterpProcesses, schema.AgentInterpSkipped, schema.AgentInterpFrames, schema.AgentInterpCacheBytes}

var descs = func() map[string]*prometheus.Desc {
	out := map[string]*prometheus.Desc{}
	for _, m := range metricDefs {
		out[m.Name] = promschema.Desc(m, "", false)
	}
	return out
}()

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	name := CPython{}.Name()
	emit := func(m schema.Metric, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(descs[m.Name], promschema.ValueType(m), v, append([]string{name}, labels...)...)
	}
	st := c.t.Stats()
	for v, n := range st.Found {
		emit(schema.AgentInterpProcesses, float64(n), v)
	}
	emit(schema.AgentInterpProcesses, float64(st.Forked), "forked")
	for r, n := range st.Skipped {
		emit(schema.AgentInterpSkipped, float64(n), r)
	}
	emit(schema.AgentInterpFrames, float64(st.Frames-min(st.Frames, st.CodeGone+st.ReadBudgetExceeded+st.CodeUnreadable)), "resolved")
	emit(schema.AgentInterpFrames, float64(st.CodeGone), "gone")
	emit(schema.AgentInterpFrames, float64(st.CodeUnreadable), "unreadable")
	emit(schema.AgentInterpFrames, float64(st.ReadBudgetExceeded), "read_budget")
	emit(schema.AgentInterpFrames, float64(st.Truncated), "truncated")
	emit(schema.AgentInterpCacheBytes, float64(st.CodeBytes))
}
