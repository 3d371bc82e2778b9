package nvtx

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

var metricDefs = []schema.Metric{schema.AgentNVTXEvents}

// Collectors are the NVTX capture's metrics, read at each scrape from
// names' counters and, when tr is not nil, its probes' and the capture's.
func Collectors(names *Names, tr *Tracker) []prometheus.Collector {
	return []prometheus.Collector{promschema.Reader(metricDefs, func(emit func(m schema.Metric, v float64, labels ...string)) {
		ev := func(v uint64, event string) { emit(schema.AgentNVTXEvents, float64(v), event) }
		st := names.Stats()
		ev(st.Names, "names")
		ev(st.Invalid, "names_refused")
		ev(st.PerProcessFull+st.AllFull, "names_over_cap")
		ev(st.Refused, "names_over_budget")
		ev(st.Unnamed, "ranges_unnamed")
		var probes, capture []uint64
		if tr != nil {
			probes, _ = tr.ProbeStats()
			capture, _ = tr.CaptureStats()
		}
		at := func(s []uint64, i uint32) uint64 {
			if int(i) < len(s) {
				return s[i]
			}
			return 0
		}
		ev(at(probes, uint32(probesNvtxProbeStatNVTX_PROBE_LOST_RINGBUF)), "names_lost")
		ev(at(probes, uint32(probesNvtxProbeStatNVTX_PROBE_RATE_LIMITED)), "calls_rate_limited")
		ev(at(capture, bpf.NVTXStatRead), "structs_read")
		ev(at(capture, bpf.NVTXStatReadFailed), "structs_unreadable")
		ev(at(capture, bpf.NVTXStatInvalid), "structs_invalid")
		ev(at(capture, bpf.NVTXStatOtherTID), "structs_other_thread")
		ev(at(capture, bpf.NVTXStatTruncated), "ranges_truncated")
	})}
}
