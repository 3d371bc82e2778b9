package walktest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/internal/testenv/simjob"
)

// needIntegration skips unless the test can load BPF; with
// SLURMSCOPE_INTEGRATION=1 nothing is skipped (a missing prerequisite then
// fails), as in agent/cpu.
func needIntegration(t testing.TB) {
	t.Helper()
	if os.Getenv("SLURMSCOPE_INTEGRATION") != "1" && os.Geteuid() != 0 {
		t.Skip("needs root (or SLURMSCOPE_INTEGRATION=1)")
	}
}

func integration() bool { return os.Getenv("SLURMSCOPE_INTEGRATION") == "1" }

// interp is a real CPython to run workloads with.
type interp struct {
	name  string // "debian-3.11", "pyenv-3.12", "pyenv-3.12-venv"
	path  string
	minor int
}

func pyenvVersions() string {
	if r := os.Getenv("PYENV_ROOT"); r != "" {
		return filepath.Join(r, "versions")
	}
	return "/root/.pyenv/versions"
}

// interpreters returns Debian's python3.11 (required under
// SLURMSCOPE_INTEGRATION=1), every pyenv CPython 3.9-3.13 here, and a venv
// of Debian's and of the newest pyenv one. A pyenv version that is not
// installed is skipped by name.
func interpreters(t *testing.T) []interp {
	t.Helper()
	var out []interp
	if _, err := os.Stat("/usr/bin/python3.11"); err == nil {
		out = append(out, interp{"debian-3.11", "/usr/bin/python3.11", 11})
	} else if integration() {
		t.Fatal("Debian's python3.11 is required (apt-get install python3.11; scripts/deps.sh installs it)")
	}
	for _, minor := range python.SupportedVersions() {
		m, _ := filepath.Glob(filepath.Join(pyenvVersions(), fmt.Sprintf("3.%d.*", minor), "bin", fmt.Sprintf("python3.%d", minor)))
		if len(m) == 0 {
			t.Logf("pyenv CPython 3.%d: not installed, skipped", minor)
			continue
		}
		sort.Strings(m)
		out = append(out, interp{fmt.Sprintf("pyenv-3.%d", minor), m[len(m)-1], minor})
	}
	return out
}

// venv makes a venv of base (without pip: nothing is fetched).
func venv(t *testing.T, base interp) interp {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(base.path, "-m", "venv", "--without-pip", dir).CombinedOutput(); err != nil {
		t.Fatalf("%s -m venv: %v\n%s", base.path, err, out)
	}
	return interp{base.name + "-venv", filepath.Join(dir, "bin", "python"), base.minor}
}

// workload is a script of internal/testenv/workloads/python.
func workload(name string) string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..", "..", "internal", "testenv", "workloads", "python", name)
}

// mapFilesOpener opens a mapping's file through /proc/<pid>/map_files,
// which names exactly the mapped object; a test stand-in for procfs's
// opener of files a job controls.
type mapFilesOpener struct{}

func (mapFilesOpener) OpenMapped(pid int, m python.Mapping) (python.File, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End))
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", m.Path)
	}
	return f, nil
}

var _ python.Opener = mapFilesOpener{}

// got is one resolved sample.
type got struct {
	pid, tid  uint32
	status    python.Status
	py        []python.Frame
	truncated bool
	rawLen    int
	spliced   []symbolize.Frame
	evalSeen  bool // the native stack had an eval-loop frame
}

// pyNames returns the Python functions of a sample, innermost first.
func (g got) pyNames() []string {
	out := make([]string, len(g.py))
	for i, f := range g.py {
		out[i] = f.Function
	}
	return out
}

// hasIn reports whether a sample has function fn of file file.
func (g got) hasIn(fn, file string) bool {
	for _, f := range g.py {
		if f.Function == fn && f.File == file {
			return true
		}
	}
	return false
}

func (g got) has(fn string) bool {
	for _, f := range g.py {
		if f.Function == fn {
			return true
		}
	}
	return false
}

// session is a probe on a simulated job's cgroup, with a Tracker fed by its
// events and every sample resolved as it arrives (short-lived processes
// must be read before they exit, as the agent must).
type session struct {
	t       *testing.T
	job     *simjob.Job
	cgfd    int
	probe   *Probe
	tracker *python.Tracker
	sym     *symbolize.Symbolizer
	mu      sync.Mutex
	got     []got
	wg      sync.WaitGroup
	stop    chan struct{}
	cmds    []*exec.Cmd
}

var jobSeq int

func newSession(t *testing.T, hz int) *session {
	t.Helper()
	needIntegration(t)
	jobSeq++
	job, err := simjob.Create("slurmscope-pytest.slice", fmt.Sprintf("%d", 900000+os.Getpid()%10000*10+jobSeq%10))
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, job: job, stop: make(chan struct{}), sym: symbolize.New(symbolize.Options{Proc: procfs.New("")})}
	if s.cgfd, err = syscall.Open(job.Leaf, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err != nil {
		t.Fatal(err)
	}
	if s.probe, err = Load(true); err != nil {
		t.Fatal(err)
	}
	s.tracker = python.NewTracker(python.TrackerOptions{
		Arch: python.Arch(runtime.GOARCH), Maps: python.ProcMaps{Root: "/proc"}, Open: mapFilesOpener{}, Procs: s.probe.Procs(),
	})
	if err := s.probe.AttachCgroup(job.Leaf, hz); err != nil {
		t.Fatal(err)
	}
	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		for {
			ev, err := s.probe.ReadEvent()
			if err != nil {
				return
			}
			s.tracker.Notify(ev)
		}
	}()
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				s.tracker.Retry()
			}
		}
	}()
	go func() {
		defer s.wg.Done()
		for {
			smp, err := s.probe.ReadSample()
			if err != nil {
				return
			}
			s.resolve(smp)
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *session) resolve(smp Sample) {
	g := got{pid: smp.PID, tid: smp.TID, status: python.Status(smp.Py.Status), rawLen: int(smp.Py.Len)}
	g.py, g.truncated = s.tracker.Resolve(smp.PID, smp.StartBoottime, &smp.Py)
	native := s.sym.User(procfs.ID{PID: int(smp.PID), Start: StartTimeTicks(smp.StartBoottime)}, smp.UserStack)
	for _, f := range native {
		g.evalSeen = g.evalSeen || python.IsEvalFrame(f)
	}
	g.spliced = python.Splice(native, g.py, g.truncated)
	s.mu.Lock()
	s.got = append(s.got, g)
	s.mu.Unlock()
}

// start runs a workload inside the job (CLONE_INTO_CGROUP: it is sampled
// from its first instruction) and waits for it to print "ready"; lines
// before that are returned.
func (s *session) start(py interp, args ...string) (*exec.Cmd, []string) {
	s.t.Helper()
	cmd := exec.Command(py.path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: s.cgfd}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.cmds = append(s.cmds, cmd)
	var lines []string
	r := bufio.NewReader(out)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("%s %v: no ready line: %v (got %q)", py.name, args, err, lines)
		}
		line = strings.TrimSpace(line)
		if line == "ready" {
			go io.Copy(io.Discard, r)
			return cmd, lines
		}
		lines = append(lines, line)
	}
}

// wait waits for a workload, then for the samples in flight.
func (s *session) wait(cmd *exec.Cmd) {
	s.t.Helper()
	if err := cmd.Wait(); err != nil {
		s.t.Fatalf("workload: %v", err)
	}
}

// samples returns the samples so far, once the ring buffer is drained.
func (s *session) samples() []got {
	time.Sleep(100 * time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]got(nil), s.got...)
}

func (s *session) close() {
	for _, c := range s.cmds {
		if c.ProcessState == nil {
			c.Process.Kill()
			c.Wait()
		}
	}
	close(s.stop)
	s.probe.Close()
	s.wg.Wait()
	syscall.Close(s.cgfd)
	if err := s.job.Remove(); err != nil {
		s.t.Logf("removing the job's cgroup: %v", err)
	}
}

// logStats logs the walk's and the tracker's counters.
func (s *session) logStats() {
	by, dropped, trunc, err := s.probe.Stats()
	if err != nil {
		s.t.Error(err)
	}
	var parts []string
	for i, n := range by {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", python.Status(i), n))
		}
	}
	st := s.tracker.Stats()
	s.t.Logf("walks: %s; dropped %d, truncated %d; tracker: found %v skipped %v code hits %d misses %d bad %d",
		strings.Join(parts, " "), dropped, trunc, st.Found, st.Skipped, st.CodeHits, st.CodeMisses, st.CodeBad)
	if dropped > 0 {
		s.t.Errorf("%d samples dropped (ring buffer full)", dropped)
	}
}
