package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/grafana/grafana-plugin-sdk-go/backend"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/querytype"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

// "Last 7 days" in the editor: /values and /profile-types answer, and so
// does a flame graph, though Pyroscope refuses any call over a day.
func TestAWeekThroughResources(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(pyrostandin.New(pyrostandin.WithClock(func() time.Time { return now }),
		pyrostandin.WithIngestionWindow(8*24*time.Hour, 0)).Handler())
	defer srv.Close()
	req := &pushv1.PushRequest{Series: []*pushv1.RawProfileSeries{pyrostandin.CPUSeries(now.Add(-3*24*time.Hour),
		map[string]int64{"main;work": 1e9}, schema.ServiceName, "train", schema.JobID.Label, "42", schema.HostName.Label, "n7")}}
	if _, err := pushv1connect.NewPusherServiceClient(http.DefaultClient, srv.URL).Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
	p, err := backends.NewPyroscope(backends.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	d := NewWith(Settings{}, p, nil)
	week := fmt.Sprintf("from=%d&to=%d", now.Add(-7*24*time.Hour).UnixMilli(), now.UnixMilli())
	for _, tc := range []struct{ url, want string }{
		{"values?attribute=host.name&" + week, `"values":["n7"]`},
		{"profile-types?" + week, `process_cpu`},
	} {
		path, _, _ := strings.Cut(tc.url, "?")
		status, body := d.resource(context.Background(), &backend.CallResourceRequest{Path: path, Method: http.MethodGet, URL: tc.url})
		if got := string(mustJSON(t, body)); status != http.StatusOK || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %d %s", tc.url, status, got)
		}
	}
	q := dataQuery("A", queryModel{QueryType: querytype.Flamegraph, Filter: `slurm.job.id == "42"`})
	q.TimeRange = backend.TimeRange{From: now.Add(-7 * 24 * time.Hour), To: now}
	resp, _ := d.QueryData(context.Background(), &backend.QueryDataRequest{Queries: []backend.DataQuery{q}})
	if r := resp.Responses["A"]; r.Error != nil || len(r.Frames) != 1 || r.Frames[0].Rows() != 3 {
		t.Errorf("a week's flame graph: %v", r.Error)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
