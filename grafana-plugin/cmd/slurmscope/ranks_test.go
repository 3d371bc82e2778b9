package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

var rankEnd = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// rankedStandin holds job 8 of four ranks, every rank 50 s of CPU time:
// rank 2 spends 40 s in matmul where the others spend 20 s, and the
// others wait 30 s in allreduce; and job 9, whose one process names no
// rank.
func rankedStandin(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(pyrostandin.New(pyrostandin.WithClock(func() time.Time { return rankEnd })).Handler())
	t.Cleanup(srv.Close)
	req := &pushv1.PushRequest{}
	for rank := range 4 {
		stacks := map[string]int64{"main;train;matmul": 20e9, "main;train;allreduce": 30e9}
		if rank == 2 {
			stacks = map[string]int64{"main;train;matmul": 40e9, "main;train;allreduce": 10e9}
		}
		req.Series = append(req.Series, pyrostandin.CPUSeries(rankEnd.Add(-10*time.Minute), stacks, schema.ServiceName, "train",
			schema.JobID.Label, "8", schema.HostName.Label, []string{"node-a", "node-b"}[rank/2], schema.TaskRank.Label, strconv.Itoa(rank)))
	}
	req.Series = append(req.Series, pyrostandin.CPUSeries(rankEnd.Add(-10*time.Minute), map[string]int64{"main;work": 5e9},
		schema.ServiceName, "serial", schema.JobID.Label, "9", schema.HostName.Label, "node-a"))
	if _, err := pushv1connect.NewPusherServiceClient(http.DefaultClient, srv.URL).Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
	return srv.URL
}

// --ranks prints each rank's CPU time, top function, its share and its
// deviation from the median, the straggler first, named with the
// function where it differs: the rank at twice the median in matmul.
func TestJobRanks(t *testing.T) {
	url := rankedStandin(t)
	args := []string{"job", "8", "--ranks", "--pyroscope-url", url, "--since", "1h", "--to", rankEnd.Format(time.RFC3339)}
	code, stdout, stderr := run(args...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"job 8, 2026-11-30T11:00:00Z to 2026-11-30T12:00:00Z: 4 ranks, 200.00s of CPU time, the median rank 50.00s",
		"stragglers (1):\n  WARNING  straggler: rank 2 spent 2.0× the other ranks' median CPU time in `matmul` (40.0s against 20.0s, of 4 ranks)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
	for _, row := range []string{`2\s+50.00s\s+\+0%\s+matmul\s+80%`, `0\s+50.00s\s+\+0%\s+allreduce\s+60%`} {
		if !regexp.MustCompile(row).MatchString(stdout) {
			t.Errorf("no row %s in:\n%s", row, stdout)
		}
	}
	code, stdout, stderr = run(append(args, "--json")...)
	if code != exitOK {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	var rep struct {
		Ranks []struct {
			Rank        string  `json:"rank"`
			CPU         int64   `json:"cpu_ns"`
			TopFunction string  `json:"top_function"`
			TopShare    float64 `json:"top_function_share"`
			Deviation   float64 `json:"deviation_from_median"`
		} `json:"ranks"`
		Findings []struct {
			Kind     string `json:"kind"`
			Rank     string `json:"rank"`
			Function string `json:"function"`
		} `json:"findings"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(rep.Ranks) != 4 || rep.Ranks[2].TopFunction != "matmul" || rep.Ranks[2].TopShare != 0.8 || rep.Ranks[2].CPU != 50e9 ||
		len(rep.Findings) != 1 || rep.Findings[0].Kind != "straggler" || rep.Findings[0].Rank != "2" || rep.Findings[0].Function != "matmul" {
		t.Errorf("report:\n%s", stdout)
	}
	// A stricter threshold names nobody.
	if code, stdout, _ := run(append(args, "--straggler-above", "2")...); code != exitOK || !strings.Contains(stdout, "stragglers: none") {
		t.Errorf("--straggler-above 2: exit %d\n%s", code, stdout)
	}
}

// A job whose profiles name no rank, or that has none, is no data (exit
// 3), saying which; --ranks without Pyroscope is bad usage.
func TestJobRanksWithoutRanks(t *testing.T) {
	url := rankedStandin(t)
	to := rankEnd.Format(time.RFC3339)
	code, _, stderr := run("job", "9", "--ranks", "--pyroscope-url", url, "--since", "1h", "--to", to)
	if code != exitNoData || !strings.Contains(stderr, "its profiles (5.00s of CPU time) name no rank") {
		t.Errorf("job 9: exit %d: %s", code, stderr)
	}
	code, stdout, _ := run("job", "10", "--ranks", "--pyroscope-url", url, "--since", "1h", "--to", to, "--json")
	if code != exitNoData || !strings.Contains(stdout, `"no_data": true`) || !strings.Contains(stdout, "hold no profile of it") {
		t.Errorf("job 10: exit %d: %s", code, stdout)
	}
	if code, _, stderr := run("job", "8", "--ranks", "--prometheus-url", "http://127.0.0.1:1"); code != exitUsage || !strings.Contains(stderr, "--ranks reads profiles") {
		t.Errorf("without Pyroscope: exit %d: %s", code, stderr)
	}
}
