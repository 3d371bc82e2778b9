package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/slurmscope/slurmscope/agent/sink"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/internal/printable"
	"github.com/slurmscope/slurmscope/schema"
)

// topProfile builds a CPU profile the way the agent writes one: samples and
// cpu time per stack (leaf first), labels as name=value comments.
type topProfile struct {
	p     *profile.Profile
	funcs map[string]*profile.Function
}

func newTopProfile(labels ...string) *topProfile {
	return &topProfile{
		p: &profile.Profile{
			SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
			PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
			Period:     10_000_000,
			TimeNanos:  time.Unix(1700000000, 0).UnixNano(),
			Comments:   labels,
		},
		funcs: map[string]*profile.Function{},
	}
}

func (tp *topProfile) fn(name string) *profile.Function {
	if f, ok := tp.funcs[name]; ok {
		return f
	}
	f := &profile.Function{ID: uint64(len(tp.p.Function) + 1), Name: name}
	tp.funcs[name] = f
	tp.p.Function = append(tp.p.Function, f)
	return f
}

// add records n samples of 10ms on a stack, leaf first; a frame
// "inner+outer" is one location where inner was inlined into outer, listed
// innermost first as pprof does.
func (tp *topProfile) add(n int64, stack ...string) *topProfile {
	var locs []*profile.Location
	for _, frame := range stack {
		loc := &profile.Location{ID: uint64(len(tp.p.Location) + 1), Address: uint64(0x1000 + len(tp.p.Location))}
		parts := strings.Split(frame, "+")
		for _, p := range parts {
			loc.Line = append(loc.Line, profile.Line{Function: tp.fn(p)})
		}
		tp.p.Location = append(tp.p.Location, loc)
		locs = append(locs, loc)
	}
	tp.p.Sample = append(tp.p.Sample, &profile.Sample{Location: locs, Value: []int64{n, n * 10_000_000}})
	return tp
}

func (tp *topProfile) write(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := tp.p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tp.p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func lbl(label, value string) string { return label + "=" + value }

func runTop(t *testing.T, wantCode int, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(append([]string{"top"}, args...), &out, &errb); code != wantCode {
		t.Fatalf("top %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantCode, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// topJSONLines parses --json output, keyed by the job directory.
func topJSONLines(t *testing.T, out string) map[string]topJSON {
	t.Helper()
	got := map[string]topJSON{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var j topJSON
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got[j.Dir] = j
	}
	return got
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// writeTwoJobs lays out what `run` writes for job 12 (two intervals, two
// hosts), job 7 and unattributed processes, plus files top must skip.
func writeTwoJobs(t *testing.T) string {
	dir := t.TempDir()
	job12 := func(host string) []string {
		return []string{lbl(schema.JobID.Label, "12"), lbl(schema.JobName.Label, "split"), lbl(schema.JobUser.Label, "alice"),
			lbl(schema.HostName.Label, host), lbl(schema.ServiceName, "split")}
	}
	newTopProfile(job12("node-a")...).
		add(30, "hot_a", "main").
		add(10, "hot_b", "main").
		write(t, filepath.Join(dir, "12", "process_cpu-1700000000.pb.gz"))
	newTopProfile(job12("node-b")...).
		add(30, "hot_a", "main").
		add(10, "hot_b", "main").
		add(20, "fib", "fib", "fib", "main"). // recursion: cum counts each sample once
		write(t, filepath.Join(dir, "12", "process_cpu-1700000015.pb.gz"))
	newTopProfile(lbl(schema.JobID.Label, "7"), lbl(schema.JobUser.Label, "bob"), lbl(schema.HostName.Label, "node-a")).
		add(5, "inner+outer", "main"). // inner was inlined into outer: inner is the leaf
		write(t, filepath.Join(dir, "7", "process_cpu-1700000000.pb.gz"))
	newTopProfile(lbl(schema.HostName.Label, "node-a"), lbl(schema.ServiceName, "sshd")).
		add(1, "poll").
		write(t, filepath.Join(dir, sink.NoJobDir, "process_cpu-1700000000.pb.gz"))
	return dir
}

func TestTopMergesPerJob(t *testing.T) {
	dir := writeTwoJobs(t)
	out, errs := runTop(t, 0, "--dir", dir, "--json")
	if errs != "" {
		t.Errorf("stderr: %s", errs)
	}
	got := topJSONLines(t, out)
	if len(got) != 3 {
		t.Fatalf("want jobs 12, 7 and %s, got %v", sink.NoJobDir, out)
	}
	j := got["12"]
	if j.Files != 2 || j.Samples != 100 || !near(j.CPUSeconds, 1.0) {
		t.Errorf("job 12: files %d, samples %d, cpu %vs; want 2, 100, 1s", j.Files, j.Samples, j.CPUSeconds)
	}
	if j.Attributes[schema.JobName.Name] != "split" || j.Attributes[schema.JobUser.Name] != "alice" || j.Attributes[schema.JobID.Name] != "12" {
		t.Errorf("job 12 attributes: %v", j.Attributes)
	}
	if hosts, _ := j.Attributes[schema.HostName.Name].([]any); len(hosts) != 2 || hosts[0] != "node-a" || hosts[1] != "node-b" {
		t.Errorf("job 12 hosts: %v, want both nodes", j.Attributes[schema.HostName.Name])
	}
	want := []topFnJSON{
		{Name: "hot_a", SelfSeconds: 0.6, SelfPercent: 60, SumPercent: 60, CumSeconds: 0.6, CumPercent: 60},
		{Name: "fib", SelfSeconds: 0.2, SelfPercent: 20, SumPercent: 80, CumSeconds: 0.2, CumPercent: 20},
		{Name: "hot_b", SelfSeconds: 0.2, SelfPercent: 20, SumPercent: 100, CumSeconds: 0.2, CumPercent: 20},
	}
	if len(j.Functions) != len(want) {
		t.Fatalf("job 12 functions: %+v, want %+v (main has no self time)", j.Functions, want)
	}
	for i, w := range want {
		g := j.Functions[i]
		if g.Name != w.Name || !near(g.SelfSeconds, w.SelfSeconds) || !near(g.SelfPercent, w.SelfPercent) ||
			!near(g.SumPercent, w.SumPercent) || !near(g.CumSeconds, w.CumSeconds) || !near(g.CumPercent, w.CumPercent) {
			t.Errorf("job 12 function %d: %+v, want %+v", i, g, w)
		}
	}
	if f := got["7"].Functions; len(f) != 1 || f[0].Name != "inner" {
		t.Errorf("job 7: %+v, want the inlined callee as the leaf", f)
	}
	if got[sink.NoJobDir].Attributes[schema.ServiceName] != "sshd" {
		t.Errorf("%s: %+v", sink.NoJobDir, got[sink.NoJobDir])
	}
	// Busiest first.
	if first, _, _ := strings.Cut(out, "\n"); !strings.Contains(first, `"dir":"12"`) {
		t.Errorf("first job is not the busiest: %s", first)
	}
}

// TestTopCum: --cum orders by time anywhere on the stack, so the callers
// (main, which has no self time) are listed, and recursion counts once.
func TestTopCum(t *testing.T) {
	dir := writeTwoJobs(t)
	out, errs := runTop(t, 0, "--dir", dir, "--job", "12", "--cum", "--json")
	if errs != "" {
		t.Errorf("stderr: %s", errs)
	}
	j := topJSONLines(t, out)["12"]
	want := []topFnJSON{
		{Name: "main", SelfSeconds: 0, SelfPercent: 0, SumPercent: 0, CumSeconds: 1, CumPercent: 100},
		{Name: "hot_a", SelfSeconds: 0.6, SelfPercent: 60, SumPercent: 60, CumSeconds: 0.6, CumPercent: 60},
		{Name: "fib", SelfSeconds: 0.2, SelfPercent: 20, SumPercent: 80, CumSeconds: 0.2, CumPercent: 20},
		{Name: "hot_b", SelfSeconds: 0.2, SelfPercent: 20, SumPercent: 100, CumSeconds: 0.2, CumPercent: 20},
	}
	if len(j.Functions) != len(want) {
		t.Fatalf("job 12 functions by cum: %+v, want %+v", j.Functions, want)
	}
	for i, w := range want {
		g := j.Functions[i]
		if g.Name != w.Name || !near(g.SelfSeconds, w.SelfSeconds) || !near(g.SumPercent, w.SumPercent) ||
			!near(g.CumSeconds, w.CumSeconds) || !near(g.CumPercent, w.CumPercent) {
			t.Errorf("job 12 function %d by cum: %+v, want %+v", i, g, w)
		}
	}
	text, _ := runTop(t, 0, "--dir", dir, "--job", "12", "--cum", "-n", "1")
	if !strings.Contains(text, "main") || strings.Contains(text, "hot_a") {
		t.Errorf("--cum -n 1 lists main alone:\n%s", text)
	}
}

func TestTopText(t *testing.T) {
	dir := writeTwoJobs(t)
	out, _ := runTop(t, 0, "--dir", dir, "-n", "1")
	for _, want := range []string{
		"job 12  name split  user alice  host node-a,node-b\n  1.00 s CPU, 100 samples, 2 file(s)\n",
		"job 7  user bob  host node-a\n",
		"processes in no job  services sshd  host node-a\n",
		"60.0%", "hot_a",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hot_b") {
		t.Errorf("-n 1 listed a second function:\n%s", out)
	}
	only, _ := runTop(t, 0, "--dir", dir, "--job", "7")
	if strings.Contains(only, "job 12") || !strings.Contains(only, "job 7") || !strings.Contains(only, "inner") {
		t.Errorf("--job 7:\n%s", only)
	}
}

func TestTopSkipsBadFiles(t *testing.T) {
	dir := writeTwoJobs(t)
	good, err := os.ReadFile(filepath.Join(dir, "12", "process_cpu-1700000000.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	// A file cut short by a crash, one that is not gzip at all, and an
	// empty one, in a job of their own and beside good files.
	for path, data := range map[string][]byte{
		filepath.Join(dir, "12", "process_cpu-1700000030.pb.gz"): good[:len(good)/2],
		filepath.Join(dir, "12", "process_cpu-1700000045.pb.gz"): []byte("not a profile"),
		filepath.Join(dir, "99", "process_cpu-1700000000.pb.gz"): {},
		filepath.Join(dir, "12", "notes.txt"):                    []byte("ignored"),
	} {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errs := runTop(t, 0, "--dir", dir, "--json")
	for _, f := range []string{"1700000030", "1700000045", filepath.Join("99", "process_cpu")} {
		if !strings.Contains(errs, f) {
			t.Errorf("stderr does not report the bad file %s:\n%s", f, errs)
		}
	}
	if strings.Contains(errs, "notes.txt") {
		t.Errorf("a file that is not a profile was read: %s", errs)
	}
	got := topJSONLines(t, out)
	if j := got["12"]; j.Files != 2 || j.Samples != 100 {
		t.Errorf("job 12 after skipping bad files: %d files, %d samples; want 2, 100", j.Files, j.Samples)
	}
	if _, ok := got["99"]; ok {
		t.Error("job 99 has no readable profile but is listed")
	}
}

func TestTopPrintsHostileNamesSafely(t *testing.T) {
	dir := t.TempDir()
	name := "x\x1b[2J\ny\t\xff"
	newTopProfile(lbl(schema.JobID.Label, "3"), lbl(schema.JobName.Label, name), lbl(schema.JobUser.Label, "eve\r")).
		add(1, "evil\x1b]0;pwned\x07fn").
		write(t, filepath.Join(dir, "3", "process_cpu-1.pb.gz"))
	out, _ := runTop(t, 0, "--dir", dir)
	if strings.ContainsAny(out, "\x1b\x07\r\t\xff") {
		t.Errorf("control characters reached the terminal: %q", out)
	}
	for _, want := range []string{printable.String(name, ""), `eve\r`, `evil\x1b]0;pwned\afn`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks the escaped %q: %q", want, out)
		}
	}
	if lines := strings.Count(out, "\n"); lines != 4 {
		t.Errorf("a newline in a name broke the layout (%d lines): %q", lines, out)
	}
	js, _ := runTop(t, 0, "--dir", dir, "--json")
	if got := topJSONLines(t, js)["3"]; got.Attributes[schema.JobName.Name] != strings.ToValidUTF8(name, "\uFFFD") {
		t.Errorf("--json name %q, want the value itself", got.Attributes[schema.JobName.Name])
	}
}

func TestTopErrors(t *testing.T) {
	dir := writeTwoJobs(t)
	if _, errs := runTop(t, 1, "--dir", dir, "--job", "404"); !strings.Contains(errs, "404") {
		t.Errorf("missing job: %s", errs)
	}
	runTop(t, 2, "--dir", dir, "--job", "../12")
	runTop(t, 2)
	if _, errs := runTop(t, 1, "--dir", t.TempDir()); !strings.Contains(errs, "no readable process_cpu profiles") {
		t.Errorf("empty dir: %s", errs)
	}
	runTop(t, 1, "--dir", filepath.Join(dir, "nonexistent"))
	runTop(t, 2, "--dir", dir, "--type", "memory")
}

// TestTopOffCPU: --type offcpu reads the off_cpu files only, by their
// blocked time and switches, and the default reads the CPU ones without
// a word about the others; --type offcpu-runnable the runnable time.
func TestTopOffCPU(t *testing.T) {
	dir := t.TempDir()
	newTopProfile(lbl(schema.JobID.Label, "12")).add(5, "hot", "main").write(t, filepath.Join(dir, "12", "process_cpu-1.pb.gz"))
	off := newTopProfile(lbl(schema.JobID.Label, "12"))
	off.p.SampleType = []*profile.ValueType{{Type: "switches", Unit: "count"}, {Type: "runnable", Unit: "nanoseconds"}, {Type: "blocked", Unit: "nanoseconds"}}
	off.p.PeriodType, off.p.Period = &profile.ValueType{Type: "off_cpu", Unit: "nanoseconds"}, 1
	off.add(0, "do_nanosleep", "wait_a", "main").add(0, "anon_pipe_read", "wait_b", "main").add(0, "irqentry_exit_to_user_mode", "hot", "main")
	off.p.Sample[0].Value = []int64{30, 0, 3_000_000_000}
	off.p.Sample[1].Value = []int64{10, 0, 1_000_000_000}
	off.p.Sample[2].Value = []int64{4, 500_000_000, 0}
	off.write(t, filepath.Join(dir, "12", "off_cpu-1.pb.gz"))

	out, errs := runTop(t, 0, "--dir", dir, "--type", "offcpu")
	if !strings.Contains(out, "4.00 s blocked, 44 switches, 1 file(s)") || !strings.Contains(out, "do_nanosleep") || errs != "" {
		t.Errorf("--type offcpu:\n%s\n%s", out, errs)
	}
	if lines := strings.Split(out, "\n"); len(lines) < 5 || !strings.Contains(lines[3], "do_nanosleep") || !strings.Contains(lines[3], "75.0%") {
		t.Errorf("want do_nanosleep first with 75%% of the blocked time:\n%s", out)
	}
	// Where the kernel's frames are marked so, the self time is the
	// program's: the call it blocked in, not the scheduler.
	kernel := &profile.Mapping{ID: 1, File: symbolize.KernelModule}
	off.p.Mapping = []*profile.Mapping{kernel}
	for _, l := range off.p.Location {
		if f := l.Line[0].Function.Name; f == "do_nanosleep" || f == "anon_pipe_read" || f == "irqentry_exit_to_user_mode" {
			l.Mapping = kernel
		}
	}
	off.write(t, filepath.Join(dir, "12", "off_cpu-1.pb.gz"))
	out, _ = runTop(t, 0, "--dir", dir, "--type", "offcpu")
	if lines := strings.Split(out, "\n"); len(lines) < 5 || !strings.Contains(lines[3], "wait_a") || !strings.Contains(lines[3], "75.0%") {
		t.Errorf("want wait_a first with 75%% of the blocked time:\n%s", out)
	}
	out, errs = runTop(t, 0, "--dir", dir, "--type", "offcpu-runnable")
	if !strings.Contains(out, "0.50 s waiting for a CPU") || !strings.Contains(out, "100.0%  hot") || errs != "" {
		t.Errorf("--type offcpu-runnable:\n%s\n%s", out, errs)
	}
	out, errs = runTop(t, 0, "--dir", dir)
	if !strings.Contains(out, "0.05 s CPU, 5 samples, 1 file(s)") || errs != "" {
		t.Errorf("cpu:\n%s\n%s", out, errs)
	}
}
