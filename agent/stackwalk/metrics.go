package stackwalk

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/agent/unwind"
	"github.com/slurmscope/slurmscope/schema"
)

type collector struct{ w *Walker }

var metricDefs = []schema.Metric{
	schema.AgentUnwindMode, schema.AgentUnwindWalks, schema.AgentUnwindFrames, schema.AgentUnwindTableBytes, schema.AgentUnwindBudget,
	schema.AgentUnwindProcesses, schema.AgentUnwindFiles, schema.AgentUnwindSyncs,
}

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
	emit := func(m schema.Metric, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(descs[m.Name], promschema.ValueType(m), v, labels...)
	}
	w := c.w
	if w.tables {
		emit(schema.AgentUnwindMode, 1, "tables", "none")
	} else {
		emit(schema.AgentUnwindMode, 1, "frame_pointer", w.fpReason)
	}
	if l := w.loader; l != nil {
		if cs, err := l.Counters(); err == nil {
			for i, name := range unwind.EndReasons {
				emit(schema.AgentUnwindWalks, float64(cs.Ends[i]), name)
			}
			for how, n := range map[string]uint64{"table": cs.FramesTable, "frame_pointer": cs.FramesFramePointer,
				"unknown_mapping": cs.FramesUnknownMapping, "evicted_table": cs.FramesEvictedTable, "signal": cs.SignalFrames,
				"unloaded_process": cs.ProcessUnknown, "forked": cs.Forked} {
				emit(schema.AgentUnwindFrames, float64(n), how)
			}
		}
		st := l.Stats()
		emit(schema.AgentUnwindTableBytes, float64(st.TableBytes))
		emit(schema.AgentUnwindBudget, float64(st.TableBudgetBytes))
		emit(schema.AgentUnwindProcesses, float64(st.Processes))
		built := st.TablesBuilt - st.BuildErrors - st.FramePointerFiles - st.TablesOverBudget
		for res, n := range map[string]uint64{"built": built, "frame_pointer": st.FramePointerFiles, "error": st.BuildErrors,
			"over_budget": st.TablesOverBudget, "open_error": st.OpenErrors} {
			emit(schema.AgentUnwindFiles, float64(n), res)
		}
		m := w.life.counters()
		syncs, errs := m.syncs, m.syncErrors
		emit(schema.AgentUnwindSyncs, float64(syncs-min(errs, syncs)), "ok")
		emit(schema.AgentUnwindSyncs, float64(errs), "error")
	}
}
