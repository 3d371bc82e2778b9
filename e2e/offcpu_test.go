package e2e

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/simjob"
	"github.com/slurmscope/slurmscope/schema"
)

// offCPUJob is a workload that blocks in wait_a and wait_b, 70/30, and
// says how long it measured itself blocked in each.
type offCPUJob struct {
	name     string
	argv     []string
	python   bool // the functions are Python's
	id, leaf string
	cmd      *exec.Cmd
	go_      io.WriteCloser
	out      *bufio.Scanner
	measured map[string]float64
}

// TestOffCPU: the off-CPU profile of a C job built without frame pointers
// and of a Python job, each blocking 70% of its blocked time in wait_a and
// 30% in wait_b (a sleep, and a pipe read or a queue get fed by a
// thread), gives those shares within 5 points, under their callers, and a
// total within 10% of the time the jobs measured themselves.
func TestOffCPU(t *testing.T) {
	lane(t, &simLane)
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("gcc", "python3"))
	agent := buildAgent(t)
	work := t.TempDir()
	bin := filepath.Join(work, "offcpu")
	if out, err := exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-g", "-pthread", "-o", bin,
		"../internal/testenv/workloads/offcpu.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	slice := "slurmscope-e2e-offcpu.slice"
	out := evidenceDir(t, "slurmscope-offcpu-")
	ag := startAgent(t, agent, "run", "--output-dir", out, "--upload-interval", "3s", "--node-name", "offcpu",
		"--metrics-addr", "127.0.0.1:0", "--gpu-metrics=false", "--label-stack-setup",
		"--slurm-cgroup-v2-parent", "/"+slice, "--slurm-cgroup-v1-parent", "/"+slice)
	// 300 rounds of 10 ms: 3 s blocked each.
	jobs := []*offCPUJob{
		{name: "c", argv: []string{bin, "300"}},
		{name: "python", argv: []string{"python3", pyWorkload("offcpu.py"), "300"}, python: true},
	}
	base := 3300000 + os.Getpid()%1000*100
	for i, j := range jobs {
		j.id = strconv.Itoa(base + i)
		startOffCPUJob(t, slice, j)
	}
	// Both jobs' cgroups are traced before they start blocking: the agent
	// finds a job's processes at its rescan (or when they run).
	deadline := time.Now().Add(60 * time.Second)
	for metricValue(ag.metrics(t, "slurmscope_agent_offcpu_cgroups"), "slurmscope_agent_offcpu_cgroups") < float64(len(jobs)) {
		if time.Now().After(deadline) {
			t.Fatal("the off-CPU probe did not trace both jobs' cgroups within 60 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, j := range jobs {
		fmt.Fprintln(j.go_, "go")
	}
	for _, j := range jobs {
		j.measured = map[string]float64{}
		for j.out.Scan() {
			var what string
			var secs float64
			if n, _ := fmt.Sscanf(j.out.Text(), "measured %s %g", &what, &secs); n == 2 {
				j.measured[what] = secs
			}
		}
		if err := j.cmd.Wait(); err != nil {
			t.Fatalf("%s: %v", j.name, err)
		}
	}
	// One more interval: the last switches.
	time.Sleep(4 * time.Second)
	metrics := ag.logMetrics(t, "slurmscope_agent_offcpu")
	ag.stop(t)
	for _, j := range jobs {
		t.Run(j.name, func(t *testing.T) {
			checkOffCPU(t, j, readSamples(t, filepath.Join(out, j.id), schema.OffCPU.Name+"-"))
		})
	}
	if v := metricValue(metrics, "slurmscope_agent_offcpu_switches_total"); v < 600 {
		t.Errorf("slurmscope_agent_offcpu_switches_total = %v, want at least the 600 waits", v)
	}
}

// startOffCPUJob starts j in a new job cgroup and waits for its "ready";
// it blocks reading its stdin until the test writes "go".
func startOffCPUJob(t *testing.T, slice string, j *offCPUJob) {
	t.Helper()
	job, err := simjob.Create(slice, j.id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Remove() })
	j.leaf = job.Leaf
	cg, err := unix.Open(job.Leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cg)
	j.cmd = exec.Command(j.argv[0], j.argv[1:]...)
	j.cmd.Env = append(os.Environ(), "SLURM_JOB_ID="+j.id, "SLURM_JOB_NAME=offcpu-"+j.name)
	j.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg}
	j.cmd.Stderr = os.Stderr
	if j.go_, err = j.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := j.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.cmd.Process.Kill() })
	j.out = bufio.NewScanner(stdout)
	if !j.out.Scan() || j.out.Text() != "ready" {
		t.Fatalf("%s did not say ready", j.name)
	}
}

// checkOffCPU holds a job's off-CPU samples to what it measured.
func checkOffCPU(t *testing.T, j *offCPUJob, ss []sample) {
	if len(ss) == 0 {
		t.Fatal("no off_cpu profiles")
	}
	const blocked = 2 // switches, runnable, blocked
	in := func(s sample, fn string) bool {
		if j.python {
			for _, f := range s.python() {
				if f.fn == fn {
					return true
				}
			}
			return false
		}
		return s.has(fn)
	}
	var a, b, both float64
	for _, s := range ss {
		// Blocked and runnable switches of one stack share a sample:
		// each time is a sample type of its own.
		if len(s.vals) != 3 {
			t.Fatalf("a sample with values %v: want switches, runnable and blocked time", s.vals)
		}
		ns := float64(s.vals[blocked]) / 1e9
		switch {
		case in(s, "wait_a") && in(s, "wait_b"):
			both += ns
		case in(s, "wait_a"):
			a += ns
			if !callers(s, j.python) {
				t.Errorf("wait_a without its callers: %v", s.names())
			}
		case in(s, "wait_b"):
			b += ns
		}
	}
	ma, mb := j.measured["wait_a"], j.measured["wait_b"]
	t.Logf("blocked in wait_a %.3f s, wait_b %.3f s (measured %.3f, %.3f)", a, b, ma, mb)
	if ma == 0 || mb == 0 || both != 0 {
		t.Fatalf("measured %v; %.3f s under both functions", j.measured, both)
	}
	share, want := a/(a+b), ma/(ma+mb)
	if math.Abs(share-want) > 0.05 {
		logTop(t, "off-CPU stacks", ss)
		t.Errorf("wait_a's share of the blocked time %.3f, the job measured %.3f", share, want)
	}
	if got, m := a+b, ma+mb; got < m*0.9 || got > m*1.1 {
		logTop(t, "off-CPU stacks", ss)
		t.Errorf("%.3f s blocked in wait_a and wait_b, the job measured %.3f s", got, m)
	}
}

// callers reports whether a wait_a sample goes on to its callers: run <
// main (C), main < <module> (Python).
func callers(s sample, python bool) bool {
	if python {
		names := []string{}
		for _, f := range s.python() {
			names = append(names, f.fn)
		}
		return strings.Contains(strings.Join(names, " < "), "wait_a < main < <module>")
	}
	return s.index("wait_a") < s.index("run") && s.index("run") < s.index("main")
}
