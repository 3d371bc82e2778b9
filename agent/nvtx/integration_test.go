package nvtx_test

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/nvtx"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/agent/stackwalk"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// hostileC registers what a job can fake through the exported marker: its
// main thread a valid-looking struct that names another thread (the
// driver's tid), a second thread an address with nothing mapped, and a
// struct under the driver's tid with a range of its own, named with the
// right hash (keyed by this process, so only its own lookups could meet
// it); and a wrong-hash name for the driver's phase_a. Both threads then
// burn a fifth of a CPU each, outside any range.
const hostileC = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct th { uint32_t magic; uint16_t version, stack_cap; uint32_t tid, depth; uint16_t started_cap, r0; uint32_t r1;
	uint64_t started[8]; uint64_t stack[32]; };
static void (*reg)(uint64_t, uint32_t);
static struct th other, forged;
static volatile unsigned long sink;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
__attribute__((noinline)) static void hostile_spin(void)
{
	for (;;) {
		double t0 = now();
		while (now() - t0 < 0.002)
			sink = sink * 6364136223846793005ul + 1;
		usleep(8000);
	}
}
static void *second(void *arg)
{
	(void)arg;
	reg(0x1000, (uint32_t)syscall(SYS_gettid));
	hostile_spin();
	return NULL;
}
int main(int argc, char **argv)
{
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
	reg = (void (*)(uint64_t, uint32_t))dlsym(h, "slurmscope_nvtx_thread");
	void (*name)(uint64_t, const char *, uint32_t, uint32_t) =
		(void (*)(uint64_t, const char *, uint32_t, uint32_t))dlsym(h, "slurmscope_nvtx_range_name");
	uint32_t me = (uint32_t)syscall(SYS_gettid), driver = (uint32_t)atoi(argv[2]);
	other = (struct th){ .magic = 0x564e5353, .version = 1, .stack_cap = 32, .tid = driver, .depth = 1, .started_cap = 8 };
	other.stack[0] = strtoull(argv[3], NULL, 0); /* the driver's "step" */
	reg((uint64_t)(uintptr_t)&other, me);
	forged = other;
	forged.stack[0] = strtoull(argv[4], NULL, 0); /* "forged" */
	reg((uint64_t)(uintptr_t)&forged, driver);
	name(strtoull(argv[4], NULL, 0), "\0forged", 7, 0);
	name(strtoull(argv[5], NULL, 0), "\0not_phase_a", 12, 0);
	pthread_t t;
	pthread_create(&t, NULL, second, NULL);
	printf("ready\n");
	fflush(stdout);
	hostile_spin();
}
`

func build(t *testing.T) string {
	t.Helper()
	// Readable by nobody, who runs the hostile process (t.TempDir's
	// parents are root's alone).
	dir, err := os.MkdirTemp("", "slurmscope-nvtx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"sh", "../../internal/testenv/nvtxstandin/build.sh", dir},
		{"sh", "../../gpuinject/build.sh", dir},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	src := filepath.Join(dir, "hostile.c")
	if err := os.WriteFile(src, []byte(hostileC), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cc", "-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", filepath.Join(dir, "hostile"), src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("hostile.c: %v\n%s", err, out)
	}
	return dir
}

// start runs a command and returns it once it printed its first line.
func start(t *testing.T, cmd *exec.Cmd) (*exec.Cmd, string, *bufio.Scanner) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("%s printed nothing", cmd.Path)
	}
	return cmd, sc.Text(), sc
}

func roots(fs []symbolize.Frame) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Function)
	}
	return out
}

// TestIntegrationNVTXRanges runs the capture as the agent does, without
// the daemon: a Walker with the NVTX annotator, the NVTX probes and the real
// CPU sampler, over the stand-in driver's must-show workload (70% of its
// CPU in step > phase_a, 30% in step > phase_b) and a hostile process.
// Over the driver's samples taken once it was set up (its first sample
// that carries a named range: its thread struct registered and its names
// read), the root-side ranges split phase_a / (phase_a + phase_b) = 0.70
// ± 0.05, and every sample in work_phase_a (work_phase_b) carries exactly
// step > phase_a (phase_b). The hostile process's samples, outside any
// range with forged structs registered, carry none, and its forgeries
// reach none of the driver's.
func TestIntegrationNVTXRanges(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("cc"))
	dir := build(t)
	lib := filepath.Join(dir, "libslurmscope_inject.so")

	var mu sync.Mutex
	profiled := map[int]bool{}
	names := nvtx.NewNames(nvtx.NamesOptions{})
	w, err := stackwalk.New(stackwalk.Options{Tables: true, Annotators: []interp.Annotator{names},
		Profiled: func(id procfs.ID) bool { mu.Lock(); defer mu.Unlock(); return profiled[id.PID] }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tr, err := nvtx.New(nvtx.Options{Stacks: w, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	s, err := cpu.New(cpu.Options{SampleRate: 499, Stacks: w})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sym := symbolize.New(symbolize.Options{})
	proc := procfs.New("")

	drv := exec.Command(filepath.Join(dir, "nvtx_driver"), "workload", "1000000", "6")
	drv.Env = append(os.Environ(), "NVTX_INJECTION64_PATH="+lib)
	mu.Lock()
	drv, first, drvOut := start(t, drv)
	profiled[drv.Process.Pid] = true
	mu.Unlock()
	var driverTID int
	if _, err := fmt.Sscanf(first, "driver tid=%d injected=1", &driverTID); err != nil {
		t.Fatalf("driver: %q", first)
	}
	drvID, err := proc.ID(drv.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	sym.Prepare(drvID)
	// As the daemon would on its first sight of the process; the library
	// is mapped by now (the driver printed injected=1).
	if _, err := tr.AttachProcess(drvID); err != nil {
		t.Fatal(err)
	}
	host := exec.Command(filepath.Join(dir, "hostile"), lib, fmt.Sprint(driverTID),
		fmt.Sprint(nvtx.RangeID([]byte("\x00step"))), fmt.Sprint(nvtx.RangeID([]byte("\x00forged"))), fmt.Sprint(nvtx.RangeID([]byte("\x00phase_a"))))
	// The attack runs as an unprivileged user, as a job would.
	host.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	mu.Lock()
	host, ready, _ := start(t, host)
	profiled[host.Process.Pid] = true
	mu.Unlock()
	if ready != "ready" {
		t.Fatalf("hostile: %q", ready)
	}
	hostID, err := proc.ID(host.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	sym.Prepare(hostID)
	if _, err := tr.AttachProcess(hostID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var summary string
	go func() {
		for drvOut.Scan() {
			if strings.HasPrefix(drvOut.Text(), "driver steps=") {
				summary = drvOut.Text()
			}
		}
		done <- drv.Wait()
	}()

	var setUp bool
	var a, b, both, inA, inB, wrong, before uint64
	var hostAll, hostRanged uint64
	var wrongEx []string
	drain := func() {
		samples, _, err := s.Drain()
		if err != nil {
			t.Fatal(err)
		}
		setUpNow := setUp
		for _, smp := range samples {
			var root []string
			if smp.Interp != nil {
				root = roots(w.Resolve(uint32(smp.Proc.PID), smp.StartNs, smp.Interp).Root) // #nosec G115 -- a test's child pid
			}
			switch smp.Proc {
			case hostID:
				hostAll += smp.Count
				if len(root) > 0 {
					hostRanged += smp.Count
				}
				continue
			case drvID:
			default:
				continue
			}
			if !setUp {
				if slices.Contains(root, "[nvtx] step") {
					setUpNow = true
				}
				before += smp.Count
				continue
			}
			if smp.Setup&bpf.SetupNative == 0 {
				continue
			}
			var fns []string
			for _, f := range sym.User(drvID, smp.User) {
				fns = append(fns, f.Function)
			}
			switch {
			case slices.Equal(root, []string{"[nvtx] phase_a", "[nvtx] step"}):
				a += smp.Count
			case slices.Equal(root, []string{"[nvtx] phase_b", "[nvtx] step"}):
				b += smp.Count
			}
			both += smp.Count
			for _, c := range []struct {
				fn   string
				want []string
				n    *uint64
			}{{"work_phase_a", []string{"[nvtx] phase_a", "[nvtx] step"}, &inA}, {"work_phase_b", []string{"[nvtx] phase_b", "[nvtx] step"}, &inB}} {
				if slices.Contains(fns, c.fn) {
					*c.n += smp.Count
					if !slices.Equal(root, c.want) {
						wrong += smp.Count
						if len(wrongEx) < 5 {
							wrongEx = append(wrongEx, fmt.Sprintf("%v under %q", fns, root))
						}
					}
				}
			}
		}
		setUp = setUpNow
	}
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("driver: %v", err)
			}
			finished = true
		case <-time.After(500 * time.Millisecond):
		}
		drain()
	}
	capture, _ := tr.CaptureStats()
	probes, _ := tr.ProbeStats()
	t.Logf("%s", summary)
	t.Logf("driver: %d samples before set-up; after: %d, phase_a %d, phase_b %d (share %.3f); in work_phase_a %d, work_phase_b %d, wrong ranges %d %q",
		before, both, a, b, float64(a)/float64(a+b), inA, inB, wrong, wrongEx)
	t.Logf("hostile: %d samples, %d with ranges; capture stats %v (read, read_failed, invalid, other_tid, truncated); probe stats %v; names %+v; tracker %+v",
		hostAll, hostRanged, capture, probes, names.Stats(), tr.Stats())
	if a+b < 300 {
		t.Fatalf("only %d set-up samples in phase_a or phase_b", a+b)
	}
	if share := float64(a) / float64(a+b); math.Abs(share-0.70) > 0.05 {
		t.Errorf("phase_a / (phase_a + phase_b) = %.3f, want 0.70 ± 0.05", share)
	}
	if wrong != 0 || inA == 0 || inB == 0 {
		t.Errorf("%d samples in work_phase_a or work_phase_b with other ranges (of %d, %d)", wrong, inA, inB)
	}
	if hostAll < 50 || hostRanged != 0 {
		t.Errorf("hostile process: %d of %d samples with ranges, want none of at least 50", hostRanged, hostAll)
	}
	if len(capture) == int(bpf.NVTXStatMax) && (capture[bpf.NVTXStatOtherTID] == 0 || capture[bpf.NVTXStatReadFailed] == 0) {
		t.Errorf("the forged structs were not refused at samples: %v", capture)
	}
}

// gpuRangesC launches kernels through the CUDA stand-in under NVTX
// ranges: gemm_kernel only inside gpu_step > fwd, reduce_kernel only
// inside gpu_step > bwd, and copy_kernel outside any range. It waits for a
// line on stdin after CUDA's initialisation (which loads the injection
// library) so that the test attaches the probes before its first range.
const gpuRangesC = `
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "standin_cudart.h"
#include "nvtx_standin.h"

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void)
{
	standin_init();
	printf("ready\n");
	fflush(stdout);
	char line[8];
	if (!fgets(line, sizeof line, stdin))
		return 3;
	double t0 = now();
	for (int i = 0; now() - t0 < 2; i++) {
		nvtxRangePushA("gpu_step");
		nvtxRangePushA("fwd");
		standin_launch("gemm_kernel", 0);
		nvtxRangePop();
		nvtxRangePushA("bwd");
		standin_launch("reduce_kernel", 0);
		nvtxRangePop();
		nvtxRangePop();
		standin_launch("copy_kernel", 0);
		usleep(2000);
	}
	printf("done\n");
	return 0;
}
`

// TestIntegrationNVTXKernelLaunches: through the GPU tracer's launch probe
// (the same stack.h), each kernel sits under the ranges open on the
// launching thread at its launch, and a kernel launched outside any range
// under none.
func TestIntegrationNVTXKernelLaunches(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("cc"))
	dir := build(t)
	c := exec.Command("sh", "../../internal/testenv/cudastandin/build.sh", dir)
	c.Env = append(os.Environ(), "CC=cc -fno-omit-frame-pointer")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("cudastandin: %v\n%s", err, out)
	}
	src := filepath.Join(dir, "gpuranges.c")
	if err := os.WriteFile(src, []byte(gpuRangesC), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cc", "-O1", "-g", "-fno-omit-frame-pointer", "-I../../internal/testenv/cudastandin", "-I../../internal/testenv/nvtxstandin",
		"-I../../gpuinject", "-o", filepath.Join(dir, "gpuranges"), src, "-L"+dir, "-lcudart_standin", "-lnvtx_standin", "-Wl,-rpath,"+dir).CombinedOutput(); err != nil {
		t.Fatalf("gpuranges.c: %v\n%s", err, out)
	}
	lib := filepath.Join(dir, "libslurmscope_inject.so")

	names := nvtx.NewNames(nvtx.NamesOptions{})
	w, err := stackwalk.New(stackwalk.Options{Tables: true, Annotators: []interp.Annotator{names},
		Profiled: func(procfs.ID) bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tr, err := nvtx.New(nvtx.Options{Stacks: w, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	g, err := gputrace.New(gputrace.Options{Stacks: w, ExcludePID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.AttachFile(lib); err != nil {
		t.Fatal(err)
	}
	if err := tr.AttachFile(lib); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(filepath.Join(dir, "gpuranges"))
	cmd.Env = append(os.Environ(), "CUDA_INJECTION64_PATH="+lib, "NVTX_INJECTION64_PATH="+lib,
		"SLURMSCOPE_CUPTI_PATH="+filepath.Join(dir, "mock", "libcupti.so"), "SLURMSCOPE_LAUNCH_SAMPLES_PER_SEC=300")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd, first, _ := start(t, cmd)
	if first != "ready" {
		t.Fatalf("gpuranges: %q", first)
	}
	fmt.Fprintln(in, "go")
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the last events read
	samples, st, err := g.Drain()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"gemm_kernel":   {"[nvtx] fwd", "[nvtx] gpu_step"},
		"reduce_kernel": {"[nvtx] bwd", "[nvtx] gpu_step"},
		"copy_kernel":   nil,
	}
	byKernel := map[string]map[string]uint64{}
	for _, s := range samples {
		if s.Proc.PID != cmd.Process.Pid || s.Unsampled {
			continue
		}
		k := strings.Join(roots(s.Interp.Root), " < ")
		if byKernel[s.KernelRaw] == nil {
			byKernel[s.KernelRaw] = map[string]uint64{}
		}
		byKernel[s.KernelRaw][k] += s.Launches
	}
	t.Logf("launches by kernel and ranges: %v; tracer stats %+v; names %+v", byKernel, st, names.Stats())
	for k, ranges := range want {
		got := byKernel[k]
		if len(got) != 1 || got[strings.Join(ranges, " < ")] == 0 {
			t.Errorf("%s: launches by ranges %v, want all under %q", k, got, ranges)
		}
	}
}

// pyRanges spins in hot() inside an NVTX range pushed through the stand-in
// headers (ctypes), then in cold() outside any range. A mark first loads
// the injection library, so that the test attaches before the range.
const pyRanges = `
import ctypes, random, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.nvtxMarkA(b"init")
print("ready", flush=True)
sys.stdin.readline()

def phase_a_work(n):
    x = 0
    for _ in range(7 * n):
        x += 1
    return x

def phase_b_work(n):
    x = 0
    for _ in range(3 * n):
        x += 1
    return x

def cold(t):
    x = 0
    while time.monotonic() < t:
        x += 1
    return x

# The must-show workload: 70% of the CPU time in step > phase_a, 30% in
# step > phase_b, by iterations; rounds of random length so that sampling
# cannot alias with them.
r = random.Random(1)
end = time.process_time() + 4
while time.process_time() < end:
    n = r.randint(2000, 20000)
    lib.nvtxRangePushA(b"step")
    lib.nvtxRangePushA(b"phase_a")
    phase_a_work(n)
    lib.nvtxRangePop()
    lib.nvtxRangePushA(b"phase_b")
    phase_b_work(n)
    lib.nvtxRangePop()
    lib.nvtxRangePop()
cold(time.monotonic() + 1.5)
`

// TestIntegrationNVTXWithPython: a Python program that marks ranges
// through ctypes on the stand-in NVTX side (70% of its CPU in step >
// phase_a, 30% in step > phase_b): its ranges go at the root of its
// stacks, after the interpreter frames the same capture walked (CPython
// and NVTX share the sample's interp_stack), split 70/30 within 5 points
// over the samples taken once set up, and a function run outside any
// range has none.
func TestIntegrationNVTXWithPython(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("cc", "python3.11"))
	dir := build(t)
	lib := filepath.Join(dir, "libslurmscope_inject.so")
	var mu sync.Mutex
	profiled := map[int]bool{}
	names := nvtx.NewNames(nvtx.NamesOptions{})
	w, err := stackwalk.New(stackwalk.Options{Tables: true, Interpreters: []interp.Interpreter{python.CPython{}},
		Annotators: []interp.Annotator{names},
		Profiled:   func(id procfs.ID) bool { mu.Lock(); defer mu.Unlock(); return profiled[id.PID] }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tr, err := nvtx.New(nvtx.Options{Stacks: w, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	s, err := cpu.New(cpu.Options{SampleRate: 499, Stacks: w,
		NewInterp: func(pid uint32, startNs uint64, raw *bpf.InterpStack) { w.Resolve(pid, startNs, raw) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	cmd := exec.Command("python3.11", "-c", pyRanges, filepath.Join(dir, "libnvtx_standin.so"))
	cmd.Env = append(os.Environ(), "NVTX_INJECTION64_PATH="+lib)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	cmd, first, _ := start(t, cmd)
	profiled[cmd.Process.Pid] = true
	mu.Unlock()
	if first != "ready" {
		t.Fatalf("python: %q", first)
	}
	id, err := procfs.New("").ID(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.AttachProcess(id); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in, "go")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	got := map[string]uint64{}
	drain := func() {
		samples, _, err := s.Drain()
		if err != nil {
			t.Fatal(err)
		}
		for _, smp := range samples {
			if smp.Proc != id || smp.Setup != bpf.SetupNative|bpf.SetupInterp || smp.Interp == nil {
				continue
			}
			st := w.Resolve(uint32(smp.Proc.PID), smp.StartNs, smp.Interp) // #nosec G115 -- a test's child pid
			if len(st.Frames) == 0 || !slices.Contains([]string{"phase_a_work", "phase_b_work", "cold"}, st.Frames[0].Function) {
				continue
			}
			got[st.Frames[0].Function+" under "+strings.Join(roots(st.Root), " < ")] += smp.Count
		}
	}
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("python: %v", err)
			}
			finished = true
		case <-time.After(500 * time.Millisecond):
		}
		drain()
	}
	a, b := got["phase_a_work under [nvtx] phase_a < [nvtx] step"], got["phase_b_work under [nvtx] phase_b < [nvtx] step"]
	share := float64(a) / float64(max(a+b, 1))
	t.Logf("set-up samples by innermost Python function and ranges: %v; phase_a share %.3f", got, share)
	if a+b < 500 || got["cold under "] < 20 || len(got) != 3 {
		t.Errorf("want phase_a_work only under step > phase_a, phase_b_work only under step > phase_b (500 samples or more) and cold() under no range (20 or more): %v", got)
	}
	if share < 0.65 || share > 0.75 {
		t.Errorf("phase_a / (phase_a + phase_b) = %.3f, want 0.70 ± 0.05", share)
	}
}
