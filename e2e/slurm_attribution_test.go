// Package e2e holds slurmscope's end-to-end tests against real services.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
	"github.com/slurmscope/slurmscope/schema"
)

// jobName has quotes and non-ASCII so that quoting anywhere between
// sbatch, the job's environment, the agent and its JSON shows up.
const jobName = `train "llama" ✓`

// TestSlurmAttribution runs slurmscope-agent's `jobs` command against real
// jobs on a real local SLURM (two slurmds on this host), for cgroup v1 and
// v2, and compares its answer with the jobs' cgroup trees and squeue.
func TestSlurmAttribution(t *testing.T) {
	lane(t, &slurmLane)
	for _, mode := range []slurmtest.Mode{slurmtest.V1, slurmtest.V2} {
		t.Run(mode.String(), func(t *testing.T) {
			testenv.RequireIntegration(t, slurmtest.Needs(mode))
			testAttribution(t, mode, buildAgent(t))
		})
	}
}

// buildAgent builds ./agent/cmd/slurmscope-agent into t's temp dir (the
// build cache makes the second build cheap), or takes the binary named by
// SLURMSCOPE_AGENT, to test a release build.
func buildAgent(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLURMSCOPE_AGENT"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("SLURMSCOPE_AGENT: %v", err)
		}
		return p
	}
	// Built once for all the tests (each link took 2-5 s of CPU).
	agentBuild.once.Do(func() {
		bin := filepath.Join(binDir, "slurmscope-agent")
		cmd := exec.Command("go", "build", "-o", bin, "./agent/cmd/slurmscope-agent")
		cmd.Dir = ".." // the module root; tests run in their package's directory
		if out, err := cmd.CombinedOutput(); err != nil {
			agentBuild.err = fmt.Sprintf("building slurmscope-agent: %v\n%s", err, out)
			return
		}
		agentBuild.path = bin
	})
	if agentBuild.err != "" {
		t.Fatal(agentBuild.err)
	}
	return agentBuild.path
}

var agentBuild struct {
	once      sync.Once
	path, err string
}

func testAttribution(t *testing.T, mode slurmtest.Mode, agent string) {
	ctx := context.Background()
	c := slurmtest.StartT(t, slurmtest.Options{Mode: mode})
	nodes := c.NodeNames()
	if len(nodes) < 2 {
		t.Fatalf("need two nodes, have %v", nodes)
	}

	// A batch job with an srun step (step 0) beside the batch script.
	named, err := c.Sbatch(ctx, "ssalice", []string{"-J", jobName}, "srun sleep 300 &\nsleep 300\nwait\n")
	if err != nil {
		t.Fatal(err)
	}
	array, err := c.Sbatch(ctx, "ssbob", []string{"-J", "array", "--array=1-2"}, "sleep 300\n")
	if err != nil {
		t.Fatal(err)
	}
	twoNode, err := c.Sbatch(ctx, "ssbob", []string{"-J", "two-node", "-N2"}, "srun sleep 300\n")
	if err != nil {
		t.Fatal(err)
	}

	jobs := map[string]slurmtest.Job{} // by the job id of the job or array task
	for _, id := range []string{named, array, twoNode} {
		js, err := c.WaitState(ctx, id, "RUNNING", 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range js {
			jobs[j.JobID] = j
		}
	}
	var arrayTasks []string
	for id, j := range jobs {
		if j.ArrayJobID == array {
			arrayTasks = append(arrayTasks, id)
		}
	}
	sort.Strings(arrayTasks)
	if len(arrayTasks) != 2 || arrayTasks[0] == arrayTasks[1] {
		t.Fatalf("array %s: want two tasks with their own job ids, squeue shows %v", array, arrayTasks)
	}
	if got := jobs[twoNode].Nodes; len(got) != 2 {
		t.Fatalf("job %s: want two nodes, squeue shows %v", twoNode, got)
	}
	t.Logf("jobs: named %s, array %s (tasks %v), two-node %s", named, array, arrayTasks, twoNode)

	// Wait until every job's tasks have started, so the trees are steady.
	waitTruth(t, c, jobs, func(procs map[int]slurmtest.Proc) bool {
		return hasTask(procs, named, "batch", "", "sleep") && hasTask(procs, named, "0", "", "sleep") &&
			hasTask(procs, arrayTasks[0], "batch", "", "sleep") && hasTask(procs, arrayTasks[1], "batch", "", "sleep") &&
			hasTask(procs, twoNode, "0", nodes[0], "sleep") && hasTask(procs, twoNode, "0", nodes[1], "sleep")
	})

	// A login shell that inherited a real job's variables, outside any job.
	impostor, err := c.StartAs("ssalice", []string{
		"SLURM_JOB_ID=" + named, "SLURM_JOBID=" + named, "SLURM_JOB_NAME=" + jobName,
		"SLURM_JOB_USER=ssbob", "SLURM_JOB_PARTITION=" + slurmtest.Partition,
	}, "sleep", "300")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { impostor.Process.Kill(); impostor.Wait() })

	truth := snapshot(t, c, jobs)
	logTruth(t, truth)
	v := verifier{t: t, jobs: jobs, named: named, impostor: impostor.Process.Pid}

	t.Run("all-nodes", func(t *testing.T) {
		v := v.with(t)
		recs := v.runAgent(agent, "jobs", "--json")
		v.check(recs, v.stable(truth, snapshot(t, c, jobs)), "")
		steps := v.stepsOf(recs, named)
		for _, s := range []string{"batch", "0", "extern"} {
			if !steps[s] {
				t.Errorf("job %s: agent reports steps %v, want %q among them", named, keys(steps), s)
			}
		}
		seen := map[string]bool{}
		for _, r := range recs {
			if id := r.str(schema.JobID.Name); jobs[id].ArrayJobID == array {
				seen[id] = true
			}
		}
		if got := keys(seen); strings.Join(got, ",") != strings.Join(arrayTasks, ",") {
			t.Errorf("array %s: agent reports job ids %v, squeue's task JobIds are %v", array, got, arrayTasks)
		}
	})
	covered := map[int]string{}
	for _, n := range nodes {
		t.Run("node-name="+n, func(t *testing.T) {
			v := v.with(t)
			recs := v.runAgent(agent, "jobs", "--json", "--node-name", n)
			v.check(recs, v.stable(truth, snapshot(t, c, jobs)), n)
			for _, r := range recs {
				if r.str(schema.JobID.Name) == twoNode {
					covered[r.pid] = n
				}
			}
		})
	}
	t.Run("two-node-coverage", func(t *testing.T) {
		for _, p := range truth {
			if p.JobID == twoNode && !p.Stepd && alive(p.PID) {
				if n, ok := covered[p.PID]; !ok {
					t.Errorf("job %s: pid %d (%s, %s on %s) reported by neither --node-name run", twoNode, p.PID, p.Comm, p.Cgroup, p.Node)
				} else if n != p.Node {
					t.Errorf("job %s: pid %d on %s reported by --node-name %s", twoNode, p.PID, p.Node, n)
				}
			}
		}
	})
	t.Run("slurmctld", func(t *testing.T) {
		// The agent asks the test cluster's slurmctld, found through
		// SLURM_CONF as on any node; a failed lookup is a warning on stderr.
		v := v.with(t)
		v.env = []string{"SLURM_CONF=" + c.ConfPath()}
		recs := v.runAgentStrict(agent, "jobs", "--json", "--slurmctld")
		v.check(recs, v.stable(truth, snapshot(t, c, jobs)), "")
		for _, r := range recs {
			if r.str(schema.JobID.Name) == named && r.str(schema.JobPartition.Name) != slurmtest.Partition {
				t.Errorf("pid %d: partition %q, want %q", r.pid, r.str(schema.JobPartition.Name), slurmtest.Partition)
			}
		}
	})
	t.Run("all-processes", func(t *testing.T) {
		v := v.with(t)
		recs := v.runAgent(agent, "jobs", "--json", "--all")
		for _, r := range recs {
			if r.pid == v.impostor && r.str(schema.JobID.Name) != "" {
				t.Errorf("--all: pid %d is in no job (it only inherited SLURM_JOB_ID=%s) but the agent gives it %s=%q",
					r.pid, named, schema.JobID.Name, r.str(schema.JobID.Name))
			}
		}
		if len(recs) <= len(truth) {
			t.Errorf("--all listed %d processes, no more than the %d in jobs", len(recs), len(truth))
		}
	})
}

// record is one line of `slurmscope-agent jobs --json`.
type record struct {
	pid  int
	raw  string
	vals map[string]any
}

func (r record) str(key string) string {
	s, _ := r.vals[key].(string)
	return s
}

type verifier struct {
	t        *testing.T
	jobs     map[string]slurmtest.Job
	named    string
	impostor int
	env      []string // added to the agent's
}

func (v verifier) with(t *testing.T) verifier { v.t = t; return v }

// runAgent runs the agent and parses its output, holding every line to the
// JSON contract: one object per line, an integral "pid", string values for
// everything else, and keys without a value left out rather than empty.
func (v verifier) runAgent(agent string, args ...string) []record {
	v.t.Helper()
	recs, _ := v.runAgentStderr(agent, args...)
	return recs
}

// runAgentStrict also fails on any warning the agent prints.
func (v verifier) runAgentStrict(agent string, args ...string) []record {
	v.t.Helper()
	recs, stderr := v.runAgentStderr(agent, args...)
	if strings.Contains(stderr, "slurmctld") {
		v.t.Errorf("slurmscope-agent %s warned: %s", strings.Join(args, " "), stderr)
	}
	return recs
}

func (v verifier) runAgentStderr(agent string, args ...string) ([]record, string) {
	t := v.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, agent, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if v.env != nil {
		cmd.Env = append(os.Environ(), v.env...)
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("slurmscope-agent %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var recs []record
	s := bufio.NewScanner(&stdout)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		line := s.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		d := json.NewDecoder(strings.NewReader(line))
		d.UseNumber()
		vals := map[string]any{}
		if err := d.Decode(&vals); err != nil || d.More() {
			t.Errorf("agent line is not one JSON object: %q (%v)", line, err)
			continue
		}
		r := record{raw: line, vals: vals}
		n, ok := vals["pid"].(json.Number)
		if !ok {
			t.Errorf(`agent line without a numeric "pid": %s`, line)
			continue
		}
		pid, err := strconv.Atoi(n.String())
		if err != nil || pid <= 0 {
			t.Errorf(`agent line with a bad "pid" %s: %s`, n, line)
			continue
		}
		r.pid = pid
		for k, val := range vals {
			if k == "pid" {
				continue
			}
			if s, ok := val.(string); !ok {
				t.Errorf("agent line: %q is %T, want a string: %s", k, val, line)
			} else if s == "" {
				t.Errorf("agent line: %q is empty; keys without a value must be left out: %s", k, line)
			}
		}
		recs = append(recs, r)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("slurmscope-agent %s: %d lines", strings.Join(args, " "), len(recs))
	return recs, stderr.String()
}

// check compares the agent's records with the truth. With node set (the
// agent ran with --node-name), only that node's processes may appear.
func (v verifier) check(recs []record, truth map[int]slurmtest.Proc, node string) {
	t := v.t
	t.Helper()
	byPID := map[int]record{}
	for _, r := range recs {
		if _, dup := byPID[r.pid]; dup {
			t.Errorf("pid %d listed twice", r.pid)
		}
		byPID[r.pid] = r
	}
	if r, ok := byPID[v.impostor]; ok {
		t.Errorf("pid %d is in no job (it only inherited SLURM_JOB_ID=%s in its environment) but is listed: %s", v.impostor, v.named, r.raw)
	}
	// Everything listed must really be in the job it is attributed to.
	for _, r := range recs {
		id := r.str(schema.JobID.Name)
		if id == "" {
			t.Errorf("pid %d listed without %s (no --all): %s", r.pid, schema.JobID.Name, r.raw)
			continue
		}
		p, ok := truth[r.pid]
		if !ok {
			if _, known := v.jobs[id]; known && alive(r.pid) {
				t.Errorf("pid %d attributed to job %s but is not in its cgroup tree (%s): %s", r.pid, id, cgroupOf(r.pid), r.raw)
			}
			continue // another job's, or gone since
		}
		if node != "" && p.Node != node {
			t.Errorf("--node-name %s: pid %d belongs to node %s (%s) but is listed: %s", node, r.pid, p.Node, p.Cgroup, r.raw)
			continue
		}
		v.compare(r, p)
	}
	// Everything in a job step (on this node) must be listed.
	for _, p := range truth {
		if p.Stepd || (node != "" && p.Node != node) {
			continue
		}
		if _, ok := byPID[p.PID]; !ok {
			t.Errorf("pid %d (%s, uid %d) in job %s step %q on %s is not listed; its cgroup: %s", p.PID, p.Comm, p.UID, p.JobID, p.Step, p.Node, p.Cgroup)
		}
	}
}

// compare holds one record to the process's cgroup and squeue's job.
func (v verifier) compare(r record, p slurmtest.Proc) {
	t := v.t
	t.Helper()
	j := v.jobs[p.JobID]
	want := map[string]string{
		schema.JobID.Name:    p.JobID,
		schema.JobUser.Name:  j.User, // the job's owner, even for root's slurmstepd and extern sleep
		schema.HostName.Name: p.Node,
	}
	if !p.Stepd {
		want[schema.JobStep.Name] = p.Step
		want[schema.JobName.Name] = j.Name
	}
	for k, w := range want {
		if got := r.str(k); got != w {
			t.Errorf("pid %d (%s, uid %d, cgroup %s): %s = %q, want %q; line: %s", p.PID, p.Comm, p.UID, p.Cgroup, k, got, w, r.raw)
		}
	}
	// Optional, but right when present.
	for k, w := range map[string]string{schema.JobPartition.Name: j.Partition, schema.JobAccount.Name: j.Account} {
		if got, ok := r.vals[k]; ok && got != w {
			t.Errorf("pid %d (job %s): %s = %q, squeue says %q; line: %s", p.PID, p.JobID, k, got, w, r.raw)
		}
	}
	if p.Stepd {
		if got := r.str(schema.JobStep.Name); got != "" && p.Step != "" && got != p.Step {
			t.Errorf("slurmstepd pid %d (cgroup %s): %s = %q, want %q", p.PID, p.Cgroup, schema.JobStep.Name, got, p.Step)
		}
	}
}

func (v verifier) stepsOf(recs []record, id string) map[string]bool {
	steps := map[string]bool{}
	for _, r := range recs {
		if r.str(schema.JobID.Name) == id && r.str(schema.JobStep.Name) != "" {
			steps[r.str(schema.JobStep.Name)] = true
		}
	}
	return steps
}

// stable keeps the processes seen, in the same cgroup, before and after
// the agent ran: short-lived helpers may come and go in between.
func (v verifier) stable(before, after map[int]slurmtest.Proc) map[int]slurmtest.Proc {
	out := map[int]slurmtest.Proc{}
	for pid, p := range before {
		if q, ok := after[pid]; ok && q.Cgroup == p.Cgroup {
			out[pid] = p
		}
	}
	return out
}

// snapshot reads every job's cgroup tree.
func snapshot(t *testing.T, c *slurmtest.Cluster, jobs map[string]slurmtest.Job) map[int]slurmtest.Proc {
	t.Helper()
	all := map[int]slurmtest.Proc{}
	for id := range jobs {
		procs, err := c.JobProcs(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			all[p.PID] = p
		}
	}
	return all
}

func waitTruth(t *testing.T, c *slurmtest.Cluster, jobs map[string]slurmtest.Job, ready func(map[int]slurmtest.Proc) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		procs := snapshot(t, c, jobs)
		if ready(procs) {
			return
		}
		if time.Now().After(deadline) {
			logTruth(t, procs)
			t.Fatalf("jobs' tasks did not all start; logs in %s", c.LogDir())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hasTask reports whether job has a process named comm in step (on node,
// if set) that is not slurmstepd.
func hasTask(procs map[int]slurmtest.Proc, job, step, node, comm string) bool {
	for _, p := range procs {
		if p.JobID == job && p.Step == step && !p.Stepd && p.Comm == comm && (node == "" || p.Node == node) {
			return true
		}
	}
	return false
}

func logTruth(t *testing.T, procs map[int]slurmtest.Proc) {
	t.Helper()
	pids := make([]int, 0, len(procs))
	for pid := range procs {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		p := procs[pid]
		t.Logf("truth: job %s node %s pid %d %s uid %d step %q stepd %v: %s", p.JobID, p.Node, p.PID, p.Comm, p.UID, p.Step, p.Stepd, p.Cgroup)
	}
}

func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

func cgroupOf(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", " | ")
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
