package daemon

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/cpu"
)

func TestObserveSamplerLostReasons(t *testing.T) {
	m := newMetrics()
	prev := cpu.Stats{LostMapFull: 1, KernelStackErrors: 1, UserStackMapFull: 2}
	cur := cpu.Stats{LostMapFull: 4, KernelStackErrors: 2, UserStackErrors: 3, KernelStackMapFull: 5, UserStackMapFull: 9, AttachedCPUs: 3}
	m.observeSampler(prev, cur)
	for reason, want := range map[string]float64{"map_full": 3, "stack_error": 4, "stack_map_full": 12} {
		if got := testutil.ToFloat64(m.lost.WithLabelValues(reason)); got != want {
			t.Errorf("lost{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.lost); n != 3 {
		t.Errorf("%d lost reasons, want 3", n)
	}
	if got := testutil.ToFloat64(m.cpus); got != 3 {
		t.Errorf("sampled cpus %v", got)
	}
}
