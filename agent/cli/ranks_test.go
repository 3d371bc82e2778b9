package cli

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/slurmscope/slurmscope/schema"
)

// --rank-labels, on by default, has the resolver read each job process's
// rank and the daemon put it on samples; off, neither.
func TestRankLabelsFlag(t *testing.T) {
	root := t.TempDir()
	d := filepath.Join(root, "4100")
	files := map[string]string{
		"stat":    "4100 (python3) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0\n",
		"cgroup":  "0::/system.slice/slurmstepd.scope/job_41/step_0/user/task_2\n",
		"status":  "Uid:\t1001\t1001\t1001\t1001\n",
		"environ": "SLURM_JOB_ID=41\x00SLURM_PROCID=2\x00RANK=18\x00SLURM_NODEID=2\x00",
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(d, 0o755))
	for name, body := range files {
		must(os.WriteFile(filepath.Join(d, name), []byte(body), 0o644))
	}
	for _, tc := range []struct {
		args       []string
		rank, node string
	}{
		{nil, "18", "2"},
		{[]string{"--rank-labels=false"}, "", ""},
	} {
		fs, f := runFlagSet(t)
		must(fs.Parse(append(append([]string{"--proc-root", root, "--passwd", fixturePasswd}, fixtureCgroups(t, root)...), tc.args...)))
		res, err := f.resolver(slog.New(slog.DiscardHandler))
		must(err)
		procs, err := res.Scan()
		must(err)
		if len(procs) != 1 || !procs[0].InJob() {
			t.Fatalf("%v: %+v", tc.args, procs)
		}
		p := procs[0]
		if p.Rank != tc.rank || p.NodeIndex != tc.node || p.Value(schema.TaskLocalID) != "2" {
			t.Errorf("%v: rank %q, node %q, local id %q; want %q, %q, 2", tc.args, p.Rank, p.NodeIndex, p.Value(schema.TaskLocalID), tc.rank, tc.node)
		}
		if got := f.daemonConfig(nil, nil).RankLabels; got != (tc.rank != "") {
			t.Errorf("%v: the daemon's RankLabels %v", tc.args, got)
		}
	}
}
