package cpu

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// burnEnv makes the test binary a CPU burner instead of running tests: the
// child process the integration tests sample.
const burnEnv = "SLURMSCOPE_CPU_TEST_BURN"

func TestMain(m *testing.M) {
	switch os.Getenv(burnEnv) {
	case "1":
		burn()
	case "stacks":
		burnStacks()
	}
	os.Exit(m.Run())
}

// burn spins forever, mostly in user space and partly in the kernel (reading
// /dev/zero makes the kernel clear pages), so both stacks show up.
//
//go:noinline
func burn() {
	zero, err := os.Open("/dev/zero")
	if err != nil {
		os.Exit(2)
	}
	buf := make([]byte, 1<<16)
	fmt.Println("ready")
	x := uint64(1)
	for {
		x = spin(x)
		for range 8 {
			if _, err := zero.Read(buf); err != nil {
				os.Exit(3)
			}
		}
	}
}

//go:noinline
func spin(x uint64) uint64 {
	for i := 0; i < 200_000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

type burner struct {
	cmd *exec.Cmd
	pid int
}

func startBurner(t testing.TB) *burner {
	t.Helper()
	return startBurnerMode(t, "1")
}

// startBurnerMode starts the test binary as a burner: mode "1" runs burn,
// "stacks" burnStacks.
func startBurnerMode(t testing.TB, mode string) *burner {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), burnEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &burner{cmd: cmd, pid: cmd.Process.Pid}
	t.Cleanup(b.stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("burner did not start: %q, %v", line, err)
	}
	return b
}

func (b *burner) stop() {
	if b.cmd.ProcessState == nil {
		b.cmd.Process.Kill()
		b.cmd.Wait()
	}
}

// procStat returns fields of /proc/<pid>/stat, numbered as in proc(5).
// userHZ is the unit of the times in /proc/<pid>/stat (USER_HZ, ABI).
const userHZ = 100

func procStat(t testing.TB, pid int) map[int]uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// comm (field 2) may contain spaces and parentheses; it ends at the last ')'.
	rest := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	fields := map[int]uint64{}
	for i, f := range rest {
		if n, err := strconv.ParseUint(f, 10, 64); err == nil {
			fields[i+3] = n
		}
	}
	return fields
}

type mapping struct{ lo, hi uint64 }

// execMappings returns the executable mappings of pid.
func execMappings(t testing.TB, pid int) []mapping {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var ms []mapping
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1][2] != 'x' {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad maps line %q", line)
		}
		ms = append(ms, mapping{l, h})
	}
	return ms
}

func inMappings(ms []mapping, pc uint64) bool {
	for _, m := range ms {
		if pc >= m.lo && pc < m.hi {
			return true
		}
	}
	return false
}

func TestIntegrationSampler(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	s, err := New(Options{ExcludePID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	b := startBurner(t)
	startTicks := procStat(t, b.pid)[22]
	time.Sleep(2 * time.Second) // how much to sample; nothing asserts on it
	st := procStat(t, b.pid)
	cpuTicks := st[14] + st[15] // utime + stime of all threads
	maps := execMappings(t, b.pid)
	rawMaps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", b.pid)) // to log on failure
	// Dead before the first Drain: every sample of it is in that drain, and a
	// later one that returns any again has failed to clear a generation.
	b.stop()

	samples, stats, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats after first drain: %+v", stats)
	if stats.AttachedCPUs < 1 {
		t.Errorf("no CPU attached")
	}

	var total, withKernel, withUser, withOut uint64
	var outside []Sample // stacks with a frame outside the mappings
	var drained uint64
	for _, sm := range samples {
		drained += sm.Count
		if sm.Proc.PID == os.Getpid() {
			t.Errorf("sampled the excluded pid: %+v", sm)
		}
		if sm.Proc.PID != b.pid {
			continue
		}
		if sm.Proc.Start != startTicks {
			t.Errorf("burner sample with StartTime %d, /proc says %d", sm.Proc.Start, startTicks)
			continue
		}
		total += sm.Count
		if len(sm.Kernel) > 0 {
			withKernel += sm.Count
		}
		if len(sm.User) > 0 {
			withUser += sm.Count
			if !inMappings(maps, sm.User[0]) {
				t.Errorf("user leaf %#x outside the burner's executable mappings", sm.User[0])
			}
			if slices.ContainsFunc(sm.User, func(pc uint64) bool { return !inMappings(maps, pc) }) {
				withOut += sm.Count
				outside = append(outside, sm)
			}
		}
	}
	// Expected from the CPU time the kernel accounted to the burner: a count,
	// not a clock. Half of it is a generous floor.
	expected := float64(cpuTicks) / userHZ * defaultSampleRate
	t.Logf("burner: %d samples (%d with kernel stack, %d with user stack) for %d ticks of CPU, expected ~%.0f",
		total, withKernel, withUser, cpuTicks, expected)
	if float64(total) < 0.5*expected || total == 0 {
		t.Errorf("burner got %d samples, want at least half of %.0f", total, expected)
	}
	if withUser < total*9/10 {
		t.Errorf("only %d of %d burner samples have a user stack", withUser, total)
	}
	if withKernel == 0 {
		t.Errorf("no burner sample has a kernel stack")
	}
	// Weighed by samples, not by distinct stacks: glibc, which the cgo
	// burner's new threads run, keeps no frame pointer, and the kernel's
	// walk from there reads on through whatever rbp holds. A few such
	// stacks can make most of the distinct frames (126 of 177) while
	// weighing little by samples: under four busy loops and three packages'
	// tests, one sample in thirty runs ([libc, 0]); none in thirty quiet
	// runs.
	if withOut*20 > total {
		t.Errorf("%d of %d burner samples have a user frame outside its executable mappings", withOut, total)
		for i, sm := range outside {
			if i == 5 {
				break
			}
			t.Logf("%d samples, kernel stack %d frames, user stack %#x", sm.Count, len(sm.Kernel), sm.User)
		}
		t.Logf("the burner's mappings:\n%s", rawMaps)
	}
	if stats.Samples != drained {
		t.Errorf("Stats.Samples %d, but the drain returned %d", stats.Samples, drained)
	}
	// cpu-clock counts on idle CPUs too, so a healthy event is never taken
	// for a dead one.
	if stats.LostMapFull != 0 || stats.MissingStacks != 0 || stats.CPUReattaches != 0 {
		t.Errorf("lost data on an idle box: %+v", stats)
	}

	// Drain 2 reads the second generation, drain 3 the first again, which
	// drain 1 must have emptied.
	prev := stats.Samples
	for i := 2; i <= 3; i++ {
		samples, stats, err := s.Drain()
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, sm := range samples {
			n += sm.Count
			if sm.Proc.PID == b.pid && sm.Proc.Start == startTicks {
				t.Errorf("drain %d returned a sample of the dead burner again: %+v", i, sm)
			}
		}
		// Counters are exact: what a drain returns is what was counted since
		// the previous one.
		if n != stats.Samples-prev {
			t.Errorf("drain %d returned %d samples, counters grew by %d", i, n, stats.Samples-prev)
		}
		prev = stats.Samples
	}
}

// enableBPFStats turns on kernel.bpf_stats_enabled for the test and puts the
// old value back afterwards.
func enableBPFStats(t testing.TB) {
	t.Helper()
	const path = "/proc/sys/kernel/bpf_stats_enabled"
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Errorf("restore %s: %v", path, err)
		}
	})
}

func TestIntegrationProgramStats(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	enableBPFStats(t)
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	startBurner(t)
	time.Sleep(time.Second)
	_, stats, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	runNs, runCount, ok := s.ProgramStats()
	if !ok {
		t.Fatal("no program statistics with bpf_stats_enabled=1")
	}
	// Every counted sample is one run; idle-task samples are runs too.
	if runCount < stats.Samples || runNs == 0 {
		t.Errorf("run count %d, run time %d ns, for %d samples", runCount, runNs, stats.Samples)
	}
	t.Logf("BPF program: %d runs, %.0f ns per run", runCount, float64(runNs)/float64(runCount))
}

// BenchmarkProgramRunTime reports what the BPF program costs per sample, as
// measured by the kernel (bpf_stats_enabled), while a burner keeps a CPU busy.
// The Go loop only drains; ns/op is not the interesting number.
func BenchmarkProgramRunTime(b *testing.B) {
	testenv.RequireIntegration(b, testenv.Root, testenv.BTF)
	enableBPFStats(b)
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	startBurner(b)
	for b.Loop() {
		time.Sleep(100 * time.Millisecond)
		if _, _, err := s.Drain(); err != nil {
			b.Fatal(err)
		}
	}
	runNs, runCount, ok := s.ProgramStats()
	if !ok {
		b.Fatal("no program statistics")
	}
	b.ReportMetric(float64(runNs)/float64(runCount), "bpf-ns/sample")
	b.ReportMetric(float64(runCount), "samples")
}
