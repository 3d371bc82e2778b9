package gpu

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/slurmscope/slurmscope/agent/gpu/devcg"
)

// The device-program cache keeps the programs of the jobs that still run:
// a node runs thousands of jobs a day, each with its own program.
func TestPruneProgs(t *testing.T) {
	now := time.Unix(10000, 0)
	progs := map[ebpf.ProgramID]*devcg.Program{1: {}, 2: {}, 3: {}}
	used := map[ebpf.ProgramID]time.Time{1: now.Add(-time.Hour), 2: now.Add(-time.Second)} // 3: never recorded
	pruneProgs(progs, used, now.Add(-progTTL))
	if len(progs) != 1 || progs[2] == nil || len(used) != 1 {
		t.Errorf("after pruning: programs %v, used %v; want only 2", progs, used)
	}
}
