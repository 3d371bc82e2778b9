package attribution

import (
	"fmt"
	"strings"
	"testing"
)

func TestJobCgroups(t *testing.T) {
	r := newFixtureResolver(t, "testdata/proc", func(o *Options) { o.NodeName = "node-a" })
	if _, err := r.Scan(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range r.JobCgroups() {
		got[c.Job.Host+"/"+c.Job.ID] = fmt.Sprintf("v%d %s", c.Version, c.Dir)
	}
	for key, want := range map[string]string{
		"node-a/4242": "v2 /system.slice/slurmstepd.scope/job_4242",
		"node-a/4300": "v2 /system.slice/node-a_slurmstepd.scope/job_4300",
		"node-a/5000": "v1 /slurm/uid_1002/job_5000",
		"node-a/6000": "v2 /system.slice/slurmstepd.scope/s0W5FQ2XKD8Y3M",
	} {
		if got[key] != want {
			t.Errorf("%s: %q, want %q", key, got[key], want)
		}
	}
	// Another slurmd's jobs on this host are its agent's.
	for key := range got {
		if !strings.HasPrefix(key, "node-a/") {
			t.Errorf("%s is another node's job", key)
		}
	}
}
