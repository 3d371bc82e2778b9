package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
)

// TestStacksSlurm is TestStacks's two 70/30 splits in real SLURM jobs
// (cgroup v1, the agent's defaults): a C program built without frame
// pointers, whose leaf must keep its callers and main, and Debian's
// python3.11, whose samples must carry the script's Python functions.
func TestStacksSlurm(t *testing.T) {
	testenv.RequireIntegration(t, slurmtest.Needs(slurmtest.V1))
	agent := buildAgent(t)
	ctx := context.Background()
	c := slurmtest.StartT(t, slurmtest.Options{Mode: slurmtest.V1})
	// The jobs run as the test users: their programs live in the job dir.
	unwindc := filepath.Join(c.JobDir(), "unwindc")
	if out, err := exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-g", "-o", unwindc, "../internal/testenv/workloads/unwindc.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	script := filepath.Join(c.JobDir(), "split.py")
	src, err := os.ReadFile(pyWorkload("split.py"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	python := interpreters(t)[0].path // Debian's

	out := evidenceDir(t, "slurmscope-stacks-slurm-")
	ag := startAgent(t, agent, "run", "--output-dir", out, "--upload-interval", "3s", "--node-name", profiledNode,
		"--sample-rate", "499", "--metrics-addr", "127.0.0.1:0")
	jobs := []struct {
		name, user, script string
		check              func(*testing.T, []sample)
		id                 string
	}{
		// 4 s: a process's first samples, before the agent has loaded
		// its tables (about 0.1 s of CPU here under load), keep only
		// their leaf; a job lives long enough that they are few.
		{name: "c-split", user: "ssalice", script: "exec " + unwindc + " split 4\n", check: checkCSplit},
		{name: "python-split", user: "ssbob", script: "exec " + python + " " + script + " 2\n",
			check: func(t *testing.T, ss []sample) { checkPySplitOf(t, ss, script) }},
	}
	for i := range jobs {
		if jobs[i].id, err = c.Sbatch(ctx, jobs[i].user, []string{"-J", jobs[i].name, "-w", profiledNode}, jobs[i].script); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range jobs {
		waitJobDone(t, c, j.id, 2*time.Minute)
	}
	time.Sleep(4 * time.Second) // the last interval
	ag.stop(t)
	for _, j := range jobs {
		t.Run(j.name, func(t *testing.T) {
			ss := readSamples(t, filepath.Join(out, j.id), "process_cpu-")
			if len(ss) == 0 {
				t.Fatalf("no profiles for job %s under %s", j.id, out)
			}
			j.check(t, ss)
		})
	}
}
