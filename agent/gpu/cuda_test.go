package gpu

import (
	"fmt"
	"testing"

	"github.com/slurmscope/slurmscope/schema"
)

func TestVisibleIndex(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		ordinal uint32
		want    string
	}{
		{map[string]string{EnvVisibleGPUs: "2,3"}, 1, "[{" + schema.GPUIndex.Label + " 3}]"},
		{map[string]string{EnvVisibleGPUs: "2,3"}, 2, "[]"},
		{map[string]string{EnvVisibleGPUs: "GPU-abc"}, 0, "[]"},
		{map[string]string{EnvVisibleGPUs: "x"}, 0, "[]"},
		{map[string]string{EnvJobGPUs: "1"}, 0, "[]"}, // never guess from Slurm's ids alone
		{nil, 0, "[]"},
	} {
		if got := fmt.Sprint(VisibleIndex(tc.env, tc.ordinal)); got != tc.want {
			t.Errorf("VisibleIndex(%v, %d) = %s, want %s", tc.env, tc.ordinal, got, tc.want)
		}
	}
}

func TestCUDADeviceBeforeFirstPoll(t *testing.T) {
	var c Collector
	if l := c.CUDADevice(map[string]string{EnvVisibleGPUs: "0"}, 0); l != nil {
		t.Errorf("labels %v before any poll", l)
	}
}
