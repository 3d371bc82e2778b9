package e2e

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv/promtest"
)

// Helpers shared by the e2e tests: free ports, the agent process, and a
// Debian prometheus.

// The tests run in two lanes side by side (on a 2-vCPU host each lane
// takes about 270 s alone; one after the other they took 560 s): the tests
// that start a SLURM cluster, one at a time as slurmtest's host-wide lock
// requires, and the tests on simulated jobs, each in a slice of its own
// whose agent takes only that slice's jobs (v1 and v2 parents), so that
// neither lane's agents see the other's jobs. Load from the other lane
// changes no assertion: shares are of CPU time, and deadlines wait for
// an event. The tests that must run alone go after both lanes have
// drained: taken in turn with the lanes, an alone test that held one lane
// while it waited for the other left that lane idle (200 s of 550 in CI).
var (
	slurmLane, simLane testLane
	lanes              = newLaneSchedule(&slurmLane, &simLane)
)

// testLane runs one test at a time.
type testLane struct{ busy bool }

// laneSchedule admits a test to its lane when the lane is free and no
// test runs alone, and an alone test when every lane is free and no lane
// test is still to run. Tests register before t.Parallel, in the
// sequential phase, so that every lane test is counted before any
// parallel test is admitted.
type laneSchedule struct {
	mu      sync.Mutex
	cond    *sync.Cond
	lanes   []*testLane
	pending int // lane tests registered and not yet admitted
	alone   bool
}

func newLaneSchedule(lanes ...*testLane) *laneSchedule {
	s := &laneSchedule{lanes: lanes}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *laneSchedule) register() {
	s.mu.Lock()
	s.pending++
	s.mu.Unlock()
}

func (s *laneSchedule) enter(l *testLane) (leave func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l.busy || s.alone {
		s.cond.Wait()
	}
	l.busy = true
	s.pending--
	return func() { s.release(func() { l.busy = false }) }
}

func (s *laneSchedule) enterAlone() (leave func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.alone || s.pending > 0 || slices.ContainsFunc(s.lanes, func(l *testLane) bool { return l.busy }) {
		s.cond.Wait()
	}
	s.alone = true
	return func() { s.release(func() { s.alone = false }) }
}

func (s *laneSchedule) release(f func()) {
	s.mu.Lock()
	f()
	s.mu.Unlock()
	s.cond.Broadcast()
}

// lane runs t in parallel with the other lane's tests, after those of its
// own lane before it.
func lane(t *testing.T, l *testLane) {
	lanes.register()
	t.Parallel()
	start := time.Now()
	t.Cleanup(lanes.enter(l)) // the first cleanup registered runs last
	logQueued(t, start)
}

// logQueued says how long t waited for its lane: tools/testsum takes it
// from the test's elapsed time to list each test's own share of CI.
func logQueued(t *testing.T, since time.Time) {
	t.Logf("queued %s for its lane", time.Since(since).Round(time.Millisecond))
}

// alone runs t with neither lane beside it, once both have drained: the
// tests that judge CPU shares and the labels set in a job's first
// seconds. Beside the other lane's load (fork storms, a SLURM cluster
// starting) they found two agent bugs, since fixed (a process's last
// interval lost its Python frames; a v2 job was labelled root), and
// TestPushToPyroscope's spinner fell to 87% of its job's CPU (bar 90%) to
// the Go runtime's own threads.
func alone(t *testing.T) {
	t.Parallel()
	start := time.Now()
	t.Cleanup(lanes.enterAlone())
	logQueued(t, start)
}

// freeAddr returns a 127.0.0.1 address that nothing listened on a moment
// ago.
func freeAddr(t *testing.T) string { return promtest.FreeAddr(t) }

// agentProc is a running `slurmscope-agent`.
type agentProc struct {
	cmd    *exec.Cmd
	args   []string
	log    *lockedBuffer
	done   chan struct{}
	err    error
	exited bool
}

// startAgent starts bin with args and waits until the agent logs that it
// samples: jobs submitted before the sampler is attached would lose their
// first seconds.
func startAgent(t *testing.T, bin string, args ...string) *agentProc {
	t.Helper()
	p := launchAgent(t, nil, bin, args...)
	p.waitLog(t, "did not start sampling", func(log string) bool { return strings.Contains(log, "msg=profiling") })
	// /metrics is served a moment after: callers scrape it at once.
	if i := slices.Index(args, "--metrics-addr"); i >= 0 && i+1 < len(args) && args[i+1] != "" {
		p.servingAddr(t)
	}
	return p
}

// launchAgent starts bin with args, and env added to the test's
// environment, without waiting for anything. The process is killed at
// cleanup unless stopped, and its log is logged if t failed.
func launchAgent(t *testing.T, env []string, bin string, args ...string) *agentProc {
	t.Helper()
	p := &agentProc{args: args, log: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited {
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("agent %s log:\n%s", strings.Join(p.args, " "), p.log.String())
		}
	})
	return p
}

// waitLog waits up to 60 s for ok to hold of the agent's log so far; it
// fails t with what if it does not, or if the agent exits first.
func (p *agentProc) waitLog(t *testing.T, what string, ok func(log string) bool) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for !ok(p.log.String()) {
		select {
		case <-p.done:
			p.exited = true
			t.Fatalf("agent %s exited at start: %v\n%s", strings.Join(p.args, " "), p.err, p.log.String())
		case <-deadline:
			t.Fatalf("agent %s %s within 60s:\n%s", strings.Join(p.args, " "), what, p.log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var metricsAddr = regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)

// servingAddr returns the address the agent logged it serves /metrics
// on, or "".
// servingAddr waits until the agent logs where it serves /metrics (just
// after it logs that it profiles) and returns that address.
func (p *agentProc) servingAddr(t *testing.T) string {
	t.Helper()
	p.waitLog(t, "did not serve /metrics", func(log string) bool { return metricsAddr.MatchString(log) })
	return p.loggedAddr()
}

// loggedAddr is where the agent logged it serves /metrics, or "".
func (p *agentProc) loggedAddr() string {
	if m := metricsAddr.FindStringSubmatch(p.log.String()); m != nil {
		return m[1]
	}
	return ""
}

// logMetrics logs the agent's own metrics whose names start with prefix,
// and returns them.
func (p *agentProc) logMetrics(t *testing.T, prefix string) []string {
	t.Helper()
	lines := p.metrics(t, prefix)
	if lines != nil {
		t.Logf("agent metrics:\n%s", strings.Join(lines, "\n"))
	}
	return lines
}

// metrics scrapes the agent's /metrics and returns the lines that start
// with prefix; nil (logged) if it cannot.
func (p *agentProc) metrics(t *testing.T, prefix string) []string {
	t.Helper()
	addr := p.loggedAddr()
	if addr == "" {
		t.Log("the agent logged no metrics address")
		return nil
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Logf("agent metrics: %v", err)
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	lines := []string{}
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, prefix) {
			lines = append(lines, l)
		}
	}
	return lines
}

// stop sends SIGTERM, which must flush the last interval and exit 0.
func (p *agentProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		// Its goroutines, to show where it hangs.
		p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
			p.exited = true
		case <-time.After(10 * time.Second):
		}
		t.Fatalf("agent did not exit within a minute of SIGTERM:\n%s", p.log.String())
	}
	p.exited = true
	if p.err != nil {
		t.Errorf("agent after SIGTERM: %v (want exit 0)", p.err)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runPrometheus runs Debian's prometheus with config (the YAML) and a
// fresh tsdb in dir, plus flags, waits until it is ready and returns its
// URL.
func runPrometheus(t *testing.T, dir, config string, flags ...string) string {
	t.Helper()
	return promtest.Start(t, dir, config, flags...)
}

// evidenceDir is a temporary directory for profiles the agent writes. Not
// t.TempDir: when a check fails the profiles are the evidence, so they stay.
func evidenceDir(t *testing.T, prefix string) string {
	t.Helper()
	out, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("profiles kept in %s", out)
			return
		}
		os.RemoveAll(out)
	})
	return out
}
