package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/slurmscope/slurmscope/agent/cgroup/cgrouptest"
	"github.com/slurmscope/slurmscope/agent/procfs/procfstest"
	"github.com/slurmscope/slurmscope/schema"
)

const fixtureRoot = "../attribution/testdata/proc"
const fixturePasswd = "../attribution/testdata/passwd"

// fixtureCgroups mirrors a fixture proc tree's cgroups, owned by whoever
// runs the tests, and returns the --cgroup-root flag for it.
func fixtureCgroups(tb testing.TB, procRoot string) []string {
	tb.Helper()
	cgroupOwner = os.Getuid()
	tb.Cleanup(func() { cgroupOwner = 0 })
	return []string{"--cgroup-root", cgrouptest.Mirror(tb, procRoot).Root}
}

func runJobs(t *testing.T, args ...string) (map[float64]map[string]any, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(append(append([]string{"jobs", "--proc-root", fixtureRoot, "--passwd", fixturePasswd, "--json"}, fixtureCgroups(t, fixtureRoot)...), args...), &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !utf8.Valid(out.Bytes()) {
		t.Fatal("output is not valid UTF-8")
	}
	got := map[float64]map[string]any{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		pid, ok := m["pid"].(float64)
		if !ok {
			t.Fatalf("line without a numeric pid: %q", sc.Text())
		}
		for k, v := range m {
			if _, known := schema.ByName(k); k != "pid" && !known {
				t.Errorf("key %q is not a schema attribute", k)
			}
			if s, ok := v.(string); ok && s == "" {
				t.Errorf("pid %v: empty value for %q should have been left out", pid, k)
			}
		}
		got[pid] = m
	}
	return got, errb.String()
}

func TestJobsJSON(t *testing.T) {
	got, stderr := runJobs(t, "--node-name", "node-a")
	w := got[301]
	if w == nil {
		t.Fatal("pid 301 missing")
	}
	for k, v := range map[string]string{
		schema.JobID.Name: "4242", schema.JobName.Name: `train "llama" ✓`, schema.JobUser.Name: "bob",
		schema.JobStep.Name: "batch", schema.JobAccount.Name: "physics", schema.JobPartition.Name: "gpu", schema.HostName.Name: "node-a",
	} {
		if w[k] != v {
			t.Errorf("pid 301 %s = %v, want %q", k, w[k], v)
		}
	}
	if _, ok := got[500][schema.JobAccount.Name]; ok {
		t.Error("an unknown account was printed")
	}
	for _, pid := range []float64{1, 200, 400, 401, 502, 701} {
		if _, ok := got[pid]; ok {
			t.Errorf("pid %v printed without --all (no job, another node, or malformed)", pid)
		}
	}
	if got[700][schema.JobName.Name] != "evil\nname\uFFFD\"} or {a=\"b" {
		t.Errorf("hostile name = %q", got[700][schema.JobName.Name])
	}
	if !strings.Contains(stderr, "3 processes with malformed Slurm cgroup paths") {
		t.Errorf("stderr = %q", stderr)
	}
}

func TestJobsAll(t *testing.T) {
	got, _ := runJobs(t, "--all")
	if p := got[200]; p == nil || p[schema.JobID.Name] != nil {
		t.Errorf("--all: login shell = %v", p)
	}
	if p := got[400]; p == nil || p[schema.HostName.Name] != "node-b" {
		t.Errorf("without --node-name every node's job is shown: %v", p)
	}
}

func TestJobsTableEscapesHostileValues(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(append([]string{"jobs", "--proc-root", fixtureRoot, "--passwd", fixturePasswd}, fixtureCgroups(t, fixtureRoot)...), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "700 ") && !strings.Contains(l, `evil\nname`) {
			t.Errorf("newline not escaped: %q", l)
		}
	}
	// one header plus one line per in-job process: no value split a line
	jsonOut, _ := runJobs(t)
	if len(lines) != len(jsonOut)+1 {
		t.Errorf("table has %d lines for %d processes", len(lines), len(jsonOut))
	}
}

func TestJobsBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"jobs", "--nope"}, &out, &errb); code != 2 {
		t.Errorf("unknown flag: exit %d", code)
	}
	if code := Main([]string{"jobs", "--proc-root", "/nonexistent"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "nonexistent") {
		t.Errorf("missing proc root: exit %d, %q", code, errb.String())
	}
	if code := Main([]string{"bogus"}, &out, &errb); code != 2 {
		t.Errorf("unknown command: exit %d", code)
	}
}

// BenchmarkJobs10k is `slurmscope-agent jobs --json` on a node with 10,000
// processes.
func BenchmarkJobs10k(b *testing.B) {
	root := procfstest.SyntheticNode(b, 10000)
	cg := fixtureCgroups(b, root)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var out, errb bytes.Buffer
		if code := Main(append([]string{"jobs", "--json", "--proc-root", root, "--passwd", fixturePasswd}, cg...), &out, &errb); code != 0 {
			b.Fatal(errb.String())
		}
		if n := bytes.Count(out.Bytes(), []byte("\n")); n != 9000 {
			b.Fatalf("%d lines, want 9000", n)
		}
	}
}
