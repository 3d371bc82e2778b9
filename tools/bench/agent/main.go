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
// case) or python (split.py under --python, Python frames); --procs how
// many (default one per CPU) and --agent-flags extra agent flags, so that
// the same load runs with and without a feature side by side:
//
//	go run ./tools/bench/agent --load c --agent-flags=--unwind=fp
//	go run ./tools/bench/agent --load c
//	go run ./tools/bench/agent --load python --procs 32
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

	"github.com/slurmscope/slurmscope/internal/testenv/simjob"
	"github.com/slurmscope/slurmscope/schema"
)

const loadEnv = "SLURMSCOPE_BENCH_LOAD"

func main() {
	if os.Getenv(loadEnv) == "1" {
		spin()
	}
	duration := flag.Duration("duration", 60*time.Second, "how long to profile")
	interval := flag.Duration("interval", 15*time.Second, "the agent's --upload-interval")
	rate := flag.Int("sample-rate", 97, "the agent's --sample-rate")
	beside := flag.String("beside", "", "a shell command to run in the job beside the load (e.g. a go build)")
	var o loadOpts
	flag.StringVar(&o.kind, "load", "go", "busy processes: go, c (built -O2 -fomit-frame-pointer) or python")
	flag.IntVar(&o.procs, "procs", runtime.NumCPU(), "how many busy processes")
	flag.StringVar(&o.python, "python", "/usr/bin/python3.11", "the interpreter of --load python")
	agentFlags := flag.String("agent-flags", "", "extra flags for the agent, space-separated (e.g. --unwind=fp)")
	flag.Parse()
	o.agentFlags = strings.Fields(*agentFlags)
	if err := bench(*duration, *interval, *rate, *beside, o); err != nil {
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

// loadOpts say what the profiled job runs.
type loadOpts struct {
	kind, python string
	procs        int
	agentFlags   []string
}

// command returns how to start one busy process of the load.
func (o loadOpts) command(work, self string) (*exec.Cmd, error) {
	switch o.kind {
	case "go":
		c := exec.Command(self)
		c.Env = append(os.Environ(), loadEnv+"=1")
		return c, nil
	case "c":
		bin := filepath.Join(work, "unwindc")
		if _, err := os.Stat(bin); err != nil {
			cc := exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-g", "-o", bin, "internal/testenv/workloads/unwindc.c")
			if out, err := cc.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("building the C load (run from the repository root): %v\n%s", err, out)
			}
		}
		return exec.Command(bin, "split", "1000000"), nil
	case "python":
		return exec.Command(o.python, "internal/testenv/workloads/python/split.py", "1000000"), nil
	}
	return nil, fmt.Errorf("--load %q: want go, c or python", o.kind)
}

func bench(duration, interval time.Duration, rate int, beside string, o loadOpts) error {
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

	out := filepath.Join(work, "out")
	metricsAddr := "127.0.0.1:19810"
	args := append([]string{"run", "--output-dir", out, "--upload-interval", interval.String(),
		"--sample-rate", strconv.Itoa(rate), "--metrics-addr", metricsAddr, "--node-name", "bench", "--slurm-cgroup-v2-parent", job.Parent}, o.agentFlags...)
	a := exec.Command(agent, args...)
	a.Stderr = os.Stderr
	busy0, err := busyCPU()
	if err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		return err
	}
	var besideErr chan error
	if beside != "" {
		b := exec.Command("sh", "-c", beside)
		b.Env = append(os.Environ(), "SLURM_JOB_ID="+jobID, "SLURM_JOB_NAME=bench-beside")
		b.Stdout, b.Stderr = os.Stderr, os.Stderr
		b.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// In the job from its first instruction: sh moves itself, then
		// execs the command, so every process it starts is in the job.
		b.Args = []string{"sh", "-c", "echo $$ > " + filepath.Join(job.Leaf, "cgroup.procs") + " && exec sh -c \"$0\"", beside}
		if err := b.Start(); err != nil {
			return err
		}
		besideErr = make(chan error, 1)
		go func() { besideErr <- b.Wait() }()
		// Its own process group, so that what is still running at the end
		// goes with it.
		defer syscall.Kill(-b.Process.Pid, syscall.SIGKILL)
	}
	// The steady state leaves out start-up: the first quarter, or up to
	// a second after the first drain's profile is written when that is
	// later (the kernel's symbols, the first symbolisation of every file
	// and the table builds happen by then). The first drain comes an
	// interval after the agent is set up, which takes seconds on a slow
	// machine: it is watched for, not assumed.
	t0 := time.Now()
	warm := duration / 4
	for time.Since(t0) < duration*3/4 {
		if wroteProfile(out) { // not a scrape: that costs the agent CPU
			warm = max(warm, time.Since(t0)+time.Second)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(warm - time.Since(t0))
	agentMid, busyMid := procCPU(a.Process.Pid), mustBusy()
	time.Sleep(duration - warm)
	agentEnd, busyEnd := procCPU(a.Process.Pid), mustBusy()
	if besideErr != nil {
		select {
		case err := <-besideErr:
			fmt.Printf("beside: %q finished (%v)\n", beside, err)
		default:
			fmt.Printf("beside: %q still running at the end\n", beside)
		}
	}
	metrics, merr := scrape("http://" + metricsAddr + "/metrics")
	a.Process.Signal(syscall.SIGTERM)
	werr := a.Wait()
	busy1, _ := busyCPU()
	if merr != nil {
		return fmt.Errorf("scraping the agent: %w", merr)
	}
	if werr != nil {
		return fmt.Errorf("agent: %w", werr)
	}

	ru := a.ProcessState.SysUsage().(*syscall.Rusage)
	agentCPU := a.ProcessState.UserTime() + a.ProcessState.SystemTime()
	profiled := busy1 - busy0
	bpfNs := metrics[schema.AgentBPFRunTime.Name] * 1e9
	bpfRuns := metrics[schema.AgentBPFRuns.Name]
	intervals := float64(duration) / float64(interval)
	fmt.Printf("load: %d busy %s processes in simulated job %s for %v, %d Hz, %v interval, agent flags %q\n", o.procs, o.kind, jobID, duration, rate, interval, o.agentFlags)
	fmt.Printf("agent CPU time:          %v (%.3f%% of the %.1fs of CPU time profiled)\n",
		agentCPU.Round(time.Millisecond), 100*agentCPU.Seconds()/profiled.Seconds(), profiled.Seconds())
	if steady := busyEnd - busyMid; steady > 0 && agentEnd > 0 {
		fmt.Printf("agent CPU, steady state: %v (%.3f%% of the %.1fs profiled after the first %v; targets: native <= 0.3%%, Python <= 0.5%%)\n",
			(agentEnd - agentMid).Round(time.Millisecond), 100*(agentEnd-agentMid).Seconds()/steady.Seconds(), steady.Seconds(), warm.Round(100*time.Millisecond))
	}
	if bpfRuns > 0 {
		fmt.Printf("BPF run time per sample: %.2f us over %.0f samples (target with the unwinder <= 12 us; a Python sample <= 2x a native one)\n", bpfNs/bpfRuns/1e3, bpfRuns)
	}
	fmt.Printf("agent peak RSS:          %.1f MiB (target <= 100 MiB)\n", float64(ru.Maxrss)/1024)
	fmt.Printf("unwind table memory:     %.1f KiB (the tables loaded into BPF maps at the end)\n", metrics[schema.AgentUnwindTableBytes.Name]/1024)
	fmt.Printf("profile bytes/interval:  %.0f (gzipped pprof, all jobs; %.0f bytes in %.1f intervals)\n",
		metrics[schema.AgentProfileBytes.Name]/intervals, metrics[schema.AgentProfileBytes.Name], intervals)
	fmt.Printf("samples: %.0f taken, %.0f unattributed\n", metrics[schema.AgentCPUSamples.Name], metrics[schema.AgentCPUSamplesUnattributed.Name])
	// How soon after its start each process the load started was set up
	// (agent_process_setup_seconds: processes started before the agent
	// are not timed).
	for _, part := range []string{"unwind_tables", "interpreter"} {
		sel := `{part="` + part + `"}`
		if n := metrics[schema.AgentProcessSetup.Name+"_count"+sel]; n > 0 {
			fmt.Printf("set-up time, %-13s %.1f ms mean over %.0f processes\n", part+":", 1e3*metrics[schema.AgentProcessSetup.Name+"_sum"+sel]/n, n)
		}
	}
	if o.kind == "python" {
		// The Python walk ran: the frames it found, all results together.
		fmt.Printf("python: %.0f processes set up, %.0f frames\n", metrics[schema.AgentInterpProcesses.Name], metrics[schema.AgentInterpFrames.Name])
	}
	return nil
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
