// Command agent measures the agent's cost: it runs a fixed CPU load on every
// CPU inside a simulated SLURM job (a real cgroup v2 job directory), profiles
// it with the real agent for --duration, and prints the agent's CPU time as a
// share of the CPU time profiled, the BPF program's run time per sample, the
// agent's peak RSS and the profile bytes per interval. Needs root.
//
//	go run ./tools/bench/agent --duration 60s
//
// --beside runs a shell command inside the same job while the load runs
// (and the agent profiles it), to see what the agent costs beside real
// work with many short processes and files:
//
//	go run ./tools/bench/agent --duration 60s --beside 'go build -a -o /dev/null ./...'
//
// --load picks the busy processes: go (a Go spinner, frame pointers), c
// (a C split built -O2 -fomit-frame-pointer: the .eh_frame unwinder's
// case), python (split.py under --python, Python frames), torch (a
// PyTorch CPU training loop, one thread: Debian's python3-torch) or churn
// (--churn-rate /bin/true and --churn-python `python3 -c pass` a second
// beside one busy C process: shell pipelines, workflow managers) or
// switches (two threads passing a byte through pipes, --switch-rate
// context switches a second: the off-CPU profile's cost; run it again
// with --agent-flags=--offcpu-profiling=false beside); --procs
// how many busy processes (default one per CPU) and --agent-flags extra
// agent flags, so that the same load runs with and without a feature side
// by side:
//
//	go run ./tools/bench/agent --load c --agent-flags=--unwind=fp
//	go run ./tools/bench/agent --load c
//	go run ./tools/bench/agent --load python --procs 32
//
// --vs runs another profiler alone on the same load after the agent and
// prints both side by side as ratios: CPU share (steady and whole run),
// CPU per new process (--load churn), peak RSS and BPF time per sample,
// the latter from the kernel's stats of each tool's own BPF programs.
// Give the agent --all-processes when the other profiles every process:
//
//	go run ./tools/bench/agent --load churn --agent-flags=--all-processes --vs '/path/to/other-profiler -flags'
//
// --agent-cpu-profile writes the agent's own Go CPU profile of the steady
// state (served with --debug.pprof), for where its time goes.
//
// Besides the whole run it prints the steady state: the agent's CPU after
// the first quarter of the run or the first drain, whichever is later,
// against the CPU profiled then.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/slurmscope/slurmscope/internal/testenv/simjob"
	"github.com/slurmscope/slurmscope/schema"
)

const loadEnv = "SLURMSCOPE_BENCH_LOAD"

func main() {
	switch os.Getenv(loadEnv) {
	case "1":
		spin()
	case "churn":
		churn()
	}
	duration := flag.Duration("duration", 60*time.Second, "how long to profile")
	interval := flag.Duration("interval", 15*time.Second, "the agent's --upload-interval")
	rate := flag.Int("sample-rate", 97, "the agent's --sample-rate")
	beside := flag.String("beside", "", "a shell command to run in the job beside the load (e.g. a go build)")
	vs := flag.String("vs", "", "another profiler's command line, run alone on the same load after the agent and measured the same way; prints both and their ratios")
	var o loadOpts
	flag.StringVar(&o.kind, "load", "go", "busy processes: go, c (built -O2 -fomit-frame-pointer), python, torch (a PyTorch CPU training loop), churn (short processes beside one busy C process) or switches (a pipe ping-pong at --switch-rate)")
	flag.IntVar(&o.procs, "procs", 0, "how many busy processes (default one per CPU; 1 with --load churn)")
	flag.IntVar(&o.churnRate, "churn-rate", 200, "--load churn: /bin/true processes started a second")
	flag.IntVar(&o.churnPython, "churn-python", 1, "--load churn: python3 -c processes started a second")
	flag.IntVar(&o.switchRate, "switch-rate", 10000, "--load switches: context switches a second")
	flag.StringVar(&o.python, "python", "/usr/bin/python3.11", "the interpreter of --load python")
	agentFlags := flag.String("agent-flags", "", "extra flags for the agent, space-separated (e.g. --unwind=fp)")
	flag.StringVar(&o.cpuProfile, "agent-cpu-profile", "", "write the agent's own Go CPU profile of the steady state to this file (go tool pprof reads it)")
	flag.StringVar(&o.allocProfile, "agent-alloc-profile", "", "write the agent's Go allocation profile of the whole run, taken at its end, to this file (go tool pprof -sample_index=alloc_space)")
	flag.Parse()
	if o.procs == 0 {
		o.procs = runtime.NumCPU()
		if o.kind == "churn" || o.kind == "switches" {
			o.procs = 1
		}
	}
	o.agentFlags = strings.Fields(*agentFlags)
	if err := bench(config{duration: *duration, interval: *interval, rate: *rate, beside: *beside, vs: *vs}, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// spin burns one CPU until killed.
func spin() {
	x := 0
	for {
		for i := 0; i < 1<<20; i++ {
			x += i ^ (x >> 3)
		}
		if x == 42 {
			fmt.Println(x)
		}
	}
}

// churnEnv carries the churn driver's settings: rate, Python rate, count file.
const churnEnv = "SLURMSCOPE_BENCH_CHURN"

// churn starts short processes at a steady rate until killed: rate
// /bin/true a second and pyRate `python3 -c pass` a second, each waited
// for, writing how many it has started to a file every 100 ms. It waits
// for a line on stdin first, so that it is in the job's cgroup before its
// first child.
func churn() {
	var rate, pyRate int
	var count string
	fmt.Sscanf(os.Getenv(churnEnv), "%d %d %s", &rate, &pyRate, &count)
	bufio.NewReader(os.Stdin).ReadString('\n')
	// The system's python3: not a version manager's shim, which would
	// start a shell and more for each.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	started := 0
	tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
	lastPy, lastWrite := time.Now(), time.Now()
	for range tick.C {
		if rate > 0 && exec.Command("/bin/true").Run() == nil {
			started++
		}
		if pyRate > 0 && time.Since(lastPy) >= time.Second/time.Duration(pyRate) {
			lastPy = time.Now()
			c := exec.Command(py, "-c", "pass")
			if c.Start() == nil {
				started++
				go c.Wait()
			}
		}
		if time.Since(lastWrite) >= 100*time.Millisecond {
			lastWrite = time.Now()
			os.WriteFile(count+".tmp", []byte(strconv.Itoa(started)), 0o644)
			os.Rename(count+".tmp", count)
		}
	}
}

// readCount is what the churn driver has started so far (0 without one).
func readCount(path string) int {
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(string(b))
	return n
}

// loadOpts say what the profiled job runs.
type loadOpts struct {
	kind, python           string
	procs                  int
	churnRate, churnPython int
	switchRate             int
	agentFlags             []string
	cpuProfile             string
	allocProfile           string
}

// command returns how to start one busy process of the load.
func (o loadOpts) command(work, self string) (*exec.Cmd, error) {
	switch o.kind {
	case "go":
		c := exec.Command(self)
		c.Env = append(os.Environ(), loadEnv+"=1")
		return c, nil
	case "c", "churn":
		bin := filepath.Join(work, "unwindc")
		if _, err := os.Stat(bin); err != nil {
			cc := exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-g", "-o", bin, "internal/testenv/workloads/unwindc.c")
			if out, err := cc.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("building the C load (run from the repository root): %v\n%s", err, out)
			}
		}
		return exec.Command(bin, "split", "1000000"), nil
	case "switches":
		bin := filepath.Join(work, "offcpu")
		if _, err := os.Stat(bin); err != nil {
			cc := exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-g", "-pthread", "-o", bin, "internal/testenv/workloads/offcpu.c")
			if out, err := cc.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("building the switch load (run from the repository root): %v\n%s", err, out)
			}
		}
		return exec.Command(bin, "pingpong", strconv.Itoa(o.switchRate)), nil
	case "python":
		return exec.Command(o.python, "internal/testenv/workloads/python/split.py", "1000000"), nil
	case "torch":
		if out, err := exec.Command(o.python, "-c", "import torch").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("--load torch needs PyTorch for %s (Debian: apt-get install python3-torch): %v\n%s", o.python, err, out)
		}
		return exec.Command(o.python, "internal/testenv/workloads/python/torch_train.py", "1000000"), nil
	}
	return nil, fmt.Errorf("--load %q: want go, c, python, torch, churn or switches", o.kind)
}

// config is one bench run.
type config struct {
	duration, interval time.Duration
	rate               int
	beside             string
	// vs is another profiler's command line, run alone on the same load
	// after the agent, measured the same way (its BPF programs' stats,
	// its CPU and RSS); "" runs the agent only.
	vs string
}

func bench(c config, o loadOpts) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (eBPF, cgroups)")
	}
	work, err := os.MkdirTemp("", "slurmscope-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	agent := filepath.Join(work, "slurmscope-agent")
	build := exec.Command("go", "build", "-o", agent, "./agent/cmd/slurmscope-agent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the agent (run from the repository root): %w", err)
	}

	jobID := strconv.Itoa(900000 + os.Getpid()%99999)
	job, err := simjob.Create("slurmscope-bench.slice", jobID)
	if err != nil {
		return err
	}
	defer job.Remove()

	restore, err := enableBPFStats()
	if err != nil {
		return err
	}
	defer restore()

	self, _ := os.Executable()
	var loads []*exec.Cmd
	defer func() {
		for _, l := range loads {
			l.Process.Kill()
			l.Wait()
		}
	}()
	for i := 0; i < o.procs; i++ {
		l, err := o.command(work, self)
		if err != nil {
			return err
		}
		if l.Env == nil {
			l.Env = os.Environ()
		}
		l.Env = append(l.Env, "SLURM_JOB_ID="+jobID, "SLURM_JOB_NAME=bench-load")
		if err := l.Start(); err != nil {
			return err
		}
		loads = append(loads, l)
		if err := job.Add(l.Process.Pid); err != nil {
			return fmt.Errorf("moving the load into the job cgroup: %w", err)
		}
	}

	counted := filepath.Join(work, "churn.count")
	if o.kind == "churn" {
		d := exec.Command(self)
		d.Env = append(os.Environ(), loadEnv+"=churn", fmt.Sprintf("%s=%d %d %s", churnEnv, o.churnRate, o.churnPython, counted),
			"SLURM_JOB_ID="+jobID, "SLURM_JOB_NAME=bench-churn")
		go1, err := d.StdinPipe()
		if err != nil {
			return err
		}
		if err := d.Start(); err != nil {
			return err
		}
		loads = append(loads, d)
		if err := job.Add(d.Process.Pid); err != nil {
			return fmt.Errorf("moving the churn driver into the job cgroup: %w", err)
		}
		go1.Write([]byte("go\n"))
	}

	if c.beside != "" {
		b := exec.Command("sh", "-c", c.beside)
		b.Env = append(os.Environ(), "SLURM_JOB_ID="+jobID, "SLURM_JOB_NAME=bench-beside")
		b.Stdout, b.Stderr = os.Stderr, os.Stderr
		b.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// In the job from its first instruction: sh moves itself, then
		// execs the command, so every process it starts is in the job.
		b.Args = []string{"sh", "-c", "echo $$ > " + filepath.Join(job.Leaf, "cgroup.procs") + " && exec sh -c \"$0\"", c.beside}
		if err := b.Start(); err != nil {
			return err
		}
		besideErr := make(chan error, 1)
		go func() { besideErr <- b.Wait() }()
		// Its own process group, so that what is still running at the end
		// goes with it.
		defer syscall.Kill(-b.Process.Pid, syscall.SIGKILL)
		defer func() {
			select {
			case err := <-besideErr:
				fmt.Printf("beside: %q finished (%v)\n", c.beside, err)
			default:
				fmt.Printf("beside: %q still running at the end\n", c.beside)
			}
		}()
	}

	out := filepath.Join(work, "out")
	metricsAddr := "127.0.0.1:19810"
	args := append([]string{"run", "--output-dir", out, "--upload-interval", c.interval.String(),
		"--sample-rate", strconv.Itoa(c.rate), "--metrics-addr", metricsAddr, "--node-name", "bench", "--slurm-cgroup-v2-parent", job.Parent}, o.agentFlags...)
	if o.cpuProfile != "" || o.allocProfile != "" {
		args = append(args, "--debug.pprof")
	}
	fmt.Printf("load: %d busy %s processes in simulated job %s, %d Hz, %v interval, agent flags %q\n", o.procs, o.kind, jobID, c.rate, c.interval, o.agentFlags)
	ours := tool{name: "slurmscope", argv: append([]string{agent}, args...), out: out, metricsAddr: metricsAddr, cpuProfile: o.cpuProfile, allocProfile: o.allocProfile}
	r, err := measure(ours, c.duration, counted, work)
	if err != nil {
		return err
	}
	r.report(c, o.kind == "python")
	if c.vs == "" {
		return nil
	}
	other, err := measure(tool{name: "other", argv: []string{"sh", "-c", "exec " + c.vs}}, c.duration, counted, work)
	if err != nil {
		return err
	}
	fmt.Printf("\nother profiler: %s\n", c.vs)
	compare(r, other)
	return nil
}

// tool is a profiler to measure: the agent, or another one to compare.
type tool struct {
	name string
	argv []string
	// The agent's: its output dir (the first profile written ends
	// start-up), its /metrics and where its own CPU profile goes.
	out, metricsAddr, cpuProfile, allocProfile string
}

// result is what measure found of one profiler on the load.
type result struct {
	name                  string
	cpu, steadyCPU        time.Duration // the profiler's
	busy, steadyBusy      time.Duration // the machine's, the profiler's included
	warm                  time.Duration // start-up left out of the steady state
	newProcs              int           // the churn driver's, in the steady state
	steadyFor             time.Duration
	peakRSS               int64
	samples, bpfPerSample float64 // perf_event programs: runs, ns a run
	otherBPF              time.Duration
	metrics               map[string]float64 // the agent's /metrics at the end
	intervals             float64
}

// measure runs t on the load for d. The steady state leaves out start-up:
// the first quarter, or for the agent up to a second after its first
// drain's profile is written when that is later (the kernel's symbols,
// the first symbolisation of every file and the table builds happen by
// then); the first drain comes an interval after the agent is set up,
// which takes seconds on a slow machine: it is watched for, not assumed.
// The BPF figures are the stats of the programs loaded after t started:
// nothing else may load BPF programs meanwhile.
func measure(t tool, d time.Duration, counted, work string) (*result, error) {
	firstID := lastProgramID()
	cmd := exec.Command(t.argv[0], t.argv[1:]...)
	logPath := filepath.Join(work, t.name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	busy0, err := busyCPU()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", t.name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fail := func(err error) (*result, error) {
		cmd.Process.Kill()
		<-exited
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%s: %w\n%s", t.name, err, tail(log, 4000))
	}
	t0 := time.Now()
	warm := d / 4
	for t.out != "" && time.Since(t0) < d*3/4 {
		if wroteProfile(t.out) { // not a scrape: that costs the agent CPU
			warm = max(warm, time.Since(t0)+time.Second)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case err := <-exited:
		return fail(fmt.Errorf("exited during start-up: %v", err))
	case <-time.After(warm - time.Since(t0)):
	}
	cpuMid, busyMid, newMid, bpfMid := procCPU(cmd.Process.Pid), mustBusy(), readCount(counted), programStats(firstID)
	var profErr chan error
	if t.cpuProfile != "" {
		profErr = make(chan error, 1)
		secs := max(1, int((d-warm).Seconds())-1)
		go func() {
			profErr <- fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", t.metricsAddr, secs), t.cpuProfile)
		}()
	}
	select {
	case err := <-exited:
		return fail(fmt.Errorf("exited during the run: %v", err))
	case <-time.After(d - warm):
	}
	cpuEnd, busyEnd, newEnd, bpfEnd := procCPU(cmd.Process.Pid), mustBusy(), readCount(counted), programStats(firstID)
	r := &result{name: t.name, warm: warm, steadyFor: d - warm, steadyCPU: cpuEnd - cpuMid, steadyBusy: busyEnd - busyMid, newProcs: newEnd - newMid}
	if profErr != nil {
		if err := <-profErr; err != nil {
			fmt.Fprintln(os.Stderr, "bench: the agent's CPU profile:", err)
		} else {
			fmt.Printf("agent CPU profile of the steady state: %s (go tool pprof -top %s)\n", t.cpuProfile, t.cpuProfile)
		}
	}
	if t.allocProfile != "" {
		if err := fetch("http://"+t.metricsAddr+"/debug/pprof/allocs", t.allocProfile); err != nil {
			fmt.Fprintln(os.Stderr, "bench: the agent's allocation profile:", err)
		} else {
			fmt.Printf("agent allocation profile: %s (go tool pprof -sample_index=alloc_space -top %s)\n", t.allocProfile, t.allocProfile)
		}
	}
	if t.metricsAddr != "" {
		if r.metrics, err = scrape("http://" + t.metricsAddr + "/metrics"); err != nil {
			return fail(fmt.Errorf("scraping the agent: %w", err))
		}
	}
	// The steady state's BPF cost: that of start-up (the first
	// symbolisation's page faults, the tables' first loads) is left out.
	runs, runtime := bpfEnd.perf.runs-bpfMid.perf.runs, bpfEnd.perf.runtime-bpfMid.perf.runtime
	r.samples = float64(bpfEnd.perf.runs)
	if runs > 0 {
		r.bpfPerSample = float64(runtime.Nanoseconds()) / float64(runs)
	}
	r.otherBPF = bpfEnd.other.runtime - bpfMid.other.runtime
	if os.Getenv("SLURMSCOPE_BENCH_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "bpf stats from program %d: mid %+v, end %+v\n", firstID, bpfMid, bpfEnd)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	var werr error
	select {
	case werr = <-exited:
	case <-time.After(30 * time.Second):
		return fail(errors.New("still running 30 s after SIGTERM"))
	}
	busy1, _ := busyCPU()
	if werr != nil && t.metricsAddr != "" {
		return nil, fmt.Errorf("%s: %w", t.name, werr)
	}
	r.busy = busy1 - busy0
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	r.peakRSS = cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	return r, nil
}

func (r *result) share() float64       { return 100 * r.cpu.Seconds() / r.busy.Seconds() }
func (r *result) steadyShare() float64 { return 100 * r.steadyCPU.Seconds() / r.steadyBusy.Seconds() }

// perNewProcess is all of the steady CPU over the processes the churn
// driver started: an upper bound, the busy process's sampling included.
func (r *result) perNewProcess() float64 {
	if r.newProcs == 0 {
		return 0
	}
	return float64(r.steadyCPU.Microseconds()) / float64(r.newProcs)
}

func (r *result) report(c config, python bool) {
	m := r.metrics
	intervals := float64(c.duration) / float64(c.interval)
	fmt.Printf("agent CPU time:          %v (%.3f%% of the %.1fs of CPU time profiled)\n",
		r.cpu.Round(time.Millisecond), r.share(), r.busy.Seconds())
	fmt.Printf("agent CPU, steady state: %v (%.3f%% of the %.1fs profiled after the first %v; targets: native <= 0.3%%, Python <= 0.5%%)\n",
		r.steadyCPU.Round(time.Millisecond), r.steadyShare(), r.steadyBusy.Seconds(), r.warm.Round(100*time.Millisecond))
	if r.newProcs > 0 {
		fmt.Printf("agent CPU per new process: %.0f us (steady: %v over %d processes started, %.0f a second; the busy process's sampling included)\n",
			r.perNewProcess(), r.steadyCPU.Round(time.Millisecond), r.newProcs, float64(r.newProcs)/r.steadyFor.Seconds())
	}
	if runs := m[schema.AgentBPFRuns.Name]; runs > 0 {
		fmt.Printf("BPF run time per sample: %.2f us over %.0f samples (the whole run; target with the unwinder <= 12 us; a Python sample <= 2x a native one)\n",
			m[schema.AgentBPFRunTime.Name]*1e6/runs, runs)
	}
	fmt.Printf("BPF, steady state:       %.2f us per sample; %v in the other programs (fork, exec, exit hooks)\n", r.bpfPerSample/1e3, r.otherBPF.Round(time.Microsecond))
	fmt.Printf("agent CPU, steady state: %.3f%% of one core\n", 100*r.steadyCPU.Seconds()/r.steadyFor.Seconds())
	if rec := m[schema.AgentOffCPUSwitches.Name]; rec > 0 || m[schema.AgentOffCPUBPFRuns.Name] > 0 {
		sampled := m[schema.AgentOffCPUSwitchesNotRecorded.Name+`{reason="sampled"}`]
		runs, ns := m[schema.AgentOffCPUBPFRuns.Name], m[schema.AgentOffCPUBPFRunTime.Name]*1e9
		fmt.Printf("off-CPU: %.0f switches recorded (%.0f a second), %.0f sampled out; program %.0f ns a run over %.0f runs (every switch of the node), %.2f us per recorded switch\n",
			rec, rec/c.duration.Seconds(), sampled, ns/max(runs, 1), runs, ns/1e3/max(rec, 1))
	}
	fmt.Printf("agent peak RSS:          %.1f MiB (target <= 100 MiB)\n", float64(r.peakRSS)/(1<<20))
	fmt.Printf("unwind table memory:     %.1f KiB (the tables loaded into BPF maps at the end)\n", m[schema.AgentUnwindTableBytes.Name]/1024)
	fmt.Printf("profile bytes/interval:  %.0f (gzipped pprof, all jobs; %.0f bytes in %.1f intervals)\n",
		m[schema.AgentProfileBytes.Name]/intervals, m[schema.AgentProfileBytes.Name], intervals)
	fmt.Printf("samples: %.0f taken, %.0f unattributed\n", m[schema.AgentCPUSamples.Name], m[schema.AgentCPUSamplesUnattributed.Name])
	// How soon after its start each process the load started was set up
	// (agent_process_setup_seconds: processes started before the agent
	// are not timed).
	for _, part := range []string{"unwind_tables", "interpreter"} {
		sel := `{part="` + part + `"}`
		if n := m[schema.AgentProcessSetup.Name+"_count"+sel]; n > 0 {
			fmt.Printf("set-up time, %-13s %.1f ms mean over %.0f processes\n", part+":", 1e3*m[schema.AgentProcessSetup.Name+"_sum"+sel]/n, n)
		}
	}
	if python {
		// The Python walk ran: the frames it found, all results together.
		fmt.Printf("python: %.0f processes set up, %.0f frames\n", m[schema.AgentInterpProcesses.Name], m[schema.AgentInterpFrames.Name])
	}
}

// compare prints the agent's figures beside another profiler's, as
// ratios (agent / other: under 1 is the agent doing better).
func compare(a, b *result) {
	row := func(what string, x, y float64, unit string) {
		ratio := "-"
		if y > 0 {
			ratio = fmt.Sprintf("%.2f", x/y)
		}
		fmt.Printf("%-28s %12.3f %12.3f  %s  %s\n", what, x, y, ratio, unit)
	}
	fmt.Printf("%-28s %12s %12s  %s\n", "", "slurmscope", "other", "ratio")
	row("CPU share, steady", a.steadyShare(), b.steadyShare(), "% of the CPU profiled")
	row("CPU share, whole run", a.share(), b.share(), "%")
	if a.newProcs > 0 || b.newProcs > 0 {
		row("CPU per new process", a.perNewProcess(), b.perNewProcess(), "us, steady, all CPU over new processes")
	}
	row("peak RSS", float64(a.peakRSS)/(1<<20), float64(b.peakRSS)/(1<<20), "MiB")
	row("BPF time per sample", a.bpfPerSample/1e3, b.bpfPerSample/1e3, "us, perf_event programs, steady")
	row("samples", a.samples, b.samples, "perf_event program runs, whole run")
	row("other BPF time", a.otherBPF.Seconds()*1e3, b.otherBPF.Seconds()*1e3, "ms, the other programs, steady")
}

// bpfStats sums the run counts and run times of BPF programs.
type bpfStats struct {
	runs    uint64
	runtime time.Duration
}

// programStats sums the stats of the programs with IDs above first: the
// perf_event ones (the samplers: one run a sample) and the rest.
func programStats(first ebpf.ProgramID) (s struct{ perf, other bpfStats }) {
	for id := first; ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return s
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, ierr := p.Info()
		st, serr := p.Stats()
		p.Close()
		if ierr != nil || serr != nil {
			continue
		}
		to := &s.other
		if info.Type == ebpf.PerfEvent {
			to = &s.perf
		}
		to.runs += st.RunCount
		to.runtime += st.Runtime
	}
}

// lastProgramID is the highest BPF program ID loaded now.
func lastProgramID() ebpf.ProgramID {
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return id
		}
		id = next
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func enableBPFStats() (func(), error) {
	const p = "/proc/sys/kernel/bpf_stats_enabled"
	old, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
		return nil, err
	}
	return func() { os.WriteFile(p, old, 0o644) }, nil
}

// procCPU is a process's user plus system time, from /proc/<pid>/stat
// (0 when it cannot be read).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * (time.Second / 100)
}

func mustBusy() time.Duration {
	d, _ := busyCPU()
	return d
}

// busyCPU is the non-idle CPU time of the whole machine, from /proc/stat.
func busyCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("unexpected /proc/stat")
	}
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100), nil
}

// wroteProfile reports whether the agent has written a profile under dir.
func wroteProfile(dir string) bool {
	found := false
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// fetch writes what url answers to path.
func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func scrape(url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		series := name
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err == nil {
			out[name] += v
			if series != name {
				out[series] = v
			}
		}
	}
	return out, sc.Err()
}
