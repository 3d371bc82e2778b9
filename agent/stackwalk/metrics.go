package stackwalk

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/agent/unwind"
	"github.com/slurmscope/slurmscope/schema"
)

var metricDefs = []schema.Metric{
	schema.AgentUnwindMode, schema.AgentUnwindWalks, schema.AgentUnwindFrames, schema.AgentUnwindTableBytes, schema.AgentUnwindBudget,
	schema.AgentUnwindProcesses, schema.AgentUnwindFiles, schema.AgentUnwindSyncs, schema.AgentStackForksRefused,
	schema.AgentUnwindShareRefused,
}

// collector reads the unwinder's and the lifecycle's counters at each
// scrape.
func (w *Walker) collector() prometheus.Collector {
	return promschema.Reader(metricDefs, w.readMetrics)
}

func (w *Walker) readMetrics(emit func(m schema.Metric, v float64, labels ...string)) {
	if w.tables {
		emit(schema.AgentUnwindMode, 1, "tables", "none")
	} else {
		emit(schema.AgentUnwindMode, 1, "frame_pointer", w.fpReason)
	}
	if m := w.shared["stack_stats"]; m != nil {
		var perCPU []uint64
		for share, idx := range map[string]uint32{"process": bpf.StackStatForkShare, "job": bpf.StackStatForkJobShare} {
			if err := m.Lookup(idx, &perCPU); err == nil {
				var n uint64
				for _, v := range perCPU {
					n += v
				}
				emit(schema.AgentStackForksRefused, float64(n), share)
			}
		}
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
		built := st.TablesBuilt - st.BuildErrors - st.FramePointerFiles - st.TablesOverBudget - st.BuildsDeferred
		for res, n := range map[string]uint64{"built": built, "frame_pointer": st.FramePointerFiles, "error": st.BuildErrors,
			"over_budget": st.TablesOverBudget, "open_error": st.OpenErrors, "deferred": st.BuildsDeferred} {
			emit(schema.AgentUnwindFiles, float64(n), res)
		}
		for k, n := range l.ShareRefusals() {
			emit(schema.AgentUnwindShareRefused, float64(n), budget.OwnerJob(k.Owner), string(k.Share))
		}
		m := w.life.counters()
		syncs, errs := m.syncs, m.syncErrors
		emit(schema.AgentUnwindSyncs, float64(syncs-min(errs, syncs)), "ok")
		emit(schema.AgentUnwindSyncs, float64(errs), "error")
	}
}
