package e2e

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/simjob"
)

// stackJob is one workload of the stack tests, in a job of its own.
type stackJob struct {
	name   string   // subtest name
	argv   []string // the workload
	env    []string
	before bool   // started before the agent (a process the agent finds running)
	prefix string // the profiles checked: "process_cpu-" or "gpu-"
	check  func(t *testing.T, r jobRun)
	// cpuCheck, for a job whose check is of GPU profiles, checks its CPU
	// profiles too.
	cpuCheck func(t *testing.T, r jobRun)
	id       string
	// leaf is the job's cgroup; cpuBefore its CPU time when the agent
	// started (a job started before it), cpu what it used in the agent's
	// life.
	leaf           string
	cpuBefore, cpu time.Duration
	// measured is what the workload measured itself: its stdout lines
	// "measured <what> <seconds of CPU>".
	measured sync.Map
}

// measuredCPU is the CPU time the workload said it spent in what.
func (j *stackJob) measuredCPU(what string) (time.Duration, bool) {
	v, ok := j.measured.Load(what)
	if !ok {
		return 0, false
	}
	return time.Duration(v.(float64) * float64(time.Second)), true
}

// sampledShare is the least share of its CPU time a job's CPU samples
// must stand for. A GPU job's launch probes take some: a timer sample that
// lands while the uprobe program runs on the CPU is not taken (the kernel
// runs one tracing program at a time per CPU; 0.853-0.907 measured for
// gpu_launch.py, which launches in a tight loop).
func (j *stackJob) sampledShare() float64 {
	if j.prefix == "gpu-" {
		return 0.8
	}
	return 0.9
}

// stackBins are the workloads built for the stack tests.
type stackBins struct {
	unwindc, unwindcxx string // -O2 -fomit-frame-pointer
	gpuDir             string // the GPU stand-ins and the injection library
}

// buildStackWorkloads builds the C and C++ workloads without frame
// pointers, and the GPU stand-ins, into dir.
func buildStackWorkloads(t *testing.T, dir string) stackBins {
	t.Helper()
	b := stackBins{unwindc: filepath.Join(dir, "unwindc"), unwindcxx: filepath.Join(dir, "unwindcxx"), gpuDir: filepath.Join(dir, "gpu")}
	for _, cmd := range []*exec.Cmd{
		exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-g", "-o", b.unwindc, "../internal/testenv/workloads/unwindc.c"),
		exec.Command("g++", "-O2", "-fomit-frame-pointer", "-g", "-o", b.unwindcxx, "../internal/testenv/workloads/unwindcxx.cc"),
		exec.Command("sh", "../gpuinject/build.sh", b.gpuDir),
		exec.Command("sh", "../internal/testenv/cudastandin/build.sh", b.gpuDir),
	} {
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
		}
	}
	return b
}

// nativeJobs are the C and C++ workloads, built without frame pointers.
func nativeJobs(b stackBins) []*stackJob {
	// CPU seconds: 1500-2000 samples at stackHz, for tight bounds on the
	// samples taken once each was set up.
	return []*stackJob{
		{name: "c-split", argv: []string{b.unwindc, "split", "4"}, check: checkCSplit},
		{name: "c-qsort", argv: []string{b.unwindc, "qsort", "3"}, check: checkQsort},
		{name: "cxx-exceptions", argv: []string{b.unwindcxx, "except", "3"}, check: checkExceptions},
		{name: "cxx-deep-recursion", argv: []string{b.unwindcxx, "deep", "4"}, check: checkDeep},
	}
}

// pythonJobs are the CPython workloads of one interpreter; all, or only the
// 70/30 split (a venv changes discovery, nothing else). Durations are CPU
// seconds (the workloads count process_time), so a loaded host slows the
// test down but leaves it the samples it needs (at 499 Hz, 500 a second).
func pythonJobs(py interp, b stackBins, all bool) []*stackJob {
	jobs := []*stackJob{{name: py.name + "/split", argv: []string{py.path, pyWorkload("split.py"), "4"}, check: checkPySplit}}
	if !all {
		return jobs
	}
	return append(jobs,
		// 2 s of CPU: about 330 samples in the hash thread.
		&stackJob{name: py.name + "/threads", argv: []string{py.path, pyWorkload("threads.py"), "2"}, check: checkPyThreads},
		&stackJob{name: py.name + "/recursion", argv: []string{py.path, pyWorkload("recurse.py"), "0.7"}, check: checkPyRecursion},
		&stackJob{name: py.name + "/asyncio", argv: []string{py.path, pyWorkload("asyncio_prog.py"), "1"}, check: checkPyAsyncio},
		// About 0.15 s of CPU each: the 16 workers live about 1.5 s
		// (more on a loaded host).
		&stackJob{name: py.name + "/pool", argv: []string{py.path, pyWorkload("pool.py"), "6000000"}, check: checkPyPool},
		&stackJob{name: py.name + "/command", argv: []string{py.path, "-c", pyCommand}, check: checkPyCommand},
		&stackJob{name: py.name + "/gpu-launches", prefix: "gpu-",
			argv: []string{py.path, pyWorkload("gpu_launch.py"), filepath.Join(b.gpuDir, "libcudart_standin.so"), "0.75"},
			env: []string{"CUDA_INJECTION64_PATH=" + filepath.Join(b.gpuDir, "libslurmscope_inject.so"),
				"SLURMSCOPE_CUPTI_PATH=" + filepath.Join(b.gpuDir, "mock", "libcupti.so")},
			check: pyGPUCheck(py), cpuCheck: pyGPUCPUCheck(py)},
	)
}

// TestStacks runs the real agent (its defaults: the .eh_frame unwinder and
// Python frames) over simulated job cgroups, one job per workload, and
// checks the profiles it writes: C and C++ built without frame pointers
// (callers, qsort callbacks, exceptions, a recursion cut at the frame
// limit), and for Debian's python3.11 (required) and every pyenv CPython
// 3.9-3.13 on the machine a 70/30 split, two threads, recursion past the
// frame limit, asyncio, a pool of 16 forked workers, a 2 s `python -c`, and
// a ctypes program launching kernels through the GPU stand-ins, whose GPU
// time must sit under the Python methods that launched them (qualified
// names on 3.11+); a process started before the agent; venvs; and a
// CPython older than 3.9, which must keep native stacks, counted.
func TestStacks(t *testing.T) {
	alone(t)
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	agent := buildAgent(t)
	work := t.TempDir()
	bins := buildStackWorkloads(t, work)
	ins := interpreters(t)

	// Debian's split runs from before the agent starts until it has had
	// 4 s of CPU under the agent (the agent takes 3-8 s to start: a fixed
	// budget could end before it, and did).
	first := &stackJob{name: "debian-3.11/started-before-the-agent", argv: []string{ins[0].path, pyWorkload("split.py"), "3600"},
		before: true, check: checkPySplit}
	jobs := []*stackJob{first}
	jobs = append(jobs, nativeJobs(bins)...)
	for _, in := range ins {
		jobs = append(jobs, pythonJobs(in, bins, true)...)
	}
	for _, in := range []interp{ins[0], ins[len(ins)-1]} {
		jobs = append(jobs, pythonJobs(venv(t, in, filepath.Join(work, in.name+"-venv")), bins, false)...)
	}
	// A CPython older than the walk knows keeps its native stacks.
	old := oldInterpreter(t)
	if old.path != "" {
		jobs = append(jobs, &stackJob{name: old.name + "/unsupported", argv: []string{old.path, pyWorkload("split.py"), "3"}, check: checkNoPython})
	}

	selected := os.Getenv("SLURMSCOPE_E2E_STACKS")
	if re := selected; re != "" {
		// A developer's shortcut: only the workloads whose names match.
		keep := regexp.MustCompile(re)
		jobs = slices.DeleteFunc(jobs, func(j *stackJob) bool { return !j.before && !keep.MatchString(j.name) })
	}
	r := newJobRunner(t, "slurmscope-e2e-stacks.slice")
	pre := r.start(first)
	out := evidenceDir(t, "slurmscope-stacks-")
	ag := startAgent(t, agent, "run", "--output-dir", out, "--upload-interval", "3s", "--node-name", "stacks",
		"--sample-rate", strconv.Itoa(stackHz), "--metrics-addr", "127.0.0.1:0", "--gpu-metrics=false", "--label-stack-setup", "--log-level", "debug",
		// The simulated jobs' slurmstepd.scope is in their slice, not
		// slurmd's /system.slice.
		"--slurm-cgroup-v2-parent", "/"+r.slice, "--slurm-cgroup-v1-parent", "/"+r.slice,
		"--gpu-inject-lib", filepath.Join(bins.gpuDir, "libslurmscope_inject.so"))
	// The agent samples by now: what the job uses from here is owed.
	var err error
	if first.cpuBefore, err = cgroupCPU(first.leaf); err != nil {
		t.Fatal(err)
	}
	r.stopAfterCPU(pre, first.cpuBefore+4*time.Second)
	// The other jobs start once the agent has loaded the one that ran
	// before it: its start-up (that job's tables and interpreter, every
	// file read for the first time) is that job's test, and would
	// otherwise fall in the first moments of the next two jobs.
	waitWarm(t, ag)
	// Two at a time (this host has two CPUs), except the pools: 16
	// workers would starve a neighbour of its samples.
	var pools, rest []*stackJob
	for _, j := range jobs[1:] {
		if strings.HasSuffix(j.name, "/pool") {
			pools = append(pools, j)
		} else {
			rest = append(rest, j)
		}
	}
	r.runAll(rest, 2)
	r.wait(pre)
	r.runAll(pools, 1)
	// One more interval: the last samples, and the records the stand-in
	// CUPTI flushed at exit.
	time.Sleep(4 * time.Second)
	metrics := ag.logMetrics(t, "slurmscope_agent_")
	ag.stop(t)
	// Its debug log (each sync's time, by pid) goes with the profiles,
	// kept if the test fails: set-up latency's outliers are read there.
	must(t, os.WriteFile(filepath.Join(out, "agent.log"), []byte(ag.log.String()), 0o600))

	for _, j := range jobs {
		t.Run(j.name, func(t *testing.T) {
			used, err := cgroupCPU(j.leaf)
			if err != nil {
				t.Fatal(err)
			}
			j.cpu = used - j.cpuBefore
			prefix := j.prefix
			if prefix == "" {
				prefix = "process_cpu-"
			}
			ss := readSamples(t, filepath.Join(out, j.id), prefix)
			if len(ss) == 0 {
				t.Fatalf("no %s profiles for job %s", prefix, j.id)
			}
			cpuRun := jobRun{ss: readSamples(t, filepath.Join(out, j.id), "process_cpu-"), cpu: j.cpu, hz: stackHz}
			checkSampled(t, cpuRun, j.sampledShare())
			j.check(t, jobRun{ss: ss, cpu: j.cpu, hz: stackHz, measured: j.measuredCPU})
			if j.cpuCheck != nil {
				j.cpuCheck(t, cpuRun)
			}
		})
	}
	t.Run("counted", func(t *testing.T) {
		if selected != "" {
			t.Skip("SLURMSCOPE_E2E_STACKS selected some jobs: the counters need them all")
		}
		pools := 0
		for _, j := range jobs {
			if strings.HasSuffix(j.name, "/pool") {
				pools++
			}
		}
		for _, c := range []struct {
			series string
			min    float64
			why    string
		}{
			{`slurmscope_agent_interpreter_frames_total{interpreter="python",result="truncated"}`, 1, "recursion past the frame limit"},
			// Half of each pool's 16 workers: a worker forked before the
			// agent has set its parent up is set up on its own (counted
			// by version; CI under load: 80 of 96 forked, bar was 84).
			{`slurmscope_agent_interpreter_processes_total{interpreter="python",version="forked"}`, float64(8 * pools), "forked pool workers set up from their parent"},
			{`slurmscope_agent_unwind_walks_total{end="frame_limit"}`, 100, "deep recursion cut at 127 frames"},
			{`slurmscope_agent_unwind_frames_total{how="table"}`, 1000, "frames unwound from tables"},
			{`slurmscope_agent_unwind_mode_info{mode="tables",reason="none"}`, 1, "unwinding from tables (this kernel has bpf_loop)"},
		} {
			if v := metricValue(metrics, c.series); v < c.min {
				t.Errorf("%s = %v, want >= %v (%s)", c.series, v, c.min, c.why)
			}
		}
		// How soon the agent set each new process up: a generous bound
		// (load makes it slow, and the shares above do not depend on it);
		// go run ./tools/bench/agent prints the figures.
		for _, part := range []string{"unwind_tables", "interpreter"} {
			n := metricValue(metrics, `slurmscope_agent_process_setup_seconds_count{part="`+part+`"}`)
			in10 := metricValue(metrics, `slurmscope_agent_process_setup_seconds_bucket{part="`+part+`",le="10"}`)
			t.Logf("%s: %v processes set up, %s", part, n, setupQuantiles(metrics, part))
			if n < float64(len(jobs)/2) || in10 != n {
				t.Errorf("%s: %v processes set up, %v of them within 10 s of their start; want all of at least %d", part, n, in10, len(jobs)/2)
			}
		}
		if old.path != "" {
			var v float64
			for _, r := range []string{"unknown_version", "unsupported"} {
				v += max(metricValue(metrics, `slurmscope_agent_interpreter_skipped_total{interpreter="python",reason="`+r+`"}`), 0)
			}
			if v < 1 {
				t.Errorf("%s: no process counted in interpreter_skipped_total as unknown_version or unsupported", old.name)
			}
		}
	})
}

// waitWarm waits up to 60 s until the agent has loaded a process's unwind
// tables and set up a CPython process, as it must for the job started
// before it.
func waitWarm(t *testing.T, ag *agentProc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := ag.metrics(t, "slurmscope_agent_")
		synced := metricValue(m, `slurmscope_agent_unwind_syncs_total{result="ok"}`)
		python := metricValue(m, `slurmscope_agent_interpreter_processes_total{interpreter="python",version="3.11"}`)
		if synced >= 1 && python >= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 60 s the agent loaded %v processes' tables and set up %v CPython 3.11 processes; want the job started before it", synced, python)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metricValue finds one series in scraped metric lines; -1 if absent.
func metricValue(lines []string, series string) float64 {
	for _, l := range lines {
		if name, val, ok := strings.Cut(l, " "); ok && name == series {
			v, _ := strconv.ParseFloat(val, 64)
			return v
		}
	}
	return -1
}

// setupQuantiles reads the median and the 90th percentile of the set-up
// time of part from agent_process_setup_seconds, to its buckets.
func setupQuantiles(lines []string, part string) string {
	prefix := `slurmscope_agent_process_setup_seconds_bucket{part="` + part + `",le="`
	type bucket struct{ le, n float64 }
	var bs []bucket
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			le, val, _ := strings.Cut(rest, `"} `)
			x, err1 := strconv.ParseFloat(le, 64)
			n, err2 := strconv.ParseFloat(val, 64)
			if err1 == nil && err2 == nil {
				bs = append(bs, bucket{x, n})
			}
		}
	}
	slices.SortFunc(bs, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	q := func(f float64) string {
		if len(bs) == 0 {
			return "?"
		}
		for _, b := range bs {
			if b.n >= f*bs[len(bs)-1].n {
				return fmt.Sprintf("<= %gs", b.le)
			}
		}
		return "?"
	}
	return "median " + q(0.5) + ", 90% " + q(0.9)
}

// jobRunner runs workloads in simulated jobs of their own.
type jobRunner struct {
	t     *testing.T
	slice string
	next  int
	mu    sync.Mutex
}

type runningJob struct {
	j       *stackJob
	cmd     *exec.Cmd
	done    chan error
	stopped atomic.Bool // by stopAfterCPU: its exit status is ours
}

func newJobRunner(t *testing.T, slice string) *jobRunner {
	return &jobRunner{t: t, slice: slice, next: 3100000 + os.Getpid()%1000*1000}
}

// start starts j in a new job cgroup (the process is born there:
// CLONE_INTO_CGROUP) and waits until it prints "ready". It reports errors
// with t.Errorf and returns nil, so that it may run on any goroutine.
func (r *jobRunner) start(j *stackJob) *runningJob {
	t := r.t
	r.mu.Lock()
	r.next++
	j.id = strconv.Itoa(r.next)
	r.mu.Unlock()
	job, err := simjob.Create(r.slice, j.id)
	if err != nil {
		t.Errorf("%s: %v", j.name, err)
		return nil
	}
	t.Cleanup(func() { job.Remove() })
	j.leaf = job.Leaf
	cg, err := unix.Open(job.Leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Errorf("%s: %v", j.name, err)
		return nil
	}
	defer unix.Close(cg)
	cmd := exec.Command(j.argv[0], j.argv[1:]...)
	cmd.Env = append(os.Environ(), append([]string{"SLURM_JOB_ID=" + j.id, "SLURM_JOB_NAME=" + j.name}, j.env...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Errorf("%s: %v", j.name, err)
		return nil
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Errorf("%s: %v", j.name, err)
		return nil
	}
	rj := &runningJob{j: j, cmd: cmd, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := false
		for sc.Scan() {
			if sc.Text() == "ready" && !once {
				once = true
				close(ready)
			}
			var what string
			var secs float64
			if n, _ := fmt.Sscanf(sc.Text(), "measured %s %g", &what, &secs); n == 2 {
				j.measured.Store(what, secs)
			}
		}
		io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, stderr.String())
		}
		if !once {
			close(ready)
		}
		rj.done <- err
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Errorf("%s did not start within a minute", j.name)
		cmd.Process.Kill()
	}
	return rj
}

// stopAfterCPU stops a job (SIGTERM) once its cgroup has used cpu.
func (r *jobRunner) stopAfterCPU(rj *runningJob, cpu time.Duration) {
	if rj == nil {
		return
	}
	go func() {
		for {
			if used, err := cgroupCPU(rj.j.leaf); err != nil || used >= cpu {
				rj.stopped.Store(true)
				rj.cmd.Process.Signal(syscall.SIGTERM)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

// wait waits for a started job to exit.
func (r *jobRunner) wait(rj *runningJob) {
	if rj == nil {
		return
	}
	select {
	case err := <-rj.done:
		if err != nil && !rj.stopped.Load() {
			r.t.Errorf("%s %s: %v", rj.j.name, strings.Join(rj.j.argv, " "), err)
		}
	case <-time.After(2 * time.Minute):
		r.t.Errorf("%s still runs after two minutes", rj.j.name)
		rj.cmd.Process.Kill()
		<-rj.done
	}
}

// runAll runs jobs to completion, at most parallel at a time (this host
// has two CPUs: each keeps about one).
func (r *jobRunner) runAll(jobs []*stackJob, parallel int) {
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.wait(r.start(j))
		}()
	}
	wg.Wait()
}
