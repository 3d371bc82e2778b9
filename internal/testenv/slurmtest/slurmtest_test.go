package slurmtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// TestClusterPlacesJobsInCgroups checks the harness itself, without the
// agent: a batch job with an srun step lands in the cgroups the harness
// reports, and /proc/<pid>/cgroup agrees, in both modes, one after the
// other in one process (so Stop must leave the host clean).
func TestClusterPlacesJobsInCgroups(t *testing.T) {
	for _, mode := range []Mode{V1, V2} {
		t.Run(mode.String(), func(t *testing.T) {
			testenv.RequireIntegration(t, Needs(mode))
			c := StartT(t, Options{Mode: mode})
			ctx := context.Background()
			id, err := c.Sbatch(ctx, "ssalice", []string{"-J", "harness", "-N2"}, "srun sleep 300 &\nsleep 300\n")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.WaitState(ctx, id, "RUNNING", 30*time.Second); err != nil {
				t.Fatal(err)
			}
			var procs []Proc
			deadline := time.Now().Add(30 * time.Second)
			for {
				procs, err = c.JobProcs(id)
				if err != nil {
					t.Fatal(err)
				}
				if stepsOnNodes(procs, "0") == len(c.NodeNames()) && stepsOnNodes(procs, "batch") == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("job %s: want step 0 tasks on every node and a batch step, got %+v", id, procs)
				}
				time.Sleep(200 * time.Millisecond)
			}
			for _, p := range procs {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.PID))
				if err != nil {
					continue // exited since
				}
				want := ":" + p.Cgroup + "\n"
				if !strings.Contains(string(b), want) {
					t.Errorf("pid %d (%s): /proc/%d/cgroup lacks %q:\n%s", p.PID, p.Comm, p.PID, want, b)
				}
				// The whole file, for turning into agent fixtures.
				t.Logf("%s pid %d %s uid %d step %q: %s", p.Node, p.PID, p.Comm, p.UID, p.Step, strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", " | "))
			}
		})
	}
}

// stepsOnNodes counts the nodes with a non-slurmstepd process in step.
func stepsOnNodes(procs []Proc, step string) int {
	nodes := map[string]bool{}
	for _, p := range procs {
		if p.Step == step && !p.Stepd {
			nodes[p.Node] = true
		}
	}
	return len(nodes)
}
