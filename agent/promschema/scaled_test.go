package promschema

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/schema"
)

// Nanoseconds added one at a time, a billion of them in awkward pieces,
// export as exactly the seconds they sum to.
func TestScaledCounterIsExact(t *testing.T) {
	c := NewScaledCounter(schema.AgentGPUKernelTime, 1e9)
	var f float64 // what a float counter of seconds would say
	for i := range 1_000_000 {
		ns := float64(999 + 2*(i%2)) // 999, 1001, 999, ... ns
		c.Add(ns)
		f += ns / 1e9
	}
	if got := testutil.ToFloat64(c); got != 1.0 {
		t.Errorf("exported %.17g s, want exactly 1", got)
	}
	if f == 1.0 {
		t.Log("(a float counter happened to be exact too)")
	}
	if c.Units() != 1_000_000_000 {
		t.Errorf("units %d", c.Units())
	}
	v := NewScaledCounterVec(schema.AgentGPUKernelTimeUnattributed, 1e9)
	v.WithLabelValues("exited").Add(1.5e9)
	v.WithLabelValues("exited").Add(0.5e9)
	v.WithLabelValues("not_in_job").Add(3)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(v, c)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 3 {
		t.Fatalf("gathered %d series: %v", n, err)
	}
	if got := testutil.ToFloat64(v.WithLabelValues("exited")); got != 2 {
		t.Errorf("exited = %v s, want 2", got)
	}
}
