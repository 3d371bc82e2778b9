package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv/simjob"
)

// testPythonMemoryOnFUSE is TestHostileJobs/PythonMemoryOnFUSE. The
// attacker runs Python whose code objects' names point at pages of a file
// on its own FUSE mount (internal/testenv/workloads/stallfs.c: it answers
// everything but reads, which it never answers): first a mapping of that
// file, then the same file mapped over memory the agent saw anonymous
// when it set the process up (fuse_names.py). An agent that read either
// would wait forever, and FUSE waits uninterruptibly once its daemon has
// the request: the agent could not even exit. Beside it an innocent
// Python job of another user must keep its Python frames interval after
// interval, /metrics must answer within 2 s throughout, the daemon must
// see no read at all, and the agent must stop on SIGTERM.
//
// /dev/fuse is root's here (and fusermount absent): the test does what
// setuid fusermount does for a user, opening /dev/fuse, mounting it for
// the attacker's uid (no allow_other) and handing the descriptor to the
// attacker's daemon, which then runs as the attacker. The mount lives in
// a mount namespace of the attacker's processes only.
func testPythonMemoryOnFUSE(t *testing.T, s *hostileSetup) {
	const py = "/usr/bin/python3.11" // Debian's, as the stack tests require
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("Debian's python3.11 is required (scripts/deps.sh installs it): %v", err)
	}
	stallfs := filepath.Join(s.work, "stallfs")
	if out, err := exec.Command("gcc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-o", stallfs,
		"../internal/testenv/workloads/stallfs.c").CombinedOutput(); err != nil {
		t.Fatalf("building stallfs: %v\n%s", err, out)
	}
	scripts := map[string]string{}
	for _, name := range []string{"fuse_names.py", "split.py"} {
		b, err := os.ReadFile(filepath.Join("..", "internal", "testenv", "workloads", "python", name))
		must(t, err)
		scripts[name] = filepath.Join(s.work, name)
		must(t, os.WriteFile(scripts[name], b, 0o644))
	}
	mnt := filepath.Join(s.work, "fuse")
	must(t, os.Mkdir(mnt, 0o755))
	must(t, os.Chown(mnt, s.attacker, s.attacker))
	daemonLog := filepath.Join(s.work, "stallfs.log")

	h := s.start(t)
	h.spawnPython(h.innocentJob, s.innocent, py, scripts["split.py"], "3600")
	h.startAgent()
	h.ag.waitLog(t, "did not serve /metrics", func(log string) bool { return metricsAddr.MatchString(log) })
	h.metricsAt = h.ag.servingAddr(h.t)
	att := h.fuseAttacker(py, stallfs, scripts["fuse_names.py"], mnt, daemonLog)

	// The first attack: a name in a mapping of the file, from the start.
	h.waitCounted(`agent_interpreter_frames_total`, `result="refused_mapping"`)
	// The second, once the agent has set the process up and seen the
	// first: the file over memory that was anonymous.
	att.send("swap")
	att.expect("swapped")
	h.waitCounted(`agent_interpreter_frames_total`, `result="not_resident"`)

	// The innocent job, while the attacker runs both: its Python frames in
	// three more intervals, /metrics answering all along.
	start := h.intervalsWith(h.innocentJob, "process_cpu", "hot_a")
	deadline := time.Now().Add(90 * time.Second)
	var took []time.Duration
	for h.intervalsWith(h.innocentJob, "process_cpu", "hot_a") < start+3 {
		if time.Now().After(deadline) {
			h.ag.logMetrics(t, "slurmscope_agent")
			h.ag.cmd.Process.Signal(syscall.SIGQUIT)
			time.Sleep(2 * time.Second)
			t.Fatalf("the innocent job's Python frames in %d intervals in 90 s during the attack, want 3",
				h.intervalsWith(h.innocentJob, "process_cpu", "hot_a")-start)
		}
		took = append(took, h.scrapeWithin(2*time.Second).Round(time.Millisecond))
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("/metrics answered %d scrapes during the attack, in %v", len(took), took)
	h.run() // and its native job, as in every attack

	if n := h.counter("agent_interpreter_frames_total", `result="stalled"`); n != 0 {
		t.Errorf("%v frames stalled: a read reached the job's FUSE pages", n)
	}
	b, _ := os.ReadFile(daemonLog)
	if reads := strings.Count(string(b), "not answered"); reads != 0 {
		t.Errorf("the attacker's FUSE daemon got %d reads: something faulted its file in\n%s", reads, b)
	}
	h.stop()
}

// waitCounted waits up to 60 s for slurmscope_<name>{match} to count.
func (h *hostileRun) waitCounted(name, match string) {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for h.counter(name, match) == 0 {
		if time.Now().After(deadline) {
			h.ag.logMetrics(h.t, "slurmscope_agent_unwind")
			h.ag.logMetrics(h.t, "slurmscope_agent_interpreter")
			h.t.Fatalf("slurmscope_%s{%s} still 0 after 60 s: the attack was not seen", name, match)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scrapeWithin scrapes /metrics, failing the test if it does not answer
// within limit, and returns how long it took.
func (h *hostileRun) scrapeWithin(limit time.Duration) time.Duration {
	h.t.Helper()
	t0 := time.Now()
	resp, err := (&http.Client{Timeout: limit}).Get("http://" + h.metricsAt + "/metrics")
	if err != nil {
		// How long it does take, then its goroutines, into its log.
		t1 := time.Now()
		_, err2 := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + h.metricsAt + "/metrics")
		h.t.Logf("a second scrape: %v after %v", err2, time.Since(t1).Round(time.Millisecond))
		h.ag.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-h.ag.done:
			h.ag.exited = true
		case <-time.After(5 * time.Second):
		}
		h.t.Fatalf("/metrics did not answer within %v during the attack: %v", limit, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(t0)
}

// spawnPython runs python script args as uid in job, waiting for it to
// say it is ready; it is killed at cleanup.
func (h *hostileRun) spawnPython(job *simjob.Job, uid int, python string, args ...string) {
	h.t.Helper()
	const join = `procs=$0 uid=$1; shift
echo $$ > "$procs" && exec setpriv --reuid="$uid" --regid="$uid" --clear-groups --inh-caps=-all -- "$@"`
	cmd := exec.Command("sh", append([]string{"-c", join, filepath.Join(job.Leaf, "cgroup.procs"), strconv.Itoa(uid), python}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_JOB_ID=" + job.ID, "SLURM_JOB_NAME=python-" + job.ID}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	must(h.t, err)
	must(h.t, cmd.Start())
	killAtCleanup(h.t, cmd)
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		h.t.Fatalf("%s %v: %q, %v", python, args, line, err)
	}
}

// fuseProc is the attacker's Python, talked to on its stdin and stdout.
type fuseProc struct {
	t   *testing.T
	in  io.Writer
	out *bufio.Reader
}

func (p *fuseProc) send(line string) {
	p.t.Helper()
	if _, err := fmt.Fprintln(p.in, line); err != nil {
		p.t.Fatal(err)
	}
}

func (p *fuseProc) expect(want string) {
	p.t.Helper()
	if line, err := p.out.ReadString('\n'); err != nil || strings.TrimSpace(line) != want {
		p.t.Fatalf("the attacker said %q (%v), want %q", line, err, want)
	}
}

// fuseAttacker mounts stallfs for the attacker in a mount namespace of
// its own, starts its daemon as the attacker, and runs fuse_names.py on
// its file as the attacker in the attacker's job. Both are killed at
// cleanup (the daemon first, after the agent has stopped: its death
// fails any read left waiting).
func (h *hostileRun) fuseAttacker(python, stallfs, script, mnt, daemonLog string) *fuseProc {
	h.t.Helper()
	const attack = `procs=$0 uid=$1 mnt=$2 stallfs=$3 log=$4 pidfile=$5 python=$6 script=$7
drop="setpriv --reuid=$uid --regid=$uid --clear-groups --inh-caps=-all --"
echo $$ > "$procs" || exit 1
exec 3<>/dev/fuse || exit 1
mount -t fuse -o "fd=3,rootmode=40000,user_id=$uid,group_id=$uid,nosuid,nodev" stallfs "$mnt" || exit 1
$drop "$stallfs" 3 2>"$log" &
echo $! > "$pidfile"
exec 3>&-
exec $drop "$python" "$script" "$mnt/bait"`
	pidfile := filepath.Join(h.s.work, "stallfs.pid")
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", attack,
		filepath.Join(h.attackerJob.Leaf, "cgroup.procs"), strconv.Itoa(h.s.attacker), mnt, stallfs, daemonLog, pidfile, python, script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_JOB_ID=" + h.attackerJob.ID, "SLURM_JOB_NAME=hostile-" + h.attackerJob.ID}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	must(h.t, err)
	stdout, err := cmd.StdoutPipe()
	must(h.t, err)
	must(h.t, cmd.Start())
	killAtCleanup(h.t, cmd)
	h.t.Cleanup(func() {
		if b, err := os.ReadFile(pidfile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	p := &fuseProc{t: h.t, in: in, out: bufio.NewReader(stdout)}
	p.expect("ready")
	return p
}
