package offcpu

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/agent/stackwalk"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/simjob"
)

// sleeper is a Python process that, once told to start, sleeps in many
// short naps and reports the time they took and its CPU time meanwhile.
const sleeper = `
import sys, time
print("ready", flush=True)
sys.stdin.readline()
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(150):
    time.sleep(0.01)
print(time.perf_counter() - t0, time.process_time() - c0, flush=True)
sys.stdin.readline()
`

// offCPU is the time the sleeper spent off its CPU, from its report: the
// naps' wall time less its CPU time, which the tracer rightly records
// none of. Its CPU time is no constant: 0.006-0.013 s here beside four
// busy loops or a compiler, while in one CI run the naps took 1.665 s and
// every switch but the last (151 of 152) recorded 1.555 s off CPU.
func offCPU(t *testing.T, line string) float64 {
	t.Helper()
	var wall, cpu float64
	if n, err := fmt.Sscanf(strings.TrimSpace(line), "%g %g", &wall, &cpu); n != 2 {
		t.Fatalf("the sleeper said %q: %v", line, err)
	}
	t.Logf("the sleeper's naps took %.3f s, %.3f s of it on its CPU", wall, cpu)
	return wall - cpu
}

// checkOffCPU checks what the tracer recorded of pid, blocked and
// runnable, against the time it measured off its CPU.
func checkOffCPU(t *testing.T, samples []Sample, pid int, measured float64) {
	t.Helper()
	var ns uint64
	for _, s := range samples {
		if s.Proc.PID == pid {
			ns += s.Ns
		}
	}
	if got := float64(ns) / 1e9; got < measured*0.97 || got > measured*1.10 {
		t.Errorf("recorded %.3f s off CPU (blocked and runnable), the process measured %.3f s", got, measured)
	}
}

// startSleeper starts the sleeper, stopped at its first read.
func startSleeper(t *testing.T) (*exec.Cmd, *bufio.Writer, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command("python3", "-c", sleeper)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(out)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	// Asleep in its read: that switch-out is before the test's start.
	for !asleep(t, cmd.Process.Pid) {
		runtime.Gosched()
	}
	return cmd, bufio.NewWriter(in), r
}

// asleep reports whether a process is in state S (blocked, switched out).
func asleep(t *testing.T, pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'S'
}

// newJob makes the n-th simulated job of the test and returns it with its
// job cgroup's id.
func newJob(t *testing.T, n int) (*simjob.Job, uint64) {
	t.Helper()
	job, err := simjob.Create("slurmscope-offcpu-test.slice", strconv.Itoa(os.Getpid()+n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Remove() })
	id, err := cgroupID(filepath.Dir(filepath.Dir(filepath.Dir(job.Leaf))))
	if err != nil {
		t.Fatal(err)
	}
	return job, id
}

func newTracer(t *testing.T, o Options) *Tracer {
	t.Helper()
	tr, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// TestIntegrationBlockedTime: a job's process that sleeps is recorded
// blocked, for the time it measured itself, with kernel stacks; a process
// outside the job, sleeping the same way, is not recorded.
func TestIntegrationBlockedTime(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("python3"))
	job, id := newJob(t, 0)
	tr := newTracer(t, Options{})
	if err := tr.AddJob(id, false, 1); err != nil {
		t.Fatal(err)
	}

	in, inW, inR := startSleeper(t)
	out, outW, outR := startSleeper(t)
	if err := job.Add(in.Process.Pid); err != nil {
		t.Fatal(err)
	}
	tr.Drain() // what came before the start
	var measured float64
	for _, p := range []struct {
		w *bufio.Writer
		r *bufio.Reader
	}{{inW, inR}, {outW, outR}} {
		p.w.WriteString("go\n")
		p.w.Flush()
		line, err := p.r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if measured == 0 {
			measured = offCPU(t, line)
		}
	}
	samples, st, err := tr.Drain()
	if err != nil {
		t.Fatal(err)
	}
	var blocked, runnable, switches, blockedSwitches, withKernel uint64
	for _, s := range samples {
		switch s.Proc.PID {
		case out.Process.Pid:
			t.Errorf("a process outside the job was recorded: %+v", s)
		case in.Process.Pid:
			switches += s.Switches
			if s.Runnable {
				runnable += s.Ns
				continue
			}
			blocked += s.Ns
			blockedSwitches += s.Switches
			if len(s.Kernel) > 0 {
				withKernel += s.Switches
			}
		}
	}
	t.Logf("measured %.3f s off CPU; recorded blocked %.3f s, runnable %.3f s in %d switches; %+v",
		measured, float64(blocked)/1e9, float64(runnable)/1e9, switches, st)
	checkOffCPU(t, samples, in.Process.Pid, measured)
	// Not one blocked switch per nap: a nap whose deadline passed while
	// the process waited for a CPU (a loaded host) returns at once.
	if blockedSwitches == 0 || withKernel != blockedSwitches {
		t.Errorf("%d blocked switches, %d with a kernel stack; want every one", blockedSwitches, withKernel)
	}
	if st.SampledOut != 0 {
		t.Errorf("%d switches sampled out at ~100 a second", st.SampledOut)
	}
}

// runDelay is a process's time runnable on a runqueue, waiting for a CPU,
// as the kernel accounts it (/proc/<pid>/schedstat, field 2).
func runDelay(t *testing.T, pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		t.Fatalf("schedstat %q", b)
	}
	n, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIntegrationRunnableTime: a job's busy process that shares its CPU
// with two others is recorded runnable for the time the kernel says it
// waited on the runqueue, and not blocked.
func TestIntegrationRunnableTime(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("taskset"))
	job, id := newJob(t, 1)
	tr := newTracer(t, Options{})
	if err := tr.AddJob(id, false, 1); err != nil {
		t.Fatal(err)
	}
	var busy []*exec.Cmd
	for range 3 {
		cmd := exec.Command("taskset", "-c", "0", "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		busy = append(busy, cmd)
	}
	pid := busy[0].Process.Pid
	if err := job.Add(pid); err != nil {
		t.Fatal(err)
	}
	tr.Drain()
	before := runDelay(t, pid)
	// Long enough for some hundreds of CFS slices.
	time.Sleep(2 * time.Second)
	samples, st, err := tr.Drain()
	if err != nil {
		t.Fatal(err)
	}
	waited := runDelay(t, pid) - before
	var runnable, blocked uint64
	for _, s := range samples {
		if s.Proc.PID != pid {
			t.Errorf("a process outside the job was recorded: %+v", s)
			continue
		}
		if s.Runnable {
			runnable += s.Ns
		} else {
			blocked += s.Ns
		}
	}
	t.Logf("the kernel says %.3f s on the runqueue; recorded runnable %.3f s, blocked %.3f s; %+v",
		float64(waited)/1e9, float64(runnable)/1e9, float64(blocked)/1e9, st)
	if r := float64(runnable) / float64(waited); waited == 0 || r < 0.9 || r > 1.1 {
		t.Errorf("runnable %d ns, the kernel's run delay %d ns", runnable, waited)
	}
	if blocked > runnable/20 {
		t.Errorf("a busy loop recorded %d ns blocked", blocked)
	}
}

// TestIntegrationOneJobCannotFillTheMaps: a job that makes many distinct
// count keys (hundreds of short sleeping processes) gets at most its share
// of a small counts map, and another job's sleeper keeps all its time.
func TestIntegrationOneJobCannotFillTheMaps(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("python3", "sh", "sleep"))
	var ids []uint64
	var jobs []*simjob.Job
	for i := range 2 {
		job, id := newJob(t, 2+i)
		ids, jobs = append(ids, id), append(jobs, job)
	}
	// A counts map of 64: each job may make 8 keys a generation.
	tr := newTracer(t, Options{MaxCountEntries: 64, MaxStackEntries: 64})
	for i, id := range ids {
		if err := tr.AddJob(id, false, uint32(i+1)); err != nil { // #nosec G115 -- 0 or 1
			t.Fatal(err)
		}
	}
	cg, err := os.Open(jobs[0].Leaf)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	// The hostile job: 200 processes, each its own key, born in its cgroup.
	storm := exec.Command("sh", "-c", "for i in $(seq 200); do sleep 0.01 & done; wait")
	storm.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	in, w, r := startSleeper(t)
	if err := jobs[1].Add(in.Process.Pid); err != nil {
		t.Fatal(err)
	}
	tr.Drain()
	if err := storm.Start(); err != nil {
		t.Fatal(err)
	}
	w.WriteString("go\n")
	w.Flush()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	measured := offCPU(t, line)
	if err := storm.Wait(); err != nil {
		t.Fatal(err)
	}
	samples, st, err := tr.Drain()
	if err != nil {
		t.Fatal(err)
	}
	var blocked uint64
	stormKeys := 0
	for _, s := range samples {
		if s.Proc.PID == in.Process.Pid {
			if !s.Runnable {
				blocked += s.Ns
			}
			continue
		}
		stormKeys++
	}
	t.Logf("the sleeper measured %.3f s off CPU, recorded %.3f s blocked; the storm has %d keys, %d switches lost to its share; %+v",
		measured, float64(blocked)/1e9, stormKeys, st.LostShare, st)
	if stormKeys > 8 || st.LostShare == 0 {
		t.Errorf("the storm has %d keys and lost %d to its share: want at most its 8, the rest lost", stormKeys, st.LostShare)
	}
	checkOffCPU(t, samples, in.Process.Pid, measured)
}

// TestIntegrationLoadsWithTheStackCapture: the program loads as the agent
// runs it, with the table unwinder and the Python walk of the stack
// capture: the verifier's bound is the program's whole path, every
// header's code inlined.
func TestIntegrationLoadsWithTheStackCapture(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	w, err := stackwalk.New(stackwalk.Options{Tables: true, Interpreters: []interp.Interpreter{python.CPython{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if !w.Tables() {
		t.Skipf("no table unwinder here: %s", w.FramePointerReason())
	}
	tr := newTracer(t, Options{Stacks: w})
	runNs, runs, _ := tr.ProgramStats()
	t.Logf("loaded; %d runs, %d ns", runs, runNs)
}

// TestIntegrationV1Job: a job whose processes Slurm put in a cgroup v1
// hierarchy (proctrack/cgroup's freezer) is traced by that hierarchy's
// job directory.
func TestIntegrationV1Job(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("python3"))
	ctrl, ssid := v1Controller(procfs.New(""), "/sys/fs/cgroup")
	if ssid < 0 {
		testenv.Unmet(t, "needs a cgroup v1 controller mounted under /sys/fs/cgroup (freezer, cpuacct, memory or cpuset)")
		return
	}
	dir := filepath.Join("/sys/fs/cgroup", ctrl, "slurmscope-offcpu-test", "uid_0", "job_"+strconv.Itoa(os.Getpid()))
	leaf := filepath.Join(dir, "step_0", "task_0")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for d := leaf; d != filepath.Join("/sys/fs/cgroup", ctrl); d = filepath.Dir(d) {
			os.Remove(d)
		}
	})
	id, err := cgroupID(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracer(t, Options{V1Subsys: ssid})
	if err := tr.AddJob(id, true, 1); err != nil {
		t.Fatal(err)
	}
	in, w, r := startSleeper(t)
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(in.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Process.Kill(); in.Wait() })
	tr.Drain()
	w.WriteString("go\n")
	w.Flush()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	measured := offCPU(t, line)
	samples, st, err := tr.Drain()
	if err != nil {
		t.Fatal(err)
	}
	var blocked uint64
	for _, s := range samples {
		if s.Proc.PID == in.Process.Pid && !s.Runnable {
			blocked += s.Ns
		}
	}
	t.Logf("%s v1 job: measured %.3f s off CPU, recorded %.3f s blocked; %+v", ctrl, measured, float64(blocked)/1e9, st)
	checkOffCPU(t, samples, in.Process.Pid, measured)
}
