package daemon

import (
	"context"
	"fmt"
	"testing"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/schema"
)

// With RankLabels each sample of a job's process carries its task's rank,
// local id and node index beside its step, each only where known; no
// profile's series labels carry them, and a process in no job has none.
// Off, samples carry the step alone.
func TestRankLabelsOnSamples(t *testing.T) {
	job := &attribution.Job{ID: "77", Name: "ddp", User: "bob", UID: 1001, Host: "node-a"}
	res := &fakeRes{procs: map[int]attribution.Process{
		10: {ID: proc(10, 100), Comm: "python3", Host: "node-a", Step: "0", Task: "0", Rank: "8", NodeIndex: "1", Job: job},
		11: {ID: proc(11, 110), Comm: "python3", Host: "node-a", Step: "0", Task: "1", Rank: "9", NodeIndex: "1", Job: job},
		// Nothing known of its task: task_special, its environment unread.
		12: {ID: proc(12, 120), Comm: "sleep", Host: "node-a", Step: "extern", Task: "special", Job: job},
		30: {ID: proc(30, 300), Comm: "sshd", Host: "node-a", Task: "0", Rank: "5", NodeIndex: "0"},
	}}
	samples := []source.Sample{cpuSample(proc(10, 100), 2, nil, 1), cpuSample(proc(11, 110), 3, nil, 1),
		cpuSample(proc(10, 100), 1, nil, 2), cpuSample(proc(12, 120), 1, nil, 1), cpuSample(proc(30, 300), 4, nil, 1)}
	task := func(rank, local string) string {
		return fmt.Sprintf("%s=1 %s=%s %s=%s", schema.NodeIndex.Label, schema.TaskLocalID.Label, local, schema.TaskRank.Label, rank)
	}
	for on, want := range map[bool]map[string][2]int64{
		true: {
			"[0] [" + task("8", "0") + "] [fn1]": {2, 2e7},
			"[0] [" + task("8", "0") + "] [fn2]": {1, 1e7},
			"[0] [" + task("9", "1") + "] [fn1]": {3, 3e7},
			"[extern] [] [fn1]":                  {1, 1e7},
		},
		false: {
			"[0] [] [fn1]":      {5, 5e7},
			"[0] [] [fn2]":      {1, 1e7},
			"[extern] [] [fn1]": {1, 1e7},
		},
	} {
		sink := &memSink{}
		d := New(Config{RankLabels: on, AllProcesses: true}, []source.Source{cpuLike(samples)}, &fakeSym{}, res, sink)
		if err := d.Collect(context.Background()); err != nil {
			t.Fatal(err)
		}
		profs := byJob(t, sink.outs, profiles.CPU)
		if got := sums(profs["77"]); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("RankLabels %v: samples\n%v\nwant\n%v", on, got, want)
		}
		if got := sums(profs[""]); fmt.Sprint(got) != fmt.Sprint(map[string][2]int64{"[] [] [fn1]": {4, 4e7}}) {
			t.Errorf("RankLabels %v: the process in no job: %v", on, got)
		}
		for _, o := range sink.outs {
			for _, l := range o.Labels {
				if l.Name == schema.TaskRank.Label || l.Name == schema.TaskLocalID.Label || l.Name == schema.NodeIndex.Label {
					t.Errorf("RankLabels %v: job %q has series label %s=%s", on, o.JobID, l.Name, l.Value)
				}
			}
		}
	}
}
