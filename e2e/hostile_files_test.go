package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/memcg"
	"github.com/slurmscope/slurmscope/internal/testenv/simjob"
)

// The attacks of a hostile job on the agent, each run as a real
// unprivileged process (uid nobody) in a simulated SLURM job, against the
// real agent running under the memory limit of its systemd unit, beside
// an innocent job of another user. Each attack must leave the innocent job
// profiled interval after interval, leak nothing into any profile, keep the
// agent inside its memory limit (not OOM-killed, its peak RSS under the Go
// soft limit it derives from it), and the agent must still stop on SIGTERM
// within seconds. The
// counters the agent exports show the attack was seen and refused.

// innocentFunction is what the innocent job's CPU profile must name.
const innocentFunction = "innocent_spin"

// hostileSetup is built once for all attacks.
type hostileSetup struct {
	agent, hostile, goELF string
	work                  string // 0755: the unprivileged processes read it
	memoryMax             int64
	attacker, innocent    int // uids
}

func TestHostileJobs(t *testing.T) {
	lane(t, &simLane)
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	s := &hostileSetup{agent: buildAgent(t), memoryMax: unitMemoryMax(t)}
	var err error
	if s.work, err = os.MkdirTemp("", "slurmscope-hostile-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(s.work) })
	must(t, os.Chmod(s.work, 0o755))
	s.hostile = filepath.Join(s.work, "hostile")
	cc := exec.Command("gcc", "-std=c11", "-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-Wall", "-Wextra", "-Werror",
		"-o", s.hostile, "testdata/hostile.c", "-ldl", "-lpthread")
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/hostile.c: %v\n%s", err, out)
	}
	// A Go binary the attacker can read, for its pclntab: the agent's.
	s.goELF = filepath.Join(s.work, "goelf")
	b, err := os.ReadFile(s.agent)
	must(t, err)
	must(t, os.WriteFile(s.goELF, b, 0o755))
	s.attacker = lookupUID(t, "nobody")
	s.innocent = lookupUID(t, "daemon")

	t.Run("FIFOs", func(t *testing.T) {
		// mkfifo /tmp/perf-<pid>.map; and a mapped file whose path is a
		// FIFO now. Neither may block the agent.
		h := s.start(t)
		h.attack("jit", "fifo")
		// Unique and removed: a FIFO left by an earlier run at a reused
		// pid's path blocked the attacker's copy before it said ready.
		fifo := filepath.Join("/tmp", fmt.Sprintf("slurmscope-mapfifo-%d-%d", os.Getpid(), time.Now().UnixNano()))
		t.Cleanup(func() { os.Remove(fifo) })
		h.attack("mapfifo", fifo)
		h.run()
		h.wantCounted("agent_symbolize_errors_total", `reason="not_regular"`)
		h.stop()
	})

	t.Run("DeviceBehindTheProcessRoot", func(t *testing.T) {
		// In a mount namespace of its own the perf map is /dev/null,
		// owned by root (as perf accepts): only the regular-file check
		// stands between the agent and a device's open (/dev/watchdog
		// acts on open).
		h := s.start(t)
		h.attack("jit", "device")
		h.run()
		h.wantCounted("agent_symbolize_errors_total", `reason="not_regular"`)
		h.stop()
	})

	t.Run("SymlinkToARootOnlyFile", func(t *testing.T) {
		// The perf map is a link to a root-only file whose lines look like
		// perf map lines covering the attacker's JIT code.
		secret := filepath.Join("/tmp", fmt.Sprintf("slurmscope-secret-%d", os.Getpid()))
		must(t, os.WriteFile(secret, []byte("7e0000000000 1000 SECRET_OF_ROOT_ONLY_FILE\n"), 0o600))
		t.Cleanup(func() { os.Remove(secret) })
		h := s.start(t)
		h.attack("jit", "symlink", secret)
		h.run()
		h.wantCounted("agent_symbolize_errors_total", `reason="link"`)
		h.stop()
		h.wantNowhere("SECRET_OF_ROOT_ONLY_FILE")
	})

	t.Run("SparseFilesThatLieAboutSizes", func(t *testing.T) {
		// Headers that claim a GiB of .symtab, .dynsym, names, .gopclntab
		// (sparse: the file is that large and costs no disk), and a Go
		// pclntab that claims 100 million functions; all mapped.
		h := s.start(t)
		var files []string
		for _, c := range []struct{ src, kind string }{
			{s.hostile, "symtab"}, {s.hostile, "dynsym"}, {s.hostile, "strtab"},
			{s.goELF, "gopclntab"}, {s.goELF, "nfunc"},
		} {
			f := filepath.Join("/tmp", fmt.Sprintf("slurmscope-lie-%d-%s", os.Getpid(), c.kind))
			t.Cleanup(func() { os.Remove(f) })
			h.as(s.attacker, "lie", c.src, f, c.kind)
			files = append(files, f)
		}
		h.attack(append([]string{"map"}, files...)...)
		h.run()
		if n := h.counter("agent_symbolize_errors_total", `reason="too_large"`); n < float64(len(files)) {
			t.Errorf("too_large = %v, want one per lying file (%d) at least", n, len(files))
		}
		h.stop()
	})

	t.Run("SparseFilesForTheUnwinderAndPython", func(t *testing.T) {
		// 1 GiB sparse files (a few KiB on disk), mapped executable: one
		// whose section names claim the GiB, which the unwinder's table
		// builder and the symbolizer read; one named like a libpython
		// whose symbols' names claim it, which the CPython reader reads.
		// Each reader refuses what it reads before parsing it, counted
		// under its name.
		h := s.start(t)
		names := filepath.Join("/tmp", fmt.Sprintf("slurmscope-lie-%d-shstrtab", os.Getpid()))
		py := filepath.Join("/tmp", fmt.Sprintf("slurmscope-lie-%d-libpython3.13.so", os.Getpid()))
		t.Cleanup(func() { os.Remove(names); os.Remove(py) })
		h.as(s.attacker, "lie", s.hostile, names, "shstrtab")
		h.as(s.attacker, "lie", s.hostile, py, "strtab")
		h.attack("map", names, py)
		h.run()
		for _, reader := range []string{"unwind", "python", "symbolize"} {
			h.wantCounted("agent_elf_refused_total", `reader="`+reader+`",reason="too_large"`)
		}
		h.stop()
		ps := h.ag.cmd.ProcessState
		// Refused before anything is read, the files cost nothing: the
		// agent stays near its idle size, far under stop's bound.
		if rss := int64(ps.SysUsage().(*syscall.Rusage).Maxrss) << 10; rss > s.memoryMax/4 {
			t.Errorf("agent peak RSS %d MiB, over a quarter of its memory limit (%d MiB)", rss>>20, s.memoryMax>>20)
		}
	})

	t.Run("HugePerfMaps", func(t *testing.T) {
		// A 56 MiB perf map for each of 12 processes.
		h := s.start(t)
		big := filepath.Join("/tmp", fmt.Sprintf("slurmscope-bigmap-%d", os.Getpid()))
		t.Cleanup(func() { os.Remove(big) })
		h.as(s.attacker, "bigmap", big, "56")
		for range 12 {
			h.attack("jit", "link", big)
		}
		h.run()
		// They do not fit the job's share together: the job's own evict
		// each other, and the job holds no more than its share.
		h.wantCounted("agent_memory_budget_evictions_total", `kind="perf_map"`)
		if held := h.counter("agent_memory_budget_used_bytes", `kind="perf_map"`); held > 128<<20 {
			t.Errorf("perf maps hold %.0f MiB, over a job's share (128 MiB)", held/(1<<20))
		}
		h.stop()
	})

	t.Run("PerfMapsReplacedBetweenLookups", func(t *testing.T) {
		// Perf maps whose inode changes all the time: every lookup would
		// read one again from scratch. The job's read allowance bounds it.
		h := s.start(t, "--job-read-burst-bytes", strconv.Itoa(64<<20), "--job-read-bytes-per-second", strconv.Itoa(4<<20))
		a := filepath.Join("/tmp", fmt.Sprintf("slurmscope-churn-%d-a", os.Getpid()))
		b := filepath.Join("/tmp", fmt.Sprintf("slurmscope-churn-%d-b", os.Getpid()))
		t.Cleanup(func() { os.Remove(a); os.Remove(b) })
		h.as(s.attacker, "bigmap", a, "16")
		h.as(s.attacker, "bigmap", b, "16")
		for range 6 {
			h.attack("jit", "churn", a, b)
		}
		h.run()
		h.wantCounted("agent_job_file_reads_deferred_total", "")
		h.stop()
	})

	t.Run("PythonMemoryOnFUSE", func(t *testing.T) { testPythonMemoryOnFUSE(t, s) })
	t.Run("ForgedDebugOffsets", func(t *testing.T) { testForgedDebugOffsets(t, s) })
	t.Run("SharedTables", func(t *testing.T) { testSharedTables(t, s) })

	t.Run("ForgedGPURecords", func(t *testing.T) {
		// The marker functions are exported: a job that loads the
		// injection library calls them with forged records.
		lib := filepath.Join(s.work, "gpu")
		if out, err := exec.Command("sh", "../gpuinject/build.sh", lib).CombinedOutput(); err != nil {
			t.Fatalf("building the injection library: %v\n%s", err, out)
		}
		so := filepath.Join(lib, "libslurmscope_inject.so")
		must(t, os.Chmod(lib, 0o755))
		h := s.start(t, "--gpu-inject-lib", so)
		// After the agent: a process announces each kernel name once, at
		// its first launch, and a name announced before the probes were
		// attached is never seen.
		h.startAgent()
		h.innocentToo("gpu", so, "victim")
		h.attack("gpu", so, "forge")
		h.attack("gpu", so, "forge")
		h.run()
		h.wantCounted("agent_gpu_trace_lost_total", `reason="folded"`)
		h.stop()
		if n := h.intervalsWith(h.innocentJob, "gpu", "victim_kernel"); n < 3 {
			t.Errorf("the innocent job's kernel is in %d gpu profiles, want one each interval (3 at least)", n)
		}
		if n := h.intervalsWith(h.attackerJob, "gpu", "[gpu time over the memory budget]"); n == 0 {
			t.Error("the forged records never reached the over-budget row: the attack did not reach the bound")
		}
	})
}

// hostileRun is one attack: an agent, an innocent job and the attacker's.
type hostileRun struct {
	t                        *testing.T
	s                        *hostileSetup
	out                      string
	cg                       *memcg.Group
	innocentJob, attackerJob *simjob.Job
	agentArgs                []string
	ag                       *agentProc
	metricsAt                string
}

var hostileJobSeq = 0

func (s *hostileSetup) start(t *testing.T, agentArgs ...string) *hostileRun {
	t.Helper()
	hostileJobSeq++
	base := 4100000 + (os.Getpid()%1000)*100 + hostileJobSeq*2
	h := &hostileRun{t: t, s: s, agentArgs: agentArgs}
	var err error
	if h.innocentJob, err = simjob.Create("slurmscope-hostile.slice", strconv.Itoa(base)); err != nil {
		t.Fatal(err)
	}
	if h.attackerJob, err = simjob.Create("slurmscope-hostile.slice", strconv.Itoa(base+1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// What is left in them (a fork storm's children) goes first.
		for _, j := range []*simjob.Job{h.innocentJob, h.attackerJob} {
			os.WriteFile(filepath.Join(j.Leaf, "cgroup.kill"), []byte("1"), 0)
			j.Remove()
		}
	})
	h.out = filepath.Join(t.TempDir(), "profiles")
	if h.cg, err = memcg.Create(fmt.Sprintf("slurmscope-hostile-%d", os.Getpid()), s.memoryMax); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.cg.Remove() })
	h.innocentToo("innocent")
	return h
}

// spawn runs the hostile program as uid in job, waiting for it to say it
// is ready; it is killed at cleanup.
func (h *hostileRun) spawn(job *simjob.Job, uid int, args ...string) {
	h.t.Helper()
	cmd := h.command(job, uid, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	// The perf map it planted (sh exec'd it: same pid), once it is dead;
	// a link to a big map would keep that on disk.
	pid := cmd.Process.Pid
	h.t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid)) })
	killAtCleanup(h.t, cmd)
	type said struct {
		line string
		err  error
	}
	ready := make(chan said, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		ready <- said{line, err}
	}()
	select {
	case r := <-ready:
		if r.err != nil || strings.TrimSpace(r.line) != "ready" {
			h.t.Fatalf("hostile %v: %q, %v", args, r.line, r.err)
		}
	case <-time.After(time.Minute):
		h.t.Fatalf("hostile %v: not ready after a minute", args)
	}
}

// command is the hostile program as uid in job: a root shell joins the
// job's cgroup, then drops to uid (setpriv) and execs it.
func (h *hostileRun) command(job *simjob.Job, uid int, args ...string) *exec.Cmd {
	const join = `procs=$0 uid=$1 bin=$2; shift 2
echo $$ > "$procs" && exec setpriv --reuid="$uid" --regid="$uid" --clear-groups --inh-caps=-all -- "$bin" "$@"`
	argv := append([]string{"-c", join, filepath.Join(job.Leaf, "cgroup.procs"), strconv.Itoa(uid), h.s.hostile}, args...)
	cmd := exec.Command("sh", argv...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_JOB_ID=" + job.ID, "SLURM_JOB_NAME=hostile-" + job.ID, "CUDA_VISIBLE_DEVICES=0"}
	return cmd
}

// as runs the hostile program as uid (in no job) to completion.
func (h *hostileRun) as(uid int, args ...string) {
	h.t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(uid),
		"--clear-groups", "--inh-caps=-all", "--", h.s.hostile}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		h.t.Fatalf("hostile %v: %v\n%s", args, err, out)
	}
}

func (h *hostileRun) attack(args ...string)      { h.spawn(h.attackerJob, h.s.attacker, args...) }
func (h *hostileRun) innocentToo(args ...string) { h.spawn(h.innocentJob, h.s.innocent, args...) }

// run starts the agent (unless started) and waits until the innocent job
// has been profiled in 4 intervals while the attack runs.
func (h *hostileRun) run() {
	h.t.Helper()
	if h.ag == nil {
		h.startAgent()
	}
	deadline := time.Now().Add(90 * time.Second)
	// /metrics answers throughout: scraped once a second.
	var slowest time.Duration
	nextScrape := time.Now()
	defer func() { h.t.Logf("/metrics answered in %v at the slowest", slowest.Round(10*time.Microsecond)) }()
	for h.intervalsWith(h.innocentJob, "process_cpu", innocentFunction) < 4 {
		if time.Now().After(nextScrape) {
			slowest = max(slowest, h.scrapeWithin(2*time.Second))
			nextScrape = time.Now().Add(time.Second)
		}
		if time.Now().After(deadline) {
			h.ag.logMetrics(h.t, "slurmscope_agent")
			// Its goroutines, into its log (printed as the test fails).
			h.ag.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-h.ag.done:
				h.ag.exited = true
			case <-time.After(5 * time.Second):
			}
			h.t.Fatalf("the innocent job was profiled in %d intervals in 90 s while the attack ran, want 4 (one every 2 s)",
				h.intervalsWith(h.innocentJob, "process_cpu", innocentFunction))
		}
		select {
		case <-h.ag.done:
			h.ag.exited = true
			h.t.Fatalf("the agent exited during the attack: %v", h.ag.err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startAgent starts the agent under the unit's memory limit.
func (h *hostileRun) startAgent() {
	h.t.Helper()
	args := append([]string{"run", "--output-dir", h.out, "--upload-interval", "2s", "--rescan-interval", "500ms",
		"--node-name", "hostile-node", "--gpu-metrics=false", "--metrics-addr", "127.0.0.1:0",
		"--slurm-cgroup-v2-parent", h.innocentJob.Parent, "--slurm-cgroup-v1-parent", h.innocentJob.Parent}, h.agentArgs...)
	argv := h.cg.Wrap(append([]string{h.s.agent}, args...)...)
	h.ag = launchAgent(h.t, nil, argv[0], argv[1:]...)
	// It logs that it serves /metrics just after it starts profiling.
	h.ag.waitLog(h.t, "did not start profiling", func(log string) bool {
		return strings.Contains(log, "msg=profiling") && metricsAddr.MatchString(log)
	})
	h.metricsAt = h.ag.servingAddr(h.t)
}

// stop sends SIGTERM and checks the agent exits 0 within 30 s, was never
// OOM-killed and kept its peak RSS under the Go runtime's soft limit the
// agent sets from the cgroup's (3/4 of it): the budget holds what jobs
// make it keep to 3/8 of the limit, and the heap is about twice that.
func (h *hostileRun) stop() {
	h.t.Helper()
	h.ag.logMetrics(h.t, "slurmscope_agent_")
	h.ag.cmd.Process.Signal(syscall.SIGTERM)
	termAt := time.Now()
	select {
	case <-h.ag.done:
		h.t.Logf("the agent exited %v after SIGTERM", time.Since(termAt).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		// Its goroutines, into its log (printed as the test fails).
		h.ag.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-h.ag.done:
		case <-time.After(5 * time.Second):
		}
		h.t.Fatal("the agent did not stop within 30 s of SIGTERM")
	}
	h.ag.exited = true
	if h.ag.err != nil {
		h.t.Errorf("the agent after SIGTERM: %v (want exit 0)", h.ag.err)
	}
	kills, err := h.cg.OOMKills()
	if err != nil {
		h.t.Fatal(err)
	}
	if kills != 0 {
		h.t.Errorf("the OOM killer killed %d processes of the agent's cgroup (limit %d MiB)", kills, h.s.memoryMax>>20)
	}
	// The shell that joined the cgroup exec'd the agent: its rusage is
	// the agent's.
	ps := h.ag.cmd.ProcessState
	rss := int64(ps.SysUsage().(*syscall.Rusage).Maxrss) << 10
	peak, _ := h.cg.Peak()
	h.t.Logf("agent peak RSS %.1f MiB, cgroup peak %.1f MiB (page cache included), limit %d MiB; CPU user %.2f s, system %.2f s",
		float64(rss)/(1<<20), float64(peak)/(1<<20), h.s.memoryMax>>20, ps.UserTime().Seconds(), ps.SystemTime().Seconds())
	if rss > h.s.memoryMax*3/4 {
		h.t.Errorf("agent peak RSS %d MiB, over 3/4 of its memory limit (%d MiB)", rss>>20, h.s.memoryMax>>20)
	}
}

// profiles returns the profiles of job of profile type typ.
func (h *hostileRun) profiles(job *simjob.Job, typ string) []*profile.Profile {
	h.t.Helper()
	paths, _ := filepath.Glob(filepath.Join(h.out, job.ID, typ+"-*.pb.gz"))
	var out []*profile.Profile
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		prof, err := profile.Parse(f)
		f.Close()
		if err == nil {
			out = append(out, prof)
		}
	}
	return out
}

// intervalsWith counts job's profiles of type typ that name function fn.
func (h *hostileRun) intervalsWith(job *simjob.Job, typ, fn string) int {
	n := 0
	for _, p := range h.profiles(job, typ) {
		for _, f := range p.Function {
			if f.Name == fn {
				n++
				break
			}
		}
	}
	return n
}

// wantNowhere checks no profile of any job holds text: in a function or
// file name, a mapping or a label.
func (h *hostileRun) wantNowhere(text string) {
	h.t.Helper()
	paths, _ := filepath.Glob(filepath.Join(h.out, "*", "*.pb.gz"))
	if len(paths) == 0 {
		h.t.Fatal("no profiles at all")
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			h.t.Fatal(err)
		}
		prof, err := profile.Parse(f)
		f.Close()
		if err != nil {
			h.t.Fatal(err)
		}
		var strs []string
		for _, fn := range prof.Function {
			strs = append(strs, fn.Name, fn.SystemName, fn.Filename)
		}
		for _, m := range prof.Mapping {
			strs = append(strs, m.File, m.BuildID)
		}
		for _, s := range prof.Sample {
			for k, vs := range s.Label {
				strs = append(strs, k)
				strs = append(strs, vs...)
			}
		}
		strs = append(strs, prof.Comments...)
		for _, s := range strs {
			if strings.Contains(s, text) {
				h.t.Errorf("%s holds %q", p, s)
			}
		}
	}
}

// counter sums the series of the agent's metric slurmscope_<name> whose
// labels contain match.
func (h *hostileRun) counter(name, match string) float64 {
	h.t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + h.metricsAt + "/metrics")
	if err != nil {
		h.t.Fatalf("scraping the agent: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	line := regexp.MustCompile(`^slurmscope_` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
	var sum float64
	for _, l := range strings.Split(string(body), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil || !strings.Contains(m[1], match) {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		sum += v
	}
	return sum
}

func (h *hostileRun) wantCounted(name, match string) {
	h.t.Helper()
	if n := h.counter(name, match); n == 0 {
		h.t.Errorf("slurmscope_%s{%s} is 0: the attack was not seen", name, match)
	}
}

// unitMemoryMax reads MemoryMax from the agent's systemd unit, so that the
// test runs the agent under the limit it is deployed with.
func unitMemoryMax(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("../deploy/slurmscope-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^MemoryMax=(\d+)([KMG]?)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("deploy/slurmscope-agent.service has no MemoryMax=<n>[KMG]")
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n << map[string]int{"": 0, "K": 10, "M": 20, "G": 30}[string(m[2])]
}

func lookupUID(t *testing.T, name string) int {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	return uid
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
