// Command demo shows slurmscope end to end on one machine, with no server:
// it starts a throwaway SLURM (munged, slurmctld and two slurmd, from
// internal/testenv/slurmtest) that constrains jobs to their CPUs and memory,
// submits three CPU-bound jobs, a two-rank job with a straggler and one
// that holds cores it does not use, as two users, profiles them with the
// real agent, which also reads their cgroups, and prints what the agent
// saw, the top functions of each job, each job's findings (computed by the
// datasource's engine from a local Debian Prometheus scraping the agent),
// where the idle job waits, and the two-rank job's ranks (from the
// Pyroscope stand-in the agent also pushes to). SLURM and Prometheus are stopped
// and SLURM's cgroups removed at the end, also on Ctrl-C.
//
//	sudo go run ./tools/demo [--duration 20s] [--out ./slurmscope-demo-out] [--cgroup auto]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/internal/testenv/promtest"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
	"github.com/slurmscope/slurmscope/schema"
)

// trainName has quotes and non-ASCII on purpose: job names are user input.
const trainName = `train "llama" ✓`

// trainPy is the third job's work: a Python loop with a recognisable call
// stack, whose Python functions the agent reads from the interpreter
// (CPython 3.9-3.13; older ones show the interpreter's C functions).
const trainPy = `import sys, time

def matmul(n):
    s = 0
    for i in range(n):
        s += i * i
    return s

def train_step():
    return matmul(20000)

end = time.time() + float(sys.argv[1])
while time.time() < end:
    train_step()
`

func main() {
	os.Exit(run())
}

type options struct {
	duration time.Duration
	interval time.Duration
	out      string
	mode     slurmtest.Mode
	keep     bool
}

func run() int {
	var o options
	var cgroup string
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long to profile the jobs")
	flag.DurationVar(&o.interval, "interval", 5*time.Second, "the agent's --upload-interval")
	flag.StringVar(&o.out, "out", "slurmscope-demo-out", "where the agent writes its profiles (cleared of an earlier demo's)")
	flag.StringVar(&cgroup, "cgroup", "auto", "SLURM's cgroup plugin: v1, v2, or auto: v2 where its hierarchy has the cpuset and memory controllers (so that Slurm can constrain jobs, which findings are judged against), else v1")
	flag.BoolVar(&o.keep, "keep", false, "keep SLURM's work dir (configs, logs) afterwards")
	flag.Parse()
	switch cgroup {
	case "auto":
		o.mode = slurmtest.V1
		if slurmtest.CanConstrain(slurmtest.V2) {
			o.mode = slurmtest.V2
		}
	case "v1":
		o.mode = slurmtest.V1
	case "v2":
		o.mode = slurmtest.V2
	default:
		fmt.Fprintf(os.Stderr, "demo: --cgroup must be auto, v1 or v2, not %q\n", cgroup)
		return 2
	}
	if o.duration < o.interval {
		fmt.Fprintf(os.Stderr, "demo: --duration %v is shorter than --interval %v\n", o.duration, o.interval)
		return 2
	}

	// Ctrl-C cancels ctx; the deferred cleanup then runs with signals
	// still caught, so a second Ctrl-C cannot cut it short.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := demo(ctx, o)
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil:
		fmt.Println("\ninterrupted; SLURM was stopped and cleaned up")
		return 130
	default:
		fmt.Fprintf(os.Stderr, "\ndemo: %v\n", err)
		return 1
	}
}

func demo(ctx context.Context, o options) (err error) {
	if err := slurmtest.CheckPrerequisites(o.mode); err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	out, err := filepath.Abs(o.out)
	if err != nil {
		return err
	}
	if err := clearOutput(out); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "slurmscope-demo-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil || o.keep {
			fmt.Printf("SLURM's configs and logs are kept in %s\n", work)
		} else {
			os.RemoveAll(work)
		}
	}()

	step("building slurmscope-agent and the workloads")
	bin := filepath.Join(work, "bin")
	if err := build(ctx, root, bin); err != nil {
		return err
	}
	agent := filepath.Join(bin, "slurmscope-agent")

	constrain := slurmtest.CanConstrain(o.mode)
	how := "jobs confined to the CPUs and memory they asked for"
	if !constrain {
		how = "this host's cgroup " + o.mode.String() + " has no cpuset and memory controllers for Slurm: findings on cores and memory need --cgroup v1"
	}
	step("starting SLURM (cgroup %s, %s; logs in %s)", o.mode, how, filepath.Join(work, "log"))
	c, err := slurmtest.Start(ctx, slurmtest.Options{Mode: o.mode, WorkDir: work, Constrain: constrain})
	if err != nil {
		return err
	}
	defer func() {
		step("stopping SLURM")
		if serr := c.Stop(); serr != nil {
			fmt.Fprintf(os.Stderr, "demo: stopping SLURM: %v\n", serr)
			if err == nil {
				err = serr
			}
		} else if err == nil {
			fmt.Printf("  done; the profiles stay in %s\n", o.out)
		}
	}()
	fmt.Printf("  nodes %s on this host, users %s\n", strings.Join(c.NodeNames(), ", "), "ssalice, ssbob")

	// Pyroscope's server is not packaged here: its stand-in, in this
	// process, takes the agent's pushes; a real one takes its place by URL.
	pyro := pyrostandin.New()
	if err := pyro.Start("127.0.0.1:0"); err != nil {
		return err
	}
	defer pyro.Close()
	step("starting the Pyroscope stand-in (in this process; a real Pyroscope's URL takes its place): %s", pyro.URL())
	step("starting the agent: slurmscope-agent run --output-dir %s --pyroscope-url %s --upload-interval %v --host-metrics-interval 2s", o.out, pyro.URL(), o.interval)
	ag, err := startAgent(agent, filepath.Join(work, "log", "agent.log"),
		"run", "--output-dir", out, "--pyroscope-url", pyro.URL(), "--spool-dir", filepath.Join(work, "spool"),
		"--upload-interval", o.interval.String(), "--metrics-addr", "127.0.0.1:0", "--host-metrics-interval", "2s")
	if err != nil {
		return err
	}
	defer ag.kill()

	step("starting Prometheus (Debian's), scraping the agent's /metrics every 2s")
	promDir := filepath.Join(work, "prometheus")
	if err := os.MkdirAll(promDir, 0o755); err != nil {
		return err
	}
	prom, err := promtest.Run(promDir, fmt.Sprintf("global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\nscrape_configs:\n  - job_name: slurmscope-agent\n    static_configs:\n      - targets: [%q]\n", ag.metricsAddr()),
		"--log.level=warn")
	if err != nil {
		return err
	}
	defer prom.Stop()
	fmt.Printf("  %s\n", prom.URL)
	submitted := time.Now()

	// Jobs outlast the profiling window, so `jobs` below still sees them.
	secs := int((o.duration + 2*o.interval).Seconds())
	if err := os.WriteFile(filepath.Join(c.JobDir(), "train.py"), []byte(trainPy), 0o644); err != nil {
		return err
	}
	// Each asks for its cores and memory, as on a cluster (where a job
	// without --mem would hold a whole node's).
	jobs := []struct {
		user, name, node, script string
		res                      []string
	}{
		{"ssalice", "cpusplit", "node-a", fmt.Sprintf("exec %s %d\n", filepath.Join(bin, "cpusplit"), secs), []string{"-c", "1", "--mem=100M"}},
		{"ssbob", "gosplit", "node-b", fmt.Sprintf("exec %s %d\n", filepath.Join(bin, "gosplit"), secs), []string{"-c", "1", "--mem=100M"}},
		{"ssalice", trainName, "", fmt.Sprintf(
			"if command -v python3 >/dev/null; then exec python3 train.py %d; fi\n"+
				"end=$(( $(date +%%s) + %d )); while [ $(date +%%s) -lt $end ]; do :; done\n", secs, secs), []string{"-c", "1", "--mem=200M"}},
		// Two ranks (srun -n 2) of which rank 1 spends twice rank 0's
		// time in work_rank: the straggler. Short enough to finish in
		// the window, so that the ranks are compared over all their work.
		{"ssbob", "ranks", "node-b", fmt.Sprintf("srun -n 2 %s 1\n", filepath.Join(bin, "ranks")), []string{"-n", "2", "--mem=100M"}},
		// Holds two cores and 300 MB and uses neither: it waits, 70% in
		// wait_a (a sleep) and 30% in wait_b (a pipe read), rounds of 10 ms.
		{"ssbob", "idle-cores", "node-a", fmt.Sprintf("echo go | %s %d\n", filepath.Join(bin, "offcpu"), secs*100), []string{"-c", "2", "--mem=300M"}},
	}
	step("submitting jobs")
	var ids []string
	for _, j := range jobs {
		args := append([]string{"-J", j.name}, j.res...)
		if j.node != "" {
			args = append(args, "-w", j.node)
		}
		id, err := c.Sbatch(ctx, j.user, args, j.script)
		if err != nil {
			return err
		}
		js, err := c.WaitState(ctx, id, "RUNNING", time.Minute)
		if err != nil {
			return err
		}
		ids = append(ids, id)
		fmt.Printf("  job %-3s %-18s user %-8s on %-7s %s\n", id, j.name, j.user, strings.Join(js[0].Nodes, ","), strings.Join(j.res, " "))
	}

	step("profiling for %v", o.duration)
	if err := sleep(ctx, o.duration); err != nil {
		return err
	}

	step("slurmscope-agent jobs: which process is in which job")
	if err := show(ctx, agent, "jobs"); err != nil {
		return err
	}

	step("each job's findings, from its cgroups' metrics in Prometheus (what `slurmscope job <id> --prometheus-url %s` prints first)", prom.URL)
	fmt.Printf("  (both nodes are this host: their jobs share its %d CPUs, so a CPU-bound job gets less than the core it holds)\n", runtime.NumCPU())
	if err := printFindings(ctx, prom.URL, ids, query.Range{From: submitted.Add(-10 * time.Second), To: time.Now(), Step: 2 * time.Second}); err != nil {
		return err
	}

	step("stopping the agent (SIGTERM writes the last interval)")
	if err := ag.stop(); err != nil {
		return err
	}
	fmt.Printf("  profiles: %s/<job id>/process_cpu-<unix time>.pb.gz (try: go tool pprof -http : FILE)\n", o.out)

	step("slurmscope-agent top --dir %s -n 6", o.out)
	if err := show(ctx, agent, "top", "--dir", out, "-n", "6"); err != nil {
		return err
	}
	step("slurmscope-agent top --dir %s -n 6 --cum: time anywhere on the stack, callers and main too (cpusplit is built without frame pointers)", o.out)
	if err := show(ctx, agent, "top", "--dir", out, "-n", "6", "--cum"); err != nil {
		return err
	}
	idle := ids[len(ids)-1]
	step("slurmscope-agent top --dir %s --job %s --type offcpu --cum -n 8: where the job with idle cores waits (its off-CPU profile, blocked time)", o.out, idle)
	if err := show(ctx, agent, "top", "--dir", out, "--job", idle, "--type", "offcpu", "--cum", "-n", "8"); err != nil {
		return err
	}
	rj := ids[len(ids)-2]
	step("slurmscope job %s --ranks --pyroscope-url %s: the two-rank job's ranks and its straggler", rj, pyro.URL())
	return show(ctx, filepath.Join(bin, "slurmscope"), "job", rj, "--ranks", "--pyroscope-url", pyro.URL(), "--since", "1h")
}

// printFindings asks the datasource's engine for each job's findings.
func printFindings(ctx context.Context, promURL string, ids []string, r query.Range) error {
	p, err := backends.NewPrometheus(backends.Config{URL: promURL})
	if err != nil {
		return err
	}
	e := &query.Engine{Metrics: p}
	for _, id := range ids {
		scope := query.Scope{Filter: filter.Equal(schema.JobID, id)}
		jobs, err := e.Usage(ctx, scope, r)
		if err != nil {
			return err
		}
		if len(jobs) == 0 {
			fmt.Printf("  job %s: no host metrics yet\n", id)
			continue
		}
		j := jobs[0]
		var used, cores, peak, limit float64
		for _, n := range j.Nodes {
			used, cores = used+n.UsedCores, cores+n.Cores
			peak, limit = max(peak, n.MemPeak), max(limit, n.MemLimit)
		}
		fmt.Printf("  job %s (%s, %s): %.2f of %.0f cores busy, memory peak %.1f MiB of %.0f MiB\n",
			id, j.Name, j.User, used, cores, peak/(1<<20), limit/(1<<20))
		fs, err := e.Findings(ctx, scope, r, "")
		if err != nil {
			return err
		}
		if len(fs) == 0 {
			fmt.Println("    no findings")
		}
		for _, f := range fs {
			fmt.Printf("    %-8s %s: %s\n             %s\n", strings.ToUpper(string(f.Severity)), f.Kind, f.Summary, f.Advice)
		}
	}
	return nil
}

func step(format string, args ...any) {
	fmt.Printf("\n▸ "+format+"\n", args...)
}

// moduleRoot finds the slurmscope checkout the demo was started from.
func moduleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(b))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", errors.New("run the demo from the slurmscope checkout (go run ./tools/demo)")
	}
	return filepath.Dir(mod), nil
}

func build(ctx context.Context, root, bin string) error {
	// The test users' jobs run the workloads from here.
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	// Without frame pointers, as most code is built: the agent unwinds
	// it from its .eh_frame tables (top --cum shows its callers).
	cflags := []string{"-O2", "-fomit-frame-pointer", "-fno-inline", "-g"}
	for _, args := range [][]string{
		{"go", "build", "-o", filepath.Join(bin, "slurmscope-agent"), "./agent/cmd/slurmscope-agent"},
		{"go", "build", "-o", filepath.Join(bin, "gosplit"), "./internal/testenv/workloads/gosplit"},
		append(append([]string{"gcc"}, cflags...), "-o", filepath.Join(bin, "cpusplit"), "internal/testenv/workloads/cpusplit.c"),
		append(append([]string{"gcc"}, cflags...), "-pthread", "-o", filepath.Join(bin, "offcpu"), "internal/testenv/workloads/offcpu.c"),
		append(append([]string{"gcc"}, cflags...), "-o", filepath.Join(bin, "ranks"), "internal/testenv/workloads/ranks.c"),
		{"go", "build", "-o", filepath.Join(bin, "slurmscope"), "./grafana-plugin/cmd/slurmscope"},
	} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	return nil
}

var profileFile = regexp.MustCompile(`^((process_cpu|off_cpu)-[0-9]+.*\.pb\.gz|\.tmp-.*)$`)

// clearOutput empties dir of an earlier demo's profiles: SLURM's job ids
// start again at 1, and old files would merge into the new jobs. Anything
// that does not look like the agent's output is left alone, and stops the
// demo rather than being deleted.
func clearOutput(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		sub := filepath.Join(dir, e.Name())
		files, err := os.ReadDir(sub)
		if !e.IsDir() || err != nil {
			return fmt.Errorf("%s holds %s, which is not slurmscope output; choose another --out", dir, e.Name())
		}
		for _, f := range files {
			if f.IsDir() || !profileFile.MatchString(f.Name()) {
				return fmt.Errorf("%s holds %s, which is not slurmscope output; choose another --out", dir, filepath.Join(e.Name(), f.Name()))
			}
		}
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

type agentProc struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

var servingRE = regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)

// metricsAddr is where the agent said it serves /metrics.
func (a *agentProc) metricsAddr() string {
	b, _ := os.ReadFile(a.log)
	if m := servingRE.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// startAgent starts the agent in its own process group (so the terminal's
// Ctrl-C reaches only the demo, which then stops it) and waits until it
// samples.
func startAgent(bin, logPath string, args ...string) (*agentProc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &agentProc{cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { a.done <- cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for {
		if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "msg=profiling") {
			return a, nil
		}
		select {
		case err := <-a.done:
			a.done <- err
			return nil, fmt.Errorf("the agent exited (%v):\n%s", err, tail(logPath))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			a.kill()
			return nil, fmt.Errorf("the agent did not start sampling within a minute:\n%s", tail(logPath))
		}
	}
}

func (a *agentProc) stop() error {
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-a.done:
		a.done <- err
		if err != nil {
			return fmt.Errorf("the agent failed (%v):\n%s", err, tail(a.log))
		}
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("the agent did not exit a minute after SIGTERM:\n%s", tail(a.log))
	}
}

// kill ends the agent if stop did not; a no-op once it has exited.
func (a *agentProc) kill() {
	select {
	case err := <-a.done:
		a.done <- err
	default:
		a.cmd.Process.Kill()
		a.done <- <-a.done
	}
}

func show(ctx context.Context, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	fmt.Print(indent(string(out)))
	fmt.Fprint(os.Stderr, indent(stderr.String()))
	if err != nil {
		return fmt.Errorf("%s %s: %w", filepath.Base(bin), strings.Join(args, " "), err)
	}
	return nil
}

// indent sets command output off from the demo's own lines.
func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}
