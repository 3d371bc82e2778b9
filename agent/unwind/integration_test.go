package unwind_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/agent/unwind"
	"github.com/slurmscope/slurmscope/agent/unwind/unwindtest"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// workloads builds internal/testenv/workloads' unwinder workloads without
// frame pointers, once per test binary.
func workloads(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "unwind-workloads")
		if buildErr != nil {
			return
		}
		src := filepath.Join("..", "..", "internal", "testenv", "workloads")
		for _, c := range [][]string{
			{"gcc", "-O2", "-fomit-frame-pointer", "-o", filepath.Join(binDir, "unwindc"), filepath.Join(src, "unwindc.c")},
			{"g++", "-O2", "-fomit-frame-pointer", "-o", filepath.Join(binDir, "unwindcxx"), filepath.Join(src, "unwindcxx.cc")},
		} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("%v: %v\n%s", c, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

type workload struct {
	cmd   *exec.Cmd
	pid   int
	ticks uint64
	bin   string
}

// start runs a workload for secs and waits for its "ready".
func start(t testing.TB, bin, mode string, secs int) *workload {
	t.Helper()
	cmd := exec.Command(bin, mode, strconv.Itoa(secs))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &workload{cmd: cmd, pid: cmd.Process.Pid, bin: bin}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("%s %s: %q %v", bin, mode, line, err)
	}
	w.ticks = startTicks(t, w.pid)
	return w
}

// startTicks is field 22 of /proc/<pid>/stat.
func startTicks(t testing.TB, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// stack is one symbolised sample.
type stack struct {
	funcs   []string // innermost first, one per native frame ("" unknown)
	modules []string
	end     uint32
	n       int
}

func (s stack) has(fn string) bool {
	for _, f := range s.funcs {
		if f == fn {
			return true
		}
	}
	return false
}

// profile samples a running workload for d with the unwinder (and, with
// fp, bpf_get_stack side by side) and symbolises every stack while the
// process is alive.
type profile struct {
	unwound, fp []stack
	counters    unwind.Counters
	loader      *unwind.Loader
	// BPF run time and runs of the unwinding and frame-pointer programs
	// (zero unless kernel.bpf_stats_enabled).
	unwindRun, fpRun   time.Duration
	unwindRuns, fpRuns uint64
}

// fpFirst attaches the frame-pointer program before the unwinder.
var fpFirst bool

func sample(t testing.TB, w *workload, d time.Duration, fp bool, uprobe string) profile {
	t.Helper()
	l, err := unwind.NewLoader(unwind.Options{Maps: procfs.Mapped{FS: procfs.New("")}, Opener: procfs.Mapped{FS: procfs.New("")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return sampleWith(t, l, w, d, fp, uprobe)
}

func sampleWith(t testing.TB, l *unwind.Loader, w *workload, d time.Duration, fp bool, uprobe string) profile {
	t.Helper()
	if _, err := l.SyncProcess(w.pid, w.ticks); err != nil {
		t.Fatal(err)
	}
	p, err := unwindtest.Load(w.pid, l.Maps().Replace)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := profile{loader: l}
	if uprobe != "" {
		if err := p.AttachUprobe(w.bin, uprobe); err != nil {
			t.Fatal(err)
		}
	} else {
		// Side by side, the two programs fire together, and the second
		// finds the task, its stack and the ring buffer in cache (about
		// 5 us cheaper here): BenchmarkSampleCost measures both orders.
		first := fpFirst
		if fp && first {
			if err := p.AttachPerf(w.pid, 997, true); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.AttachPerf(w.pid, 997, false); err != nil {
			t.Fatal(err)
		}
		if fp && !first {
			if err := p.AttachPerf(w.pid, 997, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(d)
	p.Detach()
	up, fpp := p.Programs()
	if st, err := up.Stats(); err == nil {
		out.unwindRun, out.unwindRuns = st.Runtime, st.RunCount
	}
	if st, err := fpp.Stats(); err == nil {
		out.fpRun, out.fpRuns = st.Runtime, st.RunCount
	}
	time.Sleep(100 * time.Millisecond) // the ring buffer reader catches up
	if out.counters, err = l.Counters(); err != nil {
		t.Fatal(err)
	}
	sym := symbolize.New(symbolize.Options{Proc: procfs.New("")})
	for _, s := range p.Samples() {
		n := int(min(s.Len, uint32(len(s.Ips))))
		frames := sym.User(procfs.ID{PID: w.pid, Start: w.ticks}, s.Ips[:n])
		st := stack{end: s.End, n: n}
		for _, f := range frames {
			if f.Inlined {
				continue
			}
			st.funcs = append(st.funcs, f.Function)
			st.modules = append(st.modules, filepath.Base(f.Module))
		}
		if s.How == unwindtest.HowFramePointer {
			out.fp = append(out.fp, st)
		} else {
			out.unwound = append(out.unwound, st)
		}
	}
	return out
}

// leafStacks returns the stacks whose innermost frame is leaf.
func leafStacks(stacks []stack, leaf string) []stack {
	var out []stack
	for _, s := range stacks {
		if len(s.funcs) > 0 && s.funcs[0] == leaf {
			out = append(out, s)
		}
	}
	return out
}

func share(stacks []stack, pred func(stack) bool) float64 {
	if len(stacks) == 0 {
		return 0
	}
	n := 0
	for _, s := range stacks {
		if pred(s) {
			n++
		}
	}
	return float64(n) / float64(len(stacks))
}

func caller(s stack) string {
	if len(s.funcs) < 2 {
		return ""
	}
	return s.funcs[1]
}

// The 70/30 split, the qsort comparator, C++ exceptions and the deep
// recursion are checked with the real agent, in its profiles (e2e
// TestStacks); the cases below are the unwinder's own.

// TestSignalFrame: a SIGPROF handler's leaf unwinds through the kernel's
// signal frame (__restore_rt) into the interrupted code and main.
func TestSignalFrame(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	w := start(t, filepath.Join(workloads(t), "unwindc"), "signal", 30)
	p := sample(t, w, 3*time.Second, false, "")
	leaf := leafStacks(p.unwound, "sig_leaf")
	if len(leaf) < 200 {
		t.Fatalf("%d handler samples of %d", len(leaf), len(p.unwound))
	}
	reach := share(leaf, func(s stack) bool { return s.has("on_prof") && s.has("spin_main") && s.has("main") })
	t.Logf("handler samples %d: through the signal frame to main %.1f%%; e.g. %q; %+v", len(leaf), 100*reach, leaf[0].funcs, p.counters)
	if reach < 0.90 {
		t.Errorf("%.1f%% of handler samples reach spin_main and main, want >= 90%%", 100*reach)
	}
	if p.counters.SignalFrames == 0 {
		t.Error("no signal frame counted")
	}
}

// TestVDSO: time in the vDSO (clock_gettime), whose table is built from
// the agent's own vDSO image, unwinds to its caller and main.
func TestVDSO(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	w := start(t, filepath.Join(workloads(t), "unwindc"), "vdso", 30)
	p := sample(t, w, 3*time.Second, false, "")
	var in []stack
	for _, s := range p.unwound {
		if len(s.modules) > 0 && s.modules[0] == "[vdso]" {
			in = append(in, s)
		}
	}
	if len(in) < 200 {
		t.Fatalf("%d samples in the vDSO of %d", len(in), len(p.unwound))
	}
	reach := share(in, func(s stack) bool { return s.has("clock_rounds") && s.has("main") })
	t.Logf("vDSO samples %d: reach clock_rounds and main %.1f%%; e.g. %q", len(in), 100*reach, in[0].funcs)
	if reach < 0.95 {
		t.Errorf("%.1f%% of vDSO samples reach clock_rounds and main, want >= 95%%", 100*reach)
	}
}

// TestUprobeEntry: a uprobe at a function's first instruction (as on the
// GPU marker) sees its direct caller, which a frame-pointer walk skips.
func TestUprobeEntry(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	w := start(t, filepath.Join(workloads(t), "unwindc"), "split", 30)
	p := sample(t, w, 2*time.Second, false, "leaf")
	if len(p.unwound) < 200 {
		t.Fatalf("%d uprobe samples", len(p.unwound))
	}
	ok := share(p.unwound, func(s stack) bool {
		return s.funcs[0] == "leaf" && (caller(s) == "caller_a" || caller(s) == "caller_b") && s.has("run_split") && s.has("main")
	})
	t.Logf("uprobe samples %d: leaf <- caller <- run_split <- main %.1f%%", len(p.unwound), 100*ok)
	if ok < 0.99 {
		t.Errorf("%.1f%% of entries show leaf's caller and main, want >= 99%%", 100*ok)
	}
}

// TestAgainstPerfDwarf runs perf record --call-graph dwarf (Debian's
// linux-perf: it copies the stack and unwinds it with libdw afterwards, the
// reference for code without frame pointers) on the same process at the
// same time as the unwinder: the callers' shares of the leaf must agree
// within 5 points.
func TestAgainstPerfDwarf(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	perf, err := exec.LookPath("perf")
	if err != nil {
		t.Fatal("perf not installed (scripts/deps.sh installs linux-perf)")
	}
	w := start(t, filepath.Join(workloads(t), "unwindc"), "split", 30)
	data := filepath.Join(t.TempDir(), "perf.data")
	rec := exec.Command(perf, "record", "-q", "-F", "997", "--call-graph", "dwarf", "-p", strconv.Itoa(w.pid), "-o", data, "--", "sleep", "4")
	recOut := &strings.Builder{}
	rec.Stdout, rec.Stderr = recOut, recOut
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	p := sample(t, w, 4*time.Second, false, "")
	if err := rec.Wait(); err != nil {
		t.Fatalf("perf record: %v\n%s", err, recOut)
	}
	out, err := exec.Command(perf, "script", "-i", data, "-F", "ip,sym").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	var perfStacks []stack
	for _, block := range strings.Split(string(out), "\n\n") {
		var st stack
		for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				st.funcs = append(st.funcs, f[1])
			}
		}
		if len(st.funcs) > 0 {
			perfStacks = append(perfStacks, st)
		}
	}
	ours, theirs := leafStacks(p.unwound, "leaf"), leafStacks(perfStacks, "leaf")
	if len(ours) < 500 || len(theirs) < 500 {
		t.Fatalf("leaf samples: ours %d, perf %d", len(ours), len(theirs))
	}
	for _, c := range []string{"caller_a", "caller_b"} {
		a := share(ours, func(s stack) bool { return caller(s) == c })
		b := share(theirs, func(s stack) bool { return caller(s) == c })
		t.Logf("%s: unwinder %.1f%% of %d leaf samples, perf --call-graph dwarf %.1f%% of %d", c, 100*a, len(ours), 100*b, len(theirs))
		if a-b > 0.05 || b-a > 0.05 {
			t.Errorf("%s: unwinder %.1f%%, perf %.1f%%: more than 5 points apart", c, 100*a, 100*b)
		}
	}
}

// TestHostileTable: a copy of the split workload whose .eh_frame has been
// corrupted (one byte in eight overwritten) runs beside an intact one,
// both loaded into one loader. The corrupt table may spoil the copy's
// stacks, but every walk of it must end (with a counted reason, within
// the frame limit), and the intact process's stacks must not suffer.
func TestHostileTable(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	bin := filepath.Join(workloads(t), "unwindc")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	eh := f.Section(".eh_frame")
	rng := rand.New(rand.NewSource(14))
	for off := eh.Offset + 24; off < eh.Offset+eh.Size; off += 8 {
		data[off+uint64(rng.Intn(8))%(eh.Offset+eh.Size-off)] = byte(rng.Intn(256))
	}
	hostileBin := filepath.Join(t.TempDir(), "unwindc-hostile")
	if err := os.WriteFile(hostileBin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := unwind.NewLoader(unwind.Options{Maps: procfs.Mapped{FS: procfs.New("")}, Opener: procfs.Mapped{FS: procfs.New("")}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hostile := start(t, hostileBin, "split", 30)
	intact := start(t, bin, "split", 30)
	var hp profile
	done := make(chan struct{})
	go func() { defer close(done); hp = sampleWith(t, l, hostile, 3*time.Second, false, "") }()
	ip := sampleWith(t, l, intact, 3*time.Second, false, "")
	<-done
	// Both probes are detached now: every walk started has ended.
	c, err := l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	var ends uint64
	for _, n := range c.Ends {
		ends += n
	}
	if ends != c.Walks || c.Walks < uint64(len(hp.unwound)+len(ip.unwound)) {
		t.Errorf("%d walks, %d ends, %d samples: a walk did not end cleanly", c.Walks, ends, len(hp.unwound)+len(ip.unwound))
	}
	for _, s := range hp.unwound {
		if s.n > 127 || s.end >= uint32(len(unwind.EndReasons)) {
			t.Fatalf("hostile walk of %d frames, end %d", s.n, s.end)
		}
	}
	byEnd := map[string]int{}
	for _, s := range hp.unwound {
		byEnd[unwind.EndReasons[s.end]]++
	}
	leaf := leafStacks(ip.unwound, "leaf")
	reach := share(leaf, func(s stack) bool { return s.has("main") })
	t.Logf("corrupt process: %d walks by end %v; intact process: %d leaf samples, %.1f%% reach main", len(hp.unwound), byEnd, len(leaf), 100*reach)
	if len(hp.unwound) < 200 || len(leaf) < 200 {
		t.Fatalf("too few samples: %d, %d", len(hp.unwound), len(leaf))
	}
	if reach < 0.95 {
		t.Errorf("the intact process's stacks suffered: %.1f%% reach main", 100*reach)
	}
}
