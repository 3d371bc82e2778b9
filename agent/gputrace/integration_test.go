package gputrace

// Integration tests of the uprobes: they load BPF, so they need root (with
// SLURMSCOPE_INTEGRATION=1 nothing is skipped, so CI cannot pass by not
// testing). The C pieces are built with their own scripts (gpuinject/,
// internal/testenv/cudastandin/) plus testdata/markercall.c, which calls
// the markers directly.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// buildBinaries builds the injection library, the stand-ins and markercall
// into a fresh directory.
func buildBinaries(t testing.TB) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	dir := t.TempDir()
	for _, script := range []string{"../../gpuinject/build.sh", "../../internal/testenv/cudastandin/build.sh"} {
		// The stand-in CUPTI and runtime are built -O2, which omits frame
		// pointers; these tests' tracer has no unwind tables (no
		// Options.Stacks) and unwinds with frame pointers only, so build
		// them with, or the trainer's frames are cut off.
		c := exec.Command("sh", script, dir)
		c.Env = append(os.Environ(), "CC="+cc+" -fno-omit-frame-pointer")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	args := append(strings.Fields(cc), "-std=c11", "-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline",
		"-Wall", "-Wextra", "-Werror", "-I../../gpuinject", "-o", filepath.Join(dir, "markercall"), "testdata/markercall.c", "-ldl")
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("markercall: %v\n%s", err, out)
	}
	return dir
}

func newTracer(t testing.TB, opts Options) *Tracer {
	t.Helper()
	if opts.ExcludePID == 0 {
		opts.ExcludePID = os.Getpid()
	}
	tr, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// caller drives one markercall process.
type caller struct {
	t   testing.TB
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	pid int
	id  procfs.ID
}

func startCaller(t testing.TB, lib string, bin string) *caller {
	t.Helper()
	cmd := exec.Command(bin, lib, "script")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &caller{t: t, cmd: cmd, in: in, out: bufio.NewReader(out), pid: cmd.Process.Pid}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	c.expect("ready")
	if c.id, err = procfs.New("").ID(c.pid); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *caller) expect(want string) {
	c.t.Helper()
	line, err := c.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != want {
		c.t.Fatalf("markercall %d: got %q, %v; want %q", c.pid, line, err, want)
	}
}

// do sends commands and waits until markercall has run them all.
func (c *caller) do(cmds ...string) {
	c.t.Helper()
	for _, cmd := range cmds {
		if _, err := fmt.Fprintln(c.in, cmd); err != nil {
			c.t.Fatal(err)
		}
	}
	fmt.Fprintln(c.in, "sync")
	c.expect("ok")
}

func (c *caller) exit() {
	fmt.Fprintln(c.in, "exit")
	c.cmd.Wait()
}

type kernelTotal struct{ ns, launches uint64 }

func totalsOf(samples []Sample, pid int) map[string]kernelTotal {
	m := map[string]kernelTotal{}
	for _, s := range samples {
		if s.Proc.PID == pid {
			k := m[s.KernelRaw]
			k.ns += s.GPUTime
			k.launches += s.Launches
			m[s.KernelRaw] = k
		}
	}
	return m
}

func functions(frames []symbolize.Frame) []string {
	var out []string
	for _, f := range frames {
		out = append(out, f.Function)
	}
	return out
}

// The markers called directly: identity from the kernel, stacks of the
// launching functions, exact totals with unsampled records spread over the
// sampled stacks, and hostile arguments counted and dropped.
func TestIntegrationMarkers(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	dir := buildBinaries(t)
	lib := filepath.Join(dir, "libslurmscope_inject.so")
	tr := newTracer(t, Options{})
	sym := symbolize.New(symbolize.Options{})

	a := startCaller(t, lib, filepath.Join(dir, "markercall"))
	if err := tr.Attach(procfs.ID{PID: a.pid, Start: a.id.Start + 1}); err == nil {
		t.Fatal("Attach accepted a wrong start time")
	}
	if err := tr.Attach(a.id); err != nil {
		t.Fatal(err)
	}
	if err := tr.Attach(a.id); err != nil { // idempotent
		t.Fatal(err)
	}
	sym.Prepare(a.id)
	// A second process on the same library file: traced through the same
	// attachment, but as itself. It reuses a's correlation and name ids.
	b := startCaller(t, lib, filepath.Join(dir, "markercall"))
	sym.Prepare(b.id)

	gemm := nameIDOf([]byte("gemm_kernel"))
	other := nameIDOf([]byte("other_kernel"))
	var cmds []string
	cmds = append(cmds, fmt.Sprintf("name %x gemm_kernel", gemm), fmt.Sprintf("name %x other_kernel", other))
	// 3 sampled launches from outer_launch (100 ns each), 1 from other_path
	// (300 ns), 4 unsampled gemm records (1000 ns in all): the unsampled
	// time splits 1:1 by sampled time, 3:1 by launches.
	for cid := 1; cid <= 3; cid++ {
		cmds = append(cmds, fmt.Sprintf("launch %d %x 0 0", cid, gemm))
	}
	cmds = append(cmds, fmt.Sprintf("launch2 4 %x 1 0", gemm))
	for cid := 1; cid <= 3; cid++ {
		cmds = append(cmds, fmt.Sprintf("rec %d %x 0 100 1", cid, gemm))
	}
	cmds = append(cmds, fmt.Sprintf("rec 4 %x 1 300 1", gemm))
	for cid := 10; cid < 14; cid++ {
		cmds = append(cmds, fmt.Sprintf("rec %d %x 0 250 0", cid, gemm))
	}
	// other_kernel: never sampled.
	cmds = append(cmds, fmt.Sprintf("rec 20 %x 0 77 0", other), "flush")
	a.do(cmds...)
	// b: same ids, other durations and its own name for gemm's id is
	// refused (id is not the hash of the name); hostile calls.
	b.do(fmt.Sprintf("name %x not_gemm", gemm),
		fmt.Sprintf("launch 1 %x 0 0", gemm),
		fmt.Sprintf("rec 1 %x 0 5000 1", gemm), "flush",
		"badrecs 1000", "badrecs 5", "badname 1234 10", "rawname 99 0 00",
		// invalid UTF-8, control character, correct id: accepted, sanitised
		fmt.Sprintf("rawname %x 4 ff41090a", nameIDOf([]byte{0xff, 0x41, 0x09, 0x0a})))

	samples, st, err := tr.Drain()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", st)
	ta, tb := totalsOf(samples, a.pid), totalsOf(samples, b.pid)
	if want := (kernelTotal{1600, 8}); ta["gemm_kernel"] != want {
		t.Errorf("a gemm totals %+v, want %+v", ta["gemm_kernel"], want)
	}
	if want := (kernelTotal{77, 1}); ta["other_kernel"] != want {
		t.Errorf("a other totals %+v, want %+v", ta["other_kernel"], want)
	}
	if len(tb) != 1 || tb[unknownKernel(gemm)] != (kernelTotal{5000, 1}) {
		t.Errorf("b totals %+v: want only its own 5000 ns under an unknown name", tb)
	}
	for _, s := range samples {
		if s.Proc.PID != a.pid && s.Proc.PID != b.pid {
			t.Errorf("sample of a process that called no marker: %+v", s)
		}
		if s.Proc.PID == a.pid && s.Proc != a.id || s.Proc.PID == b.pid && s.Proc != b.id {
			t.Errorf("sample of %v", s.Proc)
		}
	}
	var sawOuter, sawOther, sawUnsampled bool
	for _, s := range samples {
		if s.Proc.PID != a.pid {
			continue
		}
		if s.Unsampled {
			sawUnsampled = true
			if s.KernelRaw != "other_kernel" {
				t.Errorf("unsampled row for %q", s.KernelRaw)
			}
			continue
		}
		fn := functions(sym.User(a.id, s.User))
		switch {
		case slices.Contains(fn, "outer_launch"):
			sawOuter = true
			if !slices.Contains(fn, "inner_launch") || !slices.Contains(fn, "main") {
				t.Errorf("outer stack %v", fn)
			}
			// 300 sampled + 500 of the 1000 unsampled; 3 + 3 launches.
			if s.GPUTime != 800 || s.Launches != 6 || s.Device != 0 {
				t.Errorf("outer_launch row %+v", s)
			}
		case slices.Contains(fn, "other_path"):
			sawOther = true
			// Its own 300 ns on device 1; its share of device 0's
			// unsampled time on device 0.
			if s.Device == 1 && (s.GPUTime != 300 || s.Launches != 1) ||
				s.Device == 0 && (s.GPUTime != 500 || s.Launches != 1) {
				t.Errorf("other_path row %+v", s)
			}
		default:
			t.Errorf("stack without a launching function: %v", fn)
		}
		if fn[0] != "slurmscope_kernel_launch" {
			t.Errorf("leaf frame %q, want the marker", fn[0])
		}
	}
	if !sawOuter || !sawOther || !sawUnsampled {
		t.Errorf("rows missing: outer %v other %v unsampled %v", sawOuter, sawOther, sawUnsampled)
	}
	if st.BadArgs != 2 || st.ReadErrors != 2 || st.RejectedNames != 1 || st.DecodeErrors != 0 {
		t.Errorf("hostile calls not counted as such: %+v", st)
	}
	if st.AttachedFiles != 1 {
		t.Errorf("%d files attached, want 1", st.AttachedFiles)
	}

	// b exits with a launch whose record never comes: its state goes.
	b.do(fmt.Sprintf("launch 7 %x 0 0", gemm))
	b.exit()
	for i := 0; i < 2; i++ {
		if samples, st, err = tr.Drain(); err != nil {
			t.Fatal(err)
		}
	}
	if st.ExitedProcesses < 1 || st.PendingLaunches != 0 {
		t.Errorf("exited process kept: %+v", st)
	}
	if len(samples) != 0 {
		t.Errorf("samples after everything was drained: %+v", samples)
	}
}

// runTrainerWith starts the stand-in trainer with injection through lib.
func startTrainer(t testing.TB, dir, lib string, work string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "trainer"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LANG=C",
		"CUDA_INJECTION64_PATH=" + lib,
		"SLURMSCOPE_CUPTI_PATH=" + filepath.Join(dir, "mock", "libcupti.so"),
		"SLURMSCOPE_LAUNCH_SAMPLES_PER_SEC=300",
		"SLURMSCOPE_INJECT_TOTALS_FILE=" + filepath.Join(work, "totals"),
		"SLURMSCOPE_MOCK_TRUTH_FILE=" + filepath.Join(work, "truth"),
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd
}

// readTotalsFile parses the "kernel=<name> ns=<n> launches=<n>" files of the
// library and the mock.
func readTotalsFile(t testing.TB, path string) map[string]kernelTotal {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]kernelTotal{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "kernel=") {
			continue
		}
		i := strings.LastIndex(l, " launches=")
		j := strings.LastIndex(l[:i], " ns=")
		ns, _ := strconv.ParseUint(l[j+4:i], 10, 64)
		n, _ := strconv.ParseUint(l[i+10:], 10, 64)
		m[l[len("kernel="):j]] = kernelTotal{ns, n}
	}
	return m
}

// waitMapped waits until pid maps the injection library.
func waitMapped(t testing.TB, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := FindMapping(procfs.New(""), pid); err == nil {
			return
		}
	}
	t.Fatalf("pid %d never mapped the library", pid)
}

// The stand-in CUDA stack end to end: exact per-kernel totals against the
// mock's ground truth under rate-limited sampling, stacks through the
// trainer's call paths, and a process on an unattached copy of the library
// never appears.
func TestIntegrationTrainer(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	dir := buildBinaries(t)
	lib := filepath.Join(dir, "libslurmscope_inject.so")
	copyDir := t.TempDir()
	copyLib := filepath.Join(copyDir, "libslurmscope_inject.so")
	if b, err := os.ReadFile(lib); err != nil || os.WriteFile(copyLib, b, 0o755) != nil {
		t.Fatal("copy library", err)
	}
	// This test checks the join's exactness, which holds only while no
	// event is dropped; on a loaded CI box the reader can fall behind the
	// default 8 MiB buffer (drops are counted: Stats.LostRingBuffer).
	tr := newTracer(t, Options{RingBufferBytes: 64 << 20})
	if err := tr.AttachFile(lib); err != nil {
		t.Fatal(err)
	}
	sym := symbolize.New(symbolize.Options{})

	work, otherWork := t.TempDir(), t.TempDir()
	cmd := startTrainer(t, dir, lib, work, "--seconds", "2", "--steps", "100000")
	other := startTrainer(t, dir, copyLib, otherWork, "--seconds", "1", "--coop")
	waitMapped(t, cmd.Process.Pid)
	sym.Prepare(mustStart(t, cmd.Process.Pid))
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := other.Wait(); err != nil {
		t.Fatal(err)
	}
	samples, st, err := tr.Drain()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", st)
	if st.LostRingBuffer > 0 {
		t.Fatalf("%d events dropped by a full ring buffer: totals cannot be exact", st.LostRingBuffer)
	}
	truth := readTotalsFile(t, filepath.Join(work, "truth"))
	got := totalsOf(samples, cmd.Process.Pid)
	wantNames := []string{"_ZN2at6native18elementwise_kernelILi128ELi4EEEviT1_", "gemm_kernel", "reduce_kernel"}
	for _, k := range wantNames {
		if truth[k].launches == 0 || got[k] != truth[k] {
			t.Errorf("%s: traced %+v, truth %+v", k, got[k], truth[k])
		}
	}
	if len(got) != len(truth) {
		t.Errorf("kernels traced %v, truth %v", got, truth)
	}
	if st.UnsampledRecords == 0 || st.MatchedRecords == 0 {
		t.Errorf("want both sampled and unsampled records at 300 launches/s: %+v", st)
	}
	paths := map[string][]string{
		"gemm_kernel":   {"launch_gemm", "forward", "train_step", "main"},
		"reduce_kernel": {"launch_reduce", "backward", "train_step", "main"},
	}
	for _, s := range samples {
		if s.Proc.PID == other.Process.Pid {
			t.Fatalf("process on an unattached library traced: %+v", s)
		}
		if s.Proc.PID != cmd.Process.Pid {
			continue
		}
		if s.Unsampled {
			t.Errorf("unsampled row although every kernel had sampled launches: %+v", s)
			continue
		}
		fn := functions(sym.User(s.Proc, s.User))
		for _, f := range paths[s.KernelRaw] {
			if !slices.Contains(fn, f) {
				t.Errorf("%s stack %v lacks %s", s.KernelRaw, fn, f)
			}
		}
		if strings.HasPrefix(s.KernelRaw, "_ZN") && s.Kernel == s.KernelRaw {
			t.Logf("mangled kernel name not demangled: %q", s.Kernel)
		}
	}
}

// The agent stopping and starting while a job runs: the job is unaffected
// (it finishes, and the library's own totals still match the truth), and a
// process killed mid-run leaves nothing behind.
func TestIntegrationRestartAndKill(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	dir := buildBinaries(t)
	lib := filepath.Join(dir, "libslurmscope_inject.so")
	work := t.TempDir()
	tr := newTracer(t, Options{})
	if err := tr.AttachFile(lib); err != nil {
		t.Fatal(err)
	}
	cmd := startTrainer(t, dir, lib, work, "--seconds", "2", "--steps", "100000000")
	killed := startTrainer(t, dir, lib, t.TempDir(), "--seconds", "30", "--steps", "10000000")
	time.Sleep(500 * time.Millisecond)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	tr2 := newTracer(t, Options{})
	if err := tr2.Attach(mustStart(t, cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	killed.Process.Kill()
	killed.Wait()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("trainer failed across an agent restart: %v", err)
	}
	truth := readTotalsFile(t, filepath.Join(work, "truth"))
	lib1 := readTotalsFile(t, filepath.Join(work, "totals"))
	if fmt.Sprint(truth) != fmt.Sprint(lib1) || len(truth) == 0 {
		t.Errorf("library totals %v, truth %v", lib1, truth)
	}
	samples, _, err := tr2.Drain()
	if err != nil {
		t.Fatal(err)
	}
	got := totalsOf(samples, cmd.Process.Pid)
	// Names are announced once per process, before this agent started:
	// they read as unknown ids now (a known gap), which still must match.
	for k, v := range truth {
		truth[unknownKernel(nameIDOf([]byte(k)))] = v
	}
	for k, v := range got {
		if v.ns > truth[k].ns || v.launches > truth[k].launches || v.launches == 0 {
			t.Errorf("%s: traced %+v exceeds truth %+v", k, v, truth[k])
		}
	}
	_, st, err := tr2.Drain()
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitedProcesses < 1 || st.Processes != 0 || st.PendingLaunches != 0 {
		t.Errorf("state of exited processes kept: %+v", st)
	}
}

func mustStart(t testing.TB, pid int) procfs.ID {
	t.Helper()
	id, err := procfs.New("").ID(pid)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The CPU cost the probe adds to one sampled launch: markercall times N calls
// of the launch marker without and with the uprobe attached. Target: ≤ 5 µs.
func TestIntegrationLaunchOverhead(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	dir := buildBinaries(t)
	lib := filepath.Join(dir, "libslurmscope_inject.so")
	const n = 200000
	bench := func() float64 {
		out, err := exec.Command(filepath.Join(dir, "markercall"), lib, "bench", strconv.Itoa(n)).Output()
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(string(out), "ns_per_call=")), 64)
		if err != nil {
			t.Fatalf("bench output %q", out)
		}
		return v
	}
	base := min(bench(), bench())
	tr := newTracer(t, Options{RingBufferBytes: 64 << 20})
	if err := tr.AttachFile(lib); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte("1\n"), 0o644)
	defer os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", old, 0o644)
	probed := min(bench(), bench())
	if ps, err := tr.objs.KernelLaunch.Stats(); err == nil && ps.RunCount > 0 {
		t.Logf("BPF program alone: %.0f ns per run over %d runs", float64(ps.Runtime.Nanoseconds())/float64(ps.RunCount), ps.RunCount)
	}
	_, st, err := tr.Drain()
	if err != nil {
		t.Fatal(err)
	}
	added := probed - base
	t.Logf("launch marker: %.1f ns/call without probe, %.1f ns/call with (%.0fx); added %.2f µs per sampled launch (%d events, %d lost)",
		base, probed, probed/base, added/1000, st.LaunchEvents, st.LostRingBuffer)
	fmt.Printf("BENCH gputrace launch marker: base %.1f ns, probed %.1f ns, added %.2f us/launch\n", base, probed, added/1000)
	// The trap itself dominates and depends on the machine (a VM pays a
	// VM exit per trap) and on the marker's first instruction (see
	// gpuinject/README.md: a frame setup is emulated, a bare ret
	// single-stepped), so the target is enforced only on request.
	if added > 5000 && os.Getenv("SLURMSCOPE_BENCH_STRICT") == "1" {
		t.Errorf("probe adds %.2f µs per launch, target ≤ 5 µs", added/1000)
	}
}

// TestIntegrationUserRation: while the ring buffer has room, nobody is
// dropped, whatever the ration says; once it is half full, the calls of a
// user past the ration are (counted), and those of other users are not.
func TestIntegrationUserRation(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	dir := buildBinaries(t)
	lib := filepath.Join(dir, "libslurmscope_inject.so")
	// A ring of 16 launch events (a page is 4 KiB, an event about 1 KiB):
	// the reader's poll, every 100 ms, cannot keep up with a script.
	tr := newTracer(t, Options{UserCallsPerSecond: 1, UserCallsBurst: 10, RingBufferBytes: 4 * os.Getpagesize()})
	if err := tr.AttachFile(lib); err != nil {
		t.Fatal(err)
	}
	a := startCaller(t, lib, filepath.Join(dir, "markercall"))
	// One at a time, reading in between: the ring never fills, and all
	// 30 are traced though the ration is 10.
	for cid := 1; cid <= 30; cid++ {
		a.do(fmt.Sprintf("launch %d 1 0 0", cid))
		if _, _, err := tr.Drain(); err != nil {
			t.Fatal(err)
		}
	}
	_, st, _ := tr.Drain()
	if st.LaunchEvents != 30 || st.RateLimited != 0 {
		t.Fatalf("with room in the ring: %d traced, %d rate limited; want 30, 0", st.LaunchEvents, st.RateLimited)
	}
	// A flood past the ration: dropped once the ring is half full.
	var cmds []string
	for cid := 100; cid < 2100; cid++ {
		cmds = append(cmds, fmt.Sprintf("launch %d 1 0 0", cid))
	}
	a.do(cmds...)
	_, st2, _ := tr.Drain()
	if st2.RateLimited == 0 {
		t.Fatalf("a flood past the ration: nothing rate limited (%+v)", st2)
	}
	t.Logf("flood of 2000: %d traced, %d rate limited, %d lost in the ring", st2.LaunchEvents-st.LaunchEvents, st2.RateLimited, st2.LostRingBuffer)
}

// The injection library steps aside while the job's own CUPTI client (the
// Kineto stand-in) holds CUPTI, and comes back when it lets go: the tracer
// puts the time between in an untraced sample, in the kernel's clock, and
// the kernels before and after stay exact. The profiler holds CUPTI for
// --profiler-hold inside the trainer's measured window, and both state
// markers lie inside that window around the hold, so the untraced time is
// at least the hold and at most the window whatever the machine's load.
func TestIntegrationStepAside(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	dir := buildBinaries(t)
	lib := filepath.Join(dir, "libslurmscope_inject.so")
	tr := newTracer(t, Options{RingBufferBytes: 64 << 20})
	if err := tr.AttachFile(lib); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	const hold = 500 * time.Millisecond
	cmd := exec.Command(filepath.Join(dir, "trainer"), "--user-profiler", "40:25:30", "--profiler-hold", fmt.Sprint(hold.Seconds()))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LANG=C",
		"CUDA_INJECTION64_PATH=" + lib,
		"SLURMSCOPE_CUPTI_PATH=" + filepath.Join(dir, "mock", "libcupti.so"),
		"SLURMSCOPE_INJECT_TOTALS_FILE=" + filepath.Join(work, "totals"),
		"SLURMSCOPE_MOCK_TRUTH_FILE=" + filepath.Join(work, "truth"),
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("trainer: %v\n%s%s", err, out, stderr.String())
	}
	var window int64
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "window_ns="); ok {
			window, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if !strings.Contains(string(out), "profiler_subscribe=0 ") || window <= 0 {
		t.Fatalf("the user's profiler did not subscribe, or no window:\n%s%s", out, stderr.String())
	}
	samples, st, err := tr.Drain()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", st)
	if st.LostRingBuffer > 0 {
		t.Fatalf("%d events dropped by a full ring buffer", st.LostRingBuffer)
	}
	var untraced uint64
	for _, s := range samples {
		if s.Proc.PID != cmd.Process.Pid || s.Untraced == 0 {
			continue
		}
		untraced += s.Untraced
		if s.Kernel != UntracedFrame || s.GPUTime != 0 || s.User != nil {
			t.Errorf("untraced sample %+v", s)
		}
	}
	t.Logf("untraced %.3f s, the user's profiler held CUPTI %.3f s within a %.3f s window", float64(untraced)/1e9, hold.Seconds(), float64(window)/1e9)
	if untraced < uint64(hold) || untraced > uint64(window) {
		t.Errorf("untraced %d ns, want between the hold (%d) and the window (%d)", untraced, hold, window)
	}
	if st.StepAsides != 1 || st.Resumes != 1 || st.StateEvents != 2 {
		t.Errorf("step-asides %d, resumes %d, state events %d; want 1, 1, 2", st.StepAsides, st.Resumes, st.StateEvents)
	}
	truth := readTotalsFile(t, filepath.Join(work, "truth"))
	got := totalsOf(samples, cmd.Process.Pid)
	for _, k := range []string{"before_kernel", "after_kernel"} {
		if truth[k].launches == 0 || got[k] != truth[k] {
			t.Errorf("%s: traced %+v, truth %+v", k, got[k], truth[k])
		}
	}
	if g, ok := got["profiled_kernel"]; ok {
		t.Errorf("the user's profiled kernels were traced too: %+v", g)
	}
}
