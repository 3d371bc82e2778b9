package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

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
