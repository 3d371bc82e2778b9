package walktest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/python"
)

// BenchmarkBPFPerSample measures the BPF time of one sample (native user
// stack plus the Python walk) for a thread running Python and for a native
// thread, side by side, from the kernel's own accounting
// (kernel.bpf_stats_enabled: run_time_ns / run_cnt of each program). Two
// copies of the program run at once, one sampling the Python process and
// one the native one, so that both see the same machine.
//
//	go test -run '^$' -bench BPFPerSample ./agent/python/walktest/
//
// It reports python_ns/sample, native_ns/sample and python/native.
func BenchmarkBPFPerSample(b *testing.B) {
	needIntegration(b)
	const sysctl = "/proc/sys/kernel/bpf_stats_enabled"
	old, err := os.ReadFile(sysctl)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(sysctl, []byte("1"), 0o644); err != nil {
		b.Fatal(err)
	}
	defer os.WriteFile(sysctl, old, 0o644)

	native := buildCPUSplit(b)
	var ins []interp
	for _, in := range interpreters(&testing.T{}) {
		if in.name == "debian-3.11" || in.name == "pyenv-3.9" || in.name == "pyenv-3.12" || in.name == "pyenv-3.13" {
			ins = append(ins, in)
		}
	}
	for _, py := range ins {
		b.Run(py.name, func(b *testing.B) {
			var pyNs, natNs, pyRuns, natRuns float64
			for i := 0; i < b.N; i++ {
				p, n, pr, nr := measure(b, py, native, 2*time.Second)
				pyNs, natNs, pyRuns, natRuns = pyNs+p, natNs+n, pyRuns+pr, natRuns+nr
			}
			b.ReportMetric(pyNs/pyRuns, "python_ns/sample")
			b.ReportMetric(natNs/natRuns, "native_ns/sample")
			b.ReportMetric((pyNs/pyRuns)/(natNs/natRuns), "python/native")
			b.ReportMetric(pyRuns+natRuns, "samples")
		})
	}
}

// measure samples a Python split workload and a native one for d, each with
// its own copy of the program, and returns each program's BPF time and run
// count.
func measure(b *testing.B, py interp, native string, d time.Duration) (pyNs, natNs, pyRuns, natRuns float64) {
	pyProbe, err := Load(false)
	if err != nil {
		b.Fatal(err)
	}
	defer pyProbe.Close()
	natProbe, err := Load(false)
	if err != nil {
		b.Fatal(err)
	}
	defer natProbe.Close()

	pyCmd := exec.Command(py.path, workload("split.py"), fmt.Sprint(d.Seconds()+2))
	natCmd := exec.Command(native, fmt.Sprint(d.Seconds()+2))
	for _, c := range []*exec.Cmd{pyCmd, natCmd} {
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		defer func(c *exec.Cmd) { c.Process.Kill(); c.Wait() }(c)
	}
	tracker := python.NewTracker(python.TrackerOptions{
		Arch: python.Arch(runtime.GOARCH), Maps: python.ProcMaps{Root: "/proc"}, Open: mapFilesOpener{}, Procs: pyProbe.Procs(),
	})
	if err := pyProbe.AttachPID(pyCmd.Process.Pid, 997); err != nil {
		b.Fatal(err)
	}
	if err := natProbe.AttachPID(natCmd.Process.Pid, 997); err != nil {
		b.Fatal(err)
	}
	// Set the Python process up before measuring: the steady state, not
	// discovery, is what each sample costs.
	go func() {
		for {
			ev, err := pyProbe.ReadEvent()
			if err != nil {
				return
			}
			tracker.Notify(ev)
		}
	}()
	for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		tracker.Retry()
		if _, _, ok := tracker.Version(uint32(pyCmd.Process.Pid)); ok {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not set up: %v", py.name, tracker.Stats().Skipped)
		}
	}
	pi0, _ := pyProbe.Program().Stats()
	ni0, _ := natProbe.Program().Stats()
	time.Sleep(d)
	pi1, err := pyProbe.Program().Stats()
	if err != nil {
		b.Fatal(err)
	}
	ni1, _ := natProbe.Program().Stats()
	by, _, _, _ := pyProbe.Stats()
	if by[python.StatusOK] == 0 {
		b.Fatalf("no Python walks succeeded: %v", by)
	}
	return float64(pi1.Runtime - pi0.Runtime), float64(ni1.Runtime - ni0.Runtime),
		float64(pi1.RunCount - pi0.RunCount), float64(ni1.RunCount - ni0.RunCount)
}

// buildCPUSplit compiles the C split workload (frame pointers, as the
// native comparison should have a full native stack).
func buildCPUSplit(b *testing.B) string {
	out := filepath.Join(b.TempDir(), "cpusplit")
	src := filepath.Join(filepath.Dir(workload("x")), "..", "cpusplit.c")
	if o, err := exec.Command("gcc", "-O1", "-fno-omit-frame-pointer", "-fno-inline", "-o", out, src).CombinedOutput(); err != nil {
		b.Fatalf("gcc: %v\n%s", err, o)
	}
	return out
}
