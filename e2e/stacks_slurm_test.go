package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
)

// TestStacksSlurm is TestStacks's two 70/30 splits in real SLURM jobs
// (cgroup v1, constrained; the agent's defaults): a C program built without frame
// pointers, whose leaf must keep its callers and main, and Debian's
// python3.11, whose samples must carry the script's Python functions.
func TestStacksSlurm(t *testing.T) {
	lane(t, &slurmLane)
	testenv.RequireIntegration(t, slurmtest.Needs(slurmtest.V1))
	agent := buildAgent(t)
	ctx := context.Background()
	// Constrained as production clusters run: jobacct_gather/cgroup makes
	// the cpuacct cgroup each job's CPU time is read from.
	c := slurmtest.StartT(t, slurmtest.Options{Mode: slurmtest.V1, Constrain: true})
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
		"--sample-rate", strconv.Itoa(stackHz), "--metrics-addr", "127.0.0.1:0", "--label-stack-setup")
	jobs := []struct {
		name, user, script string
		check              func(*testing.T, jobRun)
		id                 string
	}{
		// 4 s: a process's first samples, before the agent has loaded
		// its tables (about 0.1 s of CPU here under load), keep only
		// their leaf; a job lives long enough that they are few.
		{name: "c-split", user: "ssalice", script: unwindc + " split 4\n", check: checkCSplit},
		{name: "python-split", user: "ssbob", script: python + " " + script + " 2\n",
			check: func(t *testing.T, r jobRun) { checkPySplitOf(t, r, script) }},
	}
	for i := range jobs {
		if jobs[i].id, err = c.Sbatch(ctx, jobs[i].user, []string{"-J", jobs[i].name, "-w", profiledNode}, jobs[i].script+jobCPUScript(c)); err != nil {
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
			r := jobRun{ss: ss, cpu: jobCPU(t, c, j.id), hz: stackHz}
			checkSampled(t, r, 0.9)
			j.check(t, r)
		})
	}
}

// jobCPUScript ends a batch script: it prints the job's CPU time, from the
// cpuacct cgroup Slurm made for it (cgroup v1), for jobCPU to read.
func jobCPUScript(c *slurmtest.Cluster) string {
	return "cg=$(sed -n 's/^[0-9]*:[^:]*cpuacct[^:]*://p' /proc/self/cgroup)\n" +
		"echo \"job-cpu-ns $(cat " + c.V1Mount("cpuacct") + "${cg%%/step_*}/cpuacct.usage)\"\n"
}

// jobCPU reads what jobCPUScript printed into the job's output.
func jobCPU(t *testing.T, c *slurmtest.Cluster, id string) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.JobDir(), "slurm-"+id+".out"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "job-cpu-ns "); ok {
			ns, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("job %s: %q: %v", id, line, err)
			}
			return time.Duration(ns)
		}
	}
	t.Fatalf("job %s printed no CPU time:\n%s", id, b)
	return 0
}
