// Package gpuinject holds the CUDA injection library that ships into jobs
// (libslurmscope_inject.so, in C: inject.c, built by build.sh) and its
// tests; the marker ABI it shares with agent/gputrace is slurmscope_inject.h.
//
// The tests run the library inside the stand-in trainer against the mock
// CUPTI (internal/testenv/cudastandin). They build everything with the
// system C compiler and need no GPU, no CUDA and no root. No assertion
// depends on how fast anything runs.
package gpuinject

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

const logPrefix = "slurmscope-inject:"

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// built compiles the injection library and the stand-ins once per test
// binary, through the same build scripts a user would run.
func built(t *testing.T) string {
	t.Helper()
	testenv.Require(t, testenv.Tools(ccName()))
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "gpuinject-")
		if buildErr != nil {
			return
		}
		for _, script := range []string{"build.sh", "../internal/testenv/cudastandin/build.sh"} {
			out, err := exec.Command("sh", script, buildDir).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("%s: %v\n%s", script, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

func ccName() string {
	if cc := os.Getenv("CC"); cc != "" {
		return strings.Fields(cc)[0]
	}
	return "cc"
}

type run struct {
	stdout, stderr string
	totals, truth  map[string]total // by kernel name
	summary        map[string]uint64
	mockSummary    map[string]uint64 // the mock's "# flush_period_ms= ..." line
	trace          []traceLine
	trainerTID     string
	elapsed        time.Duration
}

type total struct{ ns, launches uint64 }

type traceLine struct {
	kind   string // name, launch, record
	fields map[string]string
}

// runTrainer runs the stand-in trainer with the given environment (added to
// a clean one) and arguments; inject=false leaves CUDA_INJECTION64_PATH unset.
func runTrainer(t *testing.T, inject bool, env map[string]string, args ...string) run {
	t.Helper()
	dir := built(t)
	work := t.TempDir()
	paths := map[string]string{
		"SLURMSCOPE_INJECT_TOTALS_FILE": filepath.Join(work, "totals"),
		"SLURMSCOPE_INJECT_TRACE_FILE":  filepath.Join(work, "trace"),
		"SLURMSCOPE_MOCK_TRUTH_FILE":    filepath.Join(work, "truth"),
		"SLURMSCOPE_CUPTI_PATH":         filepath.Join(dir, "mock", "libcupti.so"),
	}
	e := []string{"PATH=" + os.Getenv("PATH"), "LANG=C"}
	if inject {
		e = append(e, "CUDA_INJECTION64_PATH="+filepath.Join(dir, "libslurmscope_inject.so"))
	}
	for k, v := range paths {
		if _, override := env[k]; !override {
			e = append(e, k+"="+v)
		}
	}
	for k, v := range env {
		e = append(e, k+"="+v)
	}
	// The timeout only keeps a hung child from hanging the suite.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "trainer"), args...)
	cmd.Env = e
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := run{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	if err != nil {
		t.Fatalf("trainer %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "trainer done") {
		t.Fatalf("trainer did not finish:\n%s", r.stdout)
	}
	for _, l := range strings.Split(r.stdout, "\n") {
		if tid, ok := strings.CutPrefix(l, "trainer tid="); ok {
			r.trainerTID = tid
		}
	}
	r.totals, r.summary = readTotals(t, paths["SLURMSCOPE_INJECT_TOTALS_FILE"])
	r.truth, r.mockSummary = readTotals(t, paths["SLURMSCOPE_MOCK_TRUTH_FILE"])
	r.trace = readTrace(t, paths["SLURMSCOPE_INJECT_TRACE_FILE"])
	return r
}

// readTotals parses "kernel=<name> ns=<n> launches=<n>" lines (the name may
// contain spaces, so the numbers are taken from the right) and the
// "# key=value ..." summary line. A missing file reads as empty.
func readTotals(t *testing.T, path string) (map[string]total, map[string]uint64) {
	t.Helper()
	totals, summary := map[string]total{}, map[string]uint64{}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return totals, summary
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(l, "# "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				summary[k] = mustUint(t, v)
			}
			continue
		}
		i := strings.LastIndex(l, " launches=")
		j := strings.LastIndex(l[:max(i, 0)], " ns=")
		if !strings.HasPrefix(l, "kernel=") || i < 0 || j < 0 {
			t.Fatalf("%s: bad line %q", path, l)
		}
		name := l[len("kernel="):j]
		if _, dup := totals[name]; dup {
			t.Fatalf("%s: kernel %q twice", path, name)
		}
		totals[name] = total{ns: mustUint(t, l[j+4:i]), launches: mustUint(t, l[i+10:])}
	}
	return totals, summary
}

func readTrace(t *testing.T, path string) []traceLine {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []traceLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		tl := traceLine{kind: kind, fields: map[string]string{}}
		if kind == "name" { // name= is last and may contain anything
			rest, tl.fields["name"], _ = strings.Cut(rest, " name=")
		}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			tl.fields[k] = v
		}
		out = append(out, tl)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return v
}

func logLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, logPrefix) {
			out = append(out, l)
		}
	}
	return out
}

func (r run) launchMarkers() []traceLine { return r.lines("launch") }
func (r run) records() []traceLine       { return r.lines("record") }

func (r run) lines(kind string) []traceLine {
	var out []traceLine
	for _, l := range r.trace {
		if l.kind == kind {
			out = append(out, l)
		}
	}
	return out
}

func sumLaunches(m map[string]total) (n uint64) {
	for _, v := range m {
		n += v.launches
	}
	return n
}

// assertExactTotals: the library's per-kernel GPU time equals the mock's
// ground truth to the nanosecond, for every kernel.
func assertExactTotals(t *testing.T, r run) {
	t.Helper()
	if len(r.truth) == 0 {
		t.Fatal("mock wrote no ground truth")
	}
	if fmt.Sprint(sorted(r.totals)) != fmt.Sprint(sorted(r.truth)) {
		t.Fatalf("totals differ from ground truth\nlibrary: %v\ntruth:   %v", sorted(r.totals), sorted(r.truth))
	}
	if got, want := r.summary["records"], sumLaunches(r.truth); got != want {
		t.Fatalf("records reported = %d, kernels run = %d", got, want)
	}
	if r.summary["dropped"] != 0 {
		t.Fatalf("dropped = %d", r.summary["dropped"])
	}
}

func sorted(m map[string]total) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s:%d/%d", k, v.ns, v.launches))
	}
	sort.Strings(out)
	return out
}

// assertTraceConsistent checks the marker stream against the ABI's
// promises: every id is announced before use, ids are the hashes of their
// names, launch markers run on the trainer's thread, and a record is
// flagged sampled exactly when its launch called the launch marker.
func assertTraceConsistent(t *testing.T, r run) {
	t.Helper()
	announced := map[string]string{} // id -> name
	launched := map[string]traceLine{}
	for i, l := range r.trace {
		switch l.kind {
		case "name":
			id, name := l.fields["id"], l.fields["name"]
			if prev, ok := announced[id]; ok && prev != name {
				t.Fatalf("id %s announced as %q and %q", id, prev, name)
			}
			if want := fmt.Sprintf("%016x", fnv1a64(name)); id != want {
				t.Fatalf("name %q has id %s, want FNV-1a %s", name, id, want)
			}
			announced[id] = name
		case "launch":
			if id := l.fields["name_id"]; id != "0000000000000000" && announced[id] == "" {
				t.Fatalf("line %d: launch uses name id %s before it was announced", i, id)
			}
			if l.fields["tid"] != r.trainerTID {
				t.Fatalf("launch marker on thread %s, trainer launches on %s", l.fields["tid"], r.trainerTID)
			}
			if _, dup := launched[l.fields["cid"]]; dup {
				t.Fatalf("two launch markers for correlation id %s", l.fields["cid"])
			}
			launched[l.fields["cid"]] = l
		case "record":
			if announced[l.fields["name_id"]] == "" {
				t.Fatalf("line %d: record uses name id %s before it was announced", i, l.fields["name_id"])
			}
			_, wasLaunched := launched[l.fields["cid"]]
			if sampled := l.fields["sampled"] == "1"; sampled != wasLaunched {
				t.Fatalf("record cid=%s sampled=%v but launch marker called=%v", l.fields["cid"], sampled, wasLaunched)
			}
			if l.fields["gi"] != "4294967295" {
				t.Fatalf("gpu_instance_id = %s without MIG", l.fields["gi"])
			}
		}
	}
	if got := uint64(len(launched)); got != r.summary["launch_markers"] {
		t.Fatalf("trace has %d launch markers, library counted %d", got, r.summary["launch_markers"])
	}
}

func fnv1a64(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	if h == 0 {
		h = 1
	}
	return h
}

// (a) Injection library + mock CUPTI: exact totals, and every marker called
// as the ABI says.
func TestInjectReportsExactTotalsAndMarkers(t *testing.T) {
	for _, tc := range []struct{ name, version string }{
		{"cuda12.6-kernel9", "24"},
		{"cuda13.0-kernel10", "130000"}, // 216-byte records: the stride must not matter
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runTrainer(t, true, map[string]string{
				"SLURMSCOPE_MOCK_CUPTI_VERSION":     tc.version,
				"SLURMSCOPE_LAUNCH_SAMPLES_PER_SEC": "1000000000", // sample every launch
			}, "--steps", "300", "--graph", "--coop")
			if l := logLines(r.stderr); len(l) != 0 {
				t.Fatalf("library logged on a healthy run: %q", l)
			}
			assertExactTotals(t, r)
			assertTraceConsistent(t, r)

			for _, k := range []string{"gemm_kernel", "reduce_kernel", "allreduce_kernel",
				"_ZN2at6native18elementwise_kernelILi128ELi4EEEviT1_", "graph_gemm_kernel", "graph_reduce_kernel"} {
				if r.totals[k].launches != 300 {
					t.Errorf("%s: %d completions, want 300", k, r.totals[k].launches)
				}
			}
			// One launch marker per API call (graph = one call), all sampled.
			if got := len(r.launchMarkers()); got != 300*5 {
				t.Fatalf("launch markers = %d, want %d", got, 300*5)
			}
			// Flags: driver API for reduce, cooperative for allreduce, graph
			// launches carry no name and cover two kernel records each.
			byCID := map[string][]string{}
			names := map[string]string{}
			for _, l := range r.lines("name") {
				names[l.fields["id"]] = l.fields["name"]
			}
			for _, rec := range r.records() {
				byCID[rec.fields["cid"]] = append(byCID[rec.fields["cid"]], names[rec.fields["name_id"]])
			}
			for _, l := range r.launchMarkers() {
				flags := mustUint(t, l.fields["flags"])
				kernels := byCID[l.fields["cid"]]
				var want uint64
				switch {
				case len(kernels) == 2:
					want = 1 // graph
					if l.fields["name_id"] != "0000000000000000" {
						t.Fatalf("graph launch with name id %s", l.fields["name_id"])
					}
				case kernels[0] == "reduce_kernel":
					want = 4 // driver API
				case kernels[0] == "allreduce_kernel":
					want = 2 // cooperative
				}
				if flags != want {
					t.Fatalf("launch of %v: flags %d, want %d", kernels, flags, want)
				}
				if len(kernels) == 1 && names[l.fields["name_id"]] != kernels[0] {
					t.Fatalf("launch marker names %q, record names %q", names[l.fields["name_id"]], kernels[0])
				}
				if l.fields["device"] != "0" {
					t.Fatalf("launch on device %s", l.fields["device"])
				}
			}
		})
	}
}

// The markers must be real exported functions, or uprobes cannot attach.
func TestInjectExportsMarkers(t *testing.T) {
	dir := built(t)
	f, err := elf.Open(filepath.Join(dir, "libslurmscope_inject.so"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]elf.Symbol{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			found[s.Name] = s
		}
	}
	for _, name := range []string{"InitializeInjection", "slurmscope_kernel_name", "slurmscope_kernel_launch", "slurmscope_kernel_records", "slurmscope_trace_state", "InitializeInjectionNvtx2", "slurmscope_nvtx_range_name", "slurmscope_nvtx_thread"} {
		s, ok := found[name]
		if !ok {
			t.Fatalf("%s not exported", name)
		}
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || elf.ST_BIND(s.Info) != elf.STB_GLOBAL || s.Size == 0 {
			t.Fatalf("%s: type %v bind %v size %d", name, elf.ST_TYPE(s.Info), elf.ST_BIND(s.Info), s.Size)
		}
	}
	if s, ok := found["slurmscope_inject_abi_version"]; !ok || elf.ST_TYPE(s.Info) != elf.STT_OBJECT {
		t.Fatal("slurmscope_inject_abi_version not exported as data")
	}
	// Nothing else leaks out of the library.
	for name, s := range found {
		if elf.ST_BIND(s.Info) == elf.STB_GLOBAL && !strings.HasPrefix(name, "slurmscope_") && name != "InitializeInjection" && name != "InitializeInjectionNvtx2" {
			t.Errorf("unexpected export %s", name)
		}
	}
}

// (b) No CUPTI: the job runs, one line on stderr, nothing traced.
func TestInjectWithoutCUPTIStepsAside(t *testing.T) {
	r := runTrainer(t, true, map[string]string{
		"SLURMSCOPE_CUPTI_PATH": filepath.Join(t.TempDir(), "no", "libcupti.so"),
	}, "--steps", "20")
	l := logLines(r.stderr)
	if len(l) != 1 || !strings.Contains(l[0], "CUPTI not found") {
		t.Fatalf("want one 'CUPTI not found' line, got %q (stderr %q)", l, r.stderr)
	}
	if len(r.totals) != 0 || len(r.trace) != 0 {
		t.Fatalf("traced without CUPTI: totals %v, %d trace lines", r.totals, len(r.trace))
	}
}

// (c) Another profiler already holds the CUPTI subscription.
func TestInjectStepsAsideForAnotherSubscriber(t *testing.T) {
	r := runTrainer(t, true, map[string]string{"SLURMSCOPE_MOCK_CUPTI_BUSY": "1"}, "--steps", "50")
	l := logLines(r.stderr)
	if len(l) != 1 || !strings.Contains(l[0], "another CUPTI client") {
		t.Fatalf("want one 'another CUPTI client' line, got %q", l)
	}
	if sumLaunches(r.truth) != 150 {
		t.Fatalf("trainer ran %d kernels, want 150", sumLaunches(r.truth))
	}
	if len(r.totals) != 0 || len(r.trace) != 0 {
		t.Fatalf("traced while another subscriber held CUPTI")
	}
}

// CUPTI errors and unknown record layouts: log once, step aside, job runs.
func TestInjectStepsAsideOnCUPTIProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"cuda11.8", map[string]string{"SLURMSCOPE_MOCK_CUPTI_VERSION": "18"}, "CUPTI API version 18"},
		{"future", map[string]string{"SLURMSCOPE_MOCK_CUPTI_VERSION": "140000"}, "CUPTI API version 140000"},
		{"subscribe", map[string]string{"SLURMSCOPE_MOCK_CUPTI_FAIL": "cuptiSubscribe"}, "cuptiSubscribe"},
		{"enable-callback", map[string]string{"SLURMSCOPE_MOCK_CUPTI_FAIL": "cuptiEnableCallback"}, "cuptiEnableCallback"},
		{"activity", map[string]string{"SLURMSCOPE_MOCK_CUPTI_FAIL": "cuptiActivityEnable"}, "cuptiActivityEnable"},
		{"version", map[string]string{"SLURMSCOPE_MOCK_CUPTI_FAIL": "cuptiGetVersion"}, "cuptiGetVersion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runTrainer(t, true, tc.env, "--steps", "30")
			l := logLines(r.stderr)
			if len(l) != 1 || !strings.Contains(l[0], tc.want) || !strings.Contains(l[0], "not traced") {
				t.Fatalf("want one line about %q, got %q", tc.want, l)
			}
			if len(r.launchMarkers()) != 0 || len(r.records()) != 0 {
				t.Fatalf("markers called after stepping aside")
			}
			if sumLaunches(r.truth) != 90 {
				t.Fatalf("trainer ran %d kernels, want 90", sumLaunches(r.truth))
			}
		})
	}
}

// (d) A flood of launches: launch markers (stack captures) are capped by
// the token bucket, while GPU time stays exact and unsampled records say so.
func TestInjectRateLimitsLaunchMarkers(t *testing.T) {
	const flood = 20000
	for _, rate := range []uint64{0, 50} {
		t.Run(fmt.Sprintf("rate=%d", rate), func(t *testing.T) {
			r := runTrainer(t, true, map[string]string{
				"SLURMSCOPE_LAUNCH_SAMPLES_PER_SEC": strconv.FormatUint(rate, 10),
			}, "--steps", "10", "--flood", strconv.Itoa(flood))
			if l := logLines(r.stderr); len(l) != 0 {
				t.Fatalf("unexpected log: %q", l)
			}
			assertExactTotals(t, r)
			assertTraceConsistent(t, r)
			calls := uint64(flood + 10*3)
			markers := uint64(len(r.launchMarkers()))
			// The bound is the bucket's own: burst (one second of rate)
			// plus rate per elapsed second, with the elapsed time of this
			// very run, so it holds on any machine speed.
			bound := rate + uint64(math.Ceil(float64(rate)*r.elapsed.Seconds())) + 1
			if rate == 0 {
				bound = 0
			}
			if markers > bound || markers >= calls {
				t.Fatalf("%d launch markers for %d launches at %d/s over %v (bound %d)", markers, calls, rate, r.elapsed, bound)
			}
			if rate > 0 && markers == 0 {
				t.Fatal("no launch sampled at all")
			}
			var unsampled uint64
			for _, rec := range r.records() {
				if rec.fields["sampled"] == "0" {
					unsampled++
				}
			}
			if unsampled != calls-markers {
				t.Fatalf("%d records flagged unsampled, want %d", unsampled, calls-markers)
			}
		})
	}
}

// (e) No injection library: the trainer runs exactly as without slurmscope.
func TestTrainerUnaffectedWithoutInjection(t *testing.T) {
	r := runTrainer(t, false, nil, "--steps", "40", "--graph")
	if r.stderr != "" {
		t.Fatalf("stderr: %q", r.stderr)
	}
	if len(r.totals) != 0 || len(r.trace) != 0 {
		t.Fatal("something traced without the injection library")
	}
	if sumLaunches(r.truth) != 40*5 {
		t.Fatalf("trainer ran %d kernels, want %d", sumLaunches(r.truth), 40*5)
	}
}

// On a machine with the CUDA toolkit, check cupti_abi.h against the real
// headers (compile time) and the installed CUPTI (run time).
func TestCUPTIABIMatchesRealHeaders(t *testing.T) {
	testenv.Require(t, testenv.Tools(ccName()))
	var roots []string
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if d := os.Getenv(v); d != "" {
			roots = append(roots, d)
		}
	}
	roots = append(roots, "/usr/local/cuda", "/usr")
	var inc, libs []string
	for _, root := range roots {
		for _, d := range []string{"include", "extras/CUPTI/include", "include/x86_64-linux-gnu", "include/aarch64-linux-gnu"} {
			if _, err := os.Stat(filepath.Join(root, d, "cupti.h")); err == nil {
				inc = append(inc, "-I"+filepath.Join(root, d), "-I"+filepath.Join(root, "include"))
			}
		}
		for _, d := range []string{"lib64", "extras/CUPTI/lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"} {
			libs = append(libs, "-L"+filepath.Join(root, d))
		}
		if inc != nil {
			break
		}
	}
	if inc == nil {
		t.Skip("no cupti.h here (set CUDA_HOME on a machine with the CUDA toolkit)")
	}
	bin := filepath.Join(t.TempDir(), "abi_check")
	args := append([]string{"-std=c11", "-Wall", "-I."}, inc...)
	args = append(args, "abi_check.c", "-o", bin)
	args = append(args, libs...)
	args = append(args, "-lcupti")
	if out, err := exec.Command(ccName(), args...).CombinedOutput(); err != nil {
		t.Fatalf("abi_check does not build against the real headers:\n%s", out)
	}
	var ld []string
	for _, l := range libs {
		ld = append(ld, strings.TrimPrefix(l, "-L"))
	}
	if v := os.Getenv("LD_LIBRARY_PATH"); v != "" {
		ld = append(ld, v)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+strings.Join(ld, ":"))
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("abi_check: %v", err)
	}
}

// markerSymbols are the functions the agent's uprobes attach to.
var markerSymbols = []string{"slurmscope_kernel_name", "slurmscope_kernel_launch", "slurmscope_kernel_records", "slurmscope_trace_state"}

// markerPrologue returns the first 8 bytes of each marker of the library at
// path, read through the ELF program headers (what the loader maps).
func markerPrologue(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, s := range syms {
		if !slices.Contains(markerSymbols, s.Name) || s.Section == elf.SHN_UNDEF {
			continue
		}
		for _, p := range f.Progs {
			if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 || s.Value < p.Vaddr || s.Value+8 > p.Vaddr+p.Filesz {
				continue
			}
			b := make([]byte, 8)
			if _, err := p.ReadAt(b, int64(s.Value-p.Vaddr)); err != nil {
				t.Fatal(err)
			}
			out[s.Name] = b
		}
		if out[s.Name] == nil {
			t.Fatalf("%s at %#x is in no executable segment", s.Name, s.Value)
		}
	}
	if len(out) != len(markerSymbols) {
		t.Fatalf("markers found: %v", out)
	}
	return out
}

// checkMarkerPrologues: every marker starts with its frame setup, the
// instruction the agent's uprobe sits on. x86-64: push %rbp (0x55) then
// mov %rsp,%rbp (48 89 e5); the kernel emulates the push, where a bare ret
// (0xc3), or an endbr64, has to be single-stepped (about 3.5x the cost per
// probed call). arm64: stp x29, x30, [sp, #-16]! then mov x29, sp, after at
// most a paciasp/bti c landing pad.
func checkMarkerPrologues(t *testing.T, path string) {
	t.Helper()
	for name, b := range markerPrologue(t, path) {
		switch runtime.GOARCH {
		case "amd64":
			if !bytes.Equal(b[:4], []byte{0x55, 0x48, 0x89, 0xe5}) {
				t.Errorf("%s starts with % x, want push %%rbp; mov %%rsp,%%rbp (55 48 89 e5)", name, b[:4])
			}
		case "arm64":
			insn := []uint32{binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])}
			if insn[0] == 0xd503233f || insn[0] == 0xd503245f { // paciasp, bti c
				insn[0] = insn[1]
			}
			if insn[0] != 0xa9bf7bfd { // stp x29, x30, [sp, #-16]!
				t.Errorf("%s starts with %08x, want stp x29, x30, [sp, #-16]! (a9bf7bfd)", name, insn[0])
			}
		default:
			t.Skipf("no prologue check for %s", runtime.GOARCH)
		}
	}
	// The same through the disassembler, where there is one (binutils).
	if runtime.GOARCH != "amd64" {
		return
	}
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Logf("no objdump; checked the bytes only")
		return
	}
	out, err := exec.Command(objdump, "-d", "--no-show-raw-insn", path).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	lines := strings.Split(string(out), "\n")
	for _, name := range markerSymbols {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasSuffix(l, " <"+name+">:") })
		if i < 0 || i+2 >= len(lines) {
			t.Fatalf("objdump shows no %s", name)
		}
		first, second := strings.Fields(lines[i+1]), strings.Fields(lines[i+2])
		if len(first) < 3 || first[1] != "push" || first[2] != "%rbp" || len(second) < 3 || second[1] != "mov" || second[2] != "%rsp,%rbp" {
			t.Errorf("objdump of %s:\n%s\n%s", name, lines[i+1], lines[i+2])
		}
	}
}

// The markers must not compile to a bare ret (see inject.c): a compiler
// change would otherwise silently make every probed call 3.5x dearer.
func TestInjectMarkersStartWithFrameSetup(t *testing.T) {
	dir := built(t)
	checkMarkerPrologues(t, filepath.Join(dir, "libslurmscope_inject.so"))

	// Distributions that default to -fcf-protection would put endbr64
	// first; the markers opt out (nocf_check in slurmscope_inject.h).
	if runtime.GOARCH != "amd64" {
		return
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	probe := exec.Command("sh", "-c", "echo 'int x;' | "+cc+" -fcf-protection -x c -c -o /dev/null -")
	if probe.Run() != nil {
		t.Logf("%s has no -fcf-protection; not checked with it", cc)
		return
	}
	cet := t.TempDir()
	c := exec.Command("sh", "build.sh", cet)
	c.Env = append(os.Environ(), "CC="+cc+" -fcf-protection")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("build with -fcf-protection: %v\n%s", err, out)
	}
	checkMarkerPrologues(t, filepath.Join(cet, "libslurmscope_inject.so"))
}

// firstIndex is the index of the first trace line of kind, or -1; lastIndex
// the last.
func (r run) firstIndex(kind string) int {
	return slices.IndexFunc(r.trace, func(l traceLine) bool { return l.kind == kind })
}

func (r run) lastIndex(kind string) int {
	for i := len(r.trace) - 1; i >= 0; i-- {
		if r.trace[i].kind == kind {
			return i
		}
	}
	return -1
}

// Records reach the agent while the process runs, not only at exit: the
// housekeeping thread's cuptiActivityFlushAll(0) hands over a partly filled
// buffer (the mock, like CUPTI, delivers only full buffers on its own, and
// 3 steps fill no 1 MiB buffer). The trainer waits until it has seen a
// record delivered, then launches again, so the proof is the order of the
// library's own marker calls: a record before the last launch. With a CUPTI
// lacking cuptiActivityFlushPeriod the same holds, and with flushing turned
// off no record comes before exit.
func TestInjectDeliversRecordsWhileRunning(t *testing.T) {
	for _, tc := range []struct {
		name, mock, flushMS string
		wantPeriod          uint64
		wantEarly           bool
		wait                string
	}{
		{"flush-period", "mock", "", 1000, true, "60"},
		{"no-flush-period-api", "mock-noperiod", "", 0, true, "60"},
		{"flushing-off", "mock", "0", 0, false, "1.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{
				"SLURMSCOPE_CUPTI_PATH":             filepath.Join(built(t), tc.mock, "libcupti.so"),
				"SLURMSCOPE_LAUNCH_SAMPLES_PER_SEC": "1000000000",
			}
			if tc.flushMS != "" {
				env["SLURMSCOPE_INJECT_FLUSH_MS"] = tc.flushMS
			}
			r := runTrainer(t, true, env, "--steps", "3", "--wait-records", tc.wait)
			if l := logLines(r.stderr); len(l) != 0 {
				t.Fatalf("library logged on a healthy run: %q", l)
			}
			assertExactTotals(t, r)
			assertTraceConsistent(t, r)
			if got := r.mockSummary["flush_period_ms"]; got != tc.wantPeriod {
				t.Errorf("mock flush period %d ms, want %d", got, tc.wantPeriod)
			}
			firstRec, lastLaunch := r.firstIndex("record"), r.lastIndex("launch")
			early := strings.Contains(r.stdout, "records_before_exit=1")
			if tc.wantEarly {
				if !early || firstRec < 0 || firstRec > lastLaunch {
					t.Fatalf("no record before the last launch (first record line %d, last launch line %d; stdout %q)",
						firstRec, lastLaunch, r.stdout)
				}
				if r.mockSummary["flushes"] == 0 {
					t.Errorf("no cuptiActivityFlushAll(0) seen by the mock: %v", r.mockSummary)
				}
			} else {
				if early || firstRec < lastLaunch {
					t.Fatalf("records before exit with flushing off (first record line %d, last launch line %d)", firstRec, lastLaunch)
				}
				if r.mockSummary["flushes"] != 0 {
					t.Errorf("periodic flushes with flushing off: %v", r.mockSummary)
				}
			}
		})
	}
}

// Names are re-announced periodically, so an agent that attached after a
// name's first announcement learns it: after the first records are handed
// over, every name is announced again (same id, same bytes).
func TestInjectReannouncesNames(t *testing.T) {
	r := runTrainer(t, true, map[string]string{
		"SLURMSCOPE_LAUNCH_SAMPLES_PER_SEC": "1000000000",
	}, "--steps", "3", "--wait-records", "60")
	assertExactTotals(t, r)
	assertTraceConsistent(t, r)
	firstRec := r.firstIndex("record")
	if firstRec < 0 || !strings.Contains(r.stdout, "records_before_exit=1") {
		t.Fatalf("no records while running: %q", r.stdout)
	}
	before, after := map[string]int{}, map[string]int{}
	for i, l := range r.trace {
		if l.kind != "name" {
			continue
		}
		if i < firstRec {
			before[l.fields["id"]]++
		} else {
			after[l.fields["id"]]++
		}
	}
	if len(before) != len(r.truth) {
		t.Fatalf("%d names announced before the first record, %d kernels ran", len(before), len(r.truth))
	}
	for id := range before {
		if after[id] == 0 {
			t.Errorf("name %s not re-announced after the first records", id)
		}
	}
	if r.summary["reannounced"] < uint64(len(before)) {
		t.Errorf("library counted %d re-announcements, want at least %d", r.summary["reannounced"], len(before))
	}
}
