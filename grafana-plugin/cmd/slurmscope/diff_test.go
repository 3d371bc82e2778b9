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

	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

// twoJobsStandin holds job 4242 (main;a 30 s, main;b 10 s) and job 4250
// (main;a 20 s, main;c 40 s): only job 4250 calls c.
func twoJobsStandin(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(pyrostandin.New(pyrostandin.WithClock(func() time.Time { return rankEnd })).Handler())
	t.Cleanup(srv.Close)
	req := &pushv1.PushRequest{Series: []*pushv1.RawProfileSeries{
		pyrostandin.CPUSeries(rankEnd.Add(-40*time.Minute), map[string]int64{"main;a": 30e9, "main;b": 10e9},
			schema.ServiceName, "train", schema.JobID.Label, "4242", schema.HostName.Label, "node-a"),
		pyrostandin.CPUSeries(rankEnd.Add(-10*time.Minute), map[string]int64{"main;a": 20e9, "main;c": 40e9},
			schema.ServiceName, "train", schema.JobID.Label, "4250", schema.HostName.Label, "node-b"),
	}}
	if _, err := pushv1connect.NewPusherServiceClient(http.DefaultClient, srv.URL).Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
	return srv.URL
}

type diffJSON struct {
	Left, Right  string
	LeftTotal    int64 `json:"left_total"`
	RightTotal   int64 `json:"right_total"`
	Grew, Shrank []struct {
		Name       string  `json:"name"`
		LeftSelf   int64   `json:"left_self_ns"`
		RightSelf  int64   `json:"right_self_ns"`
		LeftShare  float64 `json:"left_share"`
		RightShare float64 `json:"right_share"`
	}
}

// The function only job 4250 calls grew the most, from nothing to all of
// its time; what it took shrank. Job ids and CEL selections give the same.
func TestDiffOfTwoJobsCLI(t *testing.T) {
	url := twoJobsStandin(t)
	common := []string{"--pyroscope-url", url, "--since", "1h", "--to", rankEnd.Format(time.RFC3339)}
	code, stdout, stderr := run(append([]string{"diff", "4242", "4250"}, common...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"job 4242 (left) against job 4250 (right)", "left 40.00s, right 60.00s", "grew (share of each side's time):", "shrank"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
	for _, row := range []string{`0\.0%\s+66\.7%\s+\+66\.7\s+0\.00s\s+40\.00s\s+c`, `75\.0%\s+33\.3%\s+-41\.7\s+30\.00s\s+20\.00s\s+a`, `25\.0%\s+0\.0%\s+-25\.0\s+10\.00s\s+0\.00s\s+b`} {
		if !regexp.MustCompile(row).MatchString(stdout) {
			t.Errorf("no row %s in:\n%s", row, stdout)
		}
	}
	var byID, byCEL diffJSON
	code, stdout, stderr = run(append([]string{"diff", "4242", "4250", "--json"}, common...)...)
	if code != exitOK || json.Unmarshal([]byte(stdout), &byID) != nil {
		t.Fatalf("--json: exit %d: %s%s", code, stdout, stderr)
	}
	if byID.LeftTotal != 40e9 || byID.RightTotal != 60e9 || len(byID.Grew) != 1 || byID.Grew[0].Name != "c" || byID.Grew[0].LeftSelf != 0 || byID.Grew[0].RightSelf != 40e9 ||
		len(byID.Shrank) != 2 || byID.Shrank[0].Name != "a" {
		t.Errorf("JSON:\n%s", stdout)
	}
	code, stdout, stderr = run(append([]string{"diff", "--left", `slurm.job.id == "4242"`, "--right", `slurm.job.id == "4250"`, "--json"}, common...)...)
	if code != exitOK || json.Unmarshal([]byte(stdout), &byCEL) != nil {
		t.Fatalf("--left/--right: exit %d: %s%s", code, stdout, stderr)
	}
	if !reflect.DeepEqual(byCEL.Grew, byID.Grew) || !reflect.DeepEqual(byCEL.Shrank, byID.Shrank) {
		t.Errorf("CEL selections differ from job ids:\n%s", stdout)
	}
}

func TestDiffUsage(t *testing.T) {
	url := twoJobsStandin(t)
	to := rankEnd.Format(time.RFC3339)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"diff", "4242"}, exitUsage, "want two job ids"},
		{[]string{"diff", "4242", "x"}, exitUsage, "want two job ids"},
		{[]string{"diff", "--left", `slurm.job.id == "1"`}, exitUsage, "want --left and --right both"},
		{[]string{"diff", "4242", "--left", "true", "--right", "true"}, exitUsage, "no job id beside them"},
		{[]string{"diff", "--left", `slurm.job.idd == "1"`, "--right", "true"}, exitUsage, "slurmscope diff: --left: 1:1: unknown attribute slurm.job.idd"},
		{[]string{"diff", "4242", "4250", "--prometheus-url", "http://127.0.0.1:1"}, exitUsage, "diff reads profiles"},
		{[]string{"diff", "4242", "4250", "--pyroscope-url", url, "--top", "0"}, exitUsage, "--top must be at least 1"},
		// Job 4243 has no profiles: nothing to compare with.
		{[]string{"diff", "4242", "4243", "--pyroscope-url", url, "--since", "1h", "--to", to}, exitNoData,
			"no profiles of the right, job 4243 from 2026-11-30T11:00:00Z to 2026-11-30T12:00:00Z"},
		{[]string{"diff", "4242", "4250", "--pyroscope-url", url, "--since", "72h", "--to", to, "--max-calls", "3"}, exitFail, "too many backend calls"},
	} {
		code, _, stderr := run(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%q: exit %d, %s\nwant %d, %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
	}
	if code, _, help := run("diff", "--help"); code != exitOK || !strings.Contains(help, "usage: slurmscope diff") {
		t.Errorf("--help: exit %d", code)
	}
}
