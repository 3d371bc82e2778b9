package jobinfo

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/schema"
)

type fakeJobs []*attribution.Job

func (f fakeJobs) Jobs() []*attribution.Job { return f }

func TestCollectorExportsThisNodesJobs(t *testing.T) {
	c := New(fakeJobs{
		{ID: "4242", Name: `train "llama" ✓`, User: "bob", Host: "node-a",
			Meta: map[string]string{schema.JobAccount.Name: "physics", schema.JobPartition.Name: "gpu"}},
		{ID: "4300", Name: "other-node", User: "alice", Host: "node-b"},
	}, "node-a")
	want := `# HELP slurmscope_job_info A SLURM job with a process on this node (value 1).
# TYPE slurmscope_job_info gauge
slurmscope_job_info{host_name="node-a",slurm_job_account="physics",slurm_job_id="4242",slurm_job_name="train \"llama\" ✓",slurm_job_partition="gpu",slurm_job_qos="",slurm_job_user="bob"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}
