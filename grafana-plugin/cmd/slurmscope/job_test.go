package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

// A job that ran for 3 days is reported whole: past Pyroscope's
// max_query_length (a day), the range is asked for a day at a time.
func TestJobOfThreeDays(t *testing.T) {
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(pyrostandin.New(pyrostandin.WithClock(func() time.Time { return end }),
		pyrostandin.WithIngestionWindow(4*24*time.Hour, 0)).Handler())
	defer srv.Close()
	req := &pushv1.PushRequest{}
	for h := 1; h <= 72; h++ {
		host := []string{"node-a", "node-b"}[h%2]
		req.Series = append(req.Series, pyrostandin.CPUSeries(end.Add(-time.Duration(h)*time.Hour),
			map[string]int64{"python;train;matmul": 2e9, "python;load": 1e9},
			schema.ServiceName, "train", schema.JobID.Label, "4242", schema.HostName.Label, host))
	}
	if _, err := pushv1connect.NewPusherServiceClient(http.DefaultClient, srv.URL).Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run("job", "4242", "--pyroscope-url", srv.URL, "--since", "72h", "--to", end.Format(time.RFC3339), "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Nodes  []string `json:"nodes"`
		CPU    int64    `json:"cpu_total_ns"`
		TopCPU []struct {
			Name string `json:"name"`
			Self int64  `json:"self_ns"`
		} `json:"top_cpu_functions"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if !reflect.DeepEqual(rep.Nodes, []string{"node-a", "node-b"}) || rep.CPU != 72*3e9 ||
		len(rep.TopCPU) == 0 || rep.TopCPU[0].Name != "matmul" || rep.TopCPU[0].Self != 72*2e9 {
		t.Errorf("report over 3 days:\n%s", stdout)
	}
	if code, _, stderr := run("job", "4242", "--pyroscope-url", srv.URL, "--since", "72h", "--to", end.Format(time.RFC3339), "--max-calls", "2"); code != 1 || stderr == "" {
		t.Errorf("3 chunks over --max-calls 2: exit %d %s", code, stderr)
	}
}

// The findings lead the report, in text and in JSON, before anything
// else about the job.
func TestJobReportLeadsWithFindings(t *testing.T) {
	used := 1.9
	rep := &query.JobReport{JobID: "42", From: "2026-11-30T10:00:00Z", To: "2026-11-30T11:00:00Z",
		Findings: []findings.Finding{
			{Kind: findings.OOMKilled, Severity: findings.Critical, JobID: "42", Summary: "1 process OOM-killed (peak 4.0 GiB of a 4.0 GiB limit)", Advice: "Request more memory."},
			{Kind: findings.CPUUnderused, Severity: findings.Warning, JobID: "42", Summary: "used 1.9 of 16 cores (12%)", Advice: "Ask for fewer cores."},
		},
		Nodes: []string{"node-a"},
		Host:  []query.HostStats{{Host: "node-a", Seconds: 3600, CPUSeconds: 6840, UsedCores: &used, AllocatedCores: 16, MemPeakBytes: 4 << 30, MemLimitBytes: 4 << 30, OOMKills: 1}},
	}
	var b strings.Builder
	printJob(&b, rep)
	out := b.String()
	want := []string{
		"job 42, 2026-11-30T10:00:00Z to 2026-11-30T11:00:00Z",
		"findings (2):",
		"  CRITICAL oomKilled: 1 process OOM-killed (peak 4.0 GiB of a 4.0 GiB limit)",
		"           Request more memory.",
		"  WARNING  cpuUnderused: used 1.9 of 16 cores (12%)",
		"nodes (1): node-a",
		"host (the job's cgroup on each node):",
	}
	last := -1
	for _, w := range want {
		i := strings.Index(out, w)
		if i <= last {
			t.Fatalf("%q missing or out of order in:\n%s", w, out)
		}
		last = i
	}
	if !regexp.MustCompile(`node-a\s+1h0m0s\s+6840.00s\s+1.90\s+16\s+4.0 GiB\s+4.0 GiB\s+1`).MatchString(out) {
		t.Errorf("host row:\n%s", out)
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if i, j := strings.Index(string(js), `"findings"`), strings.Index(string(js), `"nodes"`); i < 0 || i > j {
		t.Errorf("JSON does not lead with the findings: %s", js)
	}
	// No Prometheus: no findings section (a note says why), not "none".
	b.Reset()
	printJob(&b, &query.JobReport{JobID: "42", Warnings: []string{"no Prometheus URL: no GPU metrics"}})
	if strings.Contains(b.String(), "findings") {
		t.Errorf("findings without Prometheus:\n%s", b.String())
	}
}

func TestJobThresholdFlags(t *testing.T) {
	if code, _, stderr := run("job", "42", "--prometheus-url", "http://127.0.0.1:1", "--cpu-efficiency-below", "1.5"); code != 2 || !strings.Contains(stderr, "cpuEfficiencyBelow") {
		t.Errorf("a threshold over 1: exit %d, %s", code, stderr)
	}
	if code, _, help := run("job", "--help"); code != 0 || !strings.Contains(help, "-gpu-idle-below") {
		t.Errorf("--help does not list the thresholds: %d\n%s", code, help)
	}
}

// Function names, node names and the rest of a report come from jobs: a
// name with terminal escape sequences or line breaks is printed escaped,
// never raw.
func TestJobEscapesHostileNames(t *testing.T) {
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(pyrostandin.New(pyrostandin.WithClock(func() time.Time { return end })).Handler())
	defer srv.Close()
	evilFn := "evil\x1b]0:pwned\x07fn\nforged line" // no ";": it separates frames
	req := &pushv1.PushRequest{Series: []*pushv1.RawProfileSeries{pyrostandin.CPUSeries(end.Add(-30*time.Minute),
		map[string]int64{"main;" + evilFn: 2e9},
		schema.ServiceName, "train", schema.JobID.Label, "4242", schema.HostName.Label, "node-\x1b[2Ja\u202e")}}
	if _, err := pushv1connect.NewPusherServiceClient(http.DefaultClient, srv.URL).Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run("job", "4242", "--pyroscope-url", srv.URL, "--since", "2h", "--to", end.Format(time.RFC3339))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.ContainsAny(stdout, "\x1b\x07\u202e") || strings.Contains(stdout, "\nforged line") {
		t.Fatalf("raw control characters in the report:\n%q", stdout)
	}
	for _, want := range []string{`evil\x1b]0:pwned\afn\nforged line`, `node-\x1b[2Ja\u202e`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks the escaped %s:\n%s", want, stdout)
		}
	}
}
