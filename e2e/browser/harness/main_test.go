package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/plugin"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/querytype"
)

const (
	testdataDir = "../testdata"
	fixturesDir = "../../../grafana-plugin/pkg/query/flame/testdata"
	// The recording's range (see the fixtures' README): T0-45 s .. T0+135 s.
	recFrom = "1796019480000"
	recTo   = "1796019660000"
)

// TestMain keeps the servers' request log out of the output unless -v.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		log.SetOutput(io.Discard)
	}
	os.Exit(m.Run())
}

// harness starts the replay Pyroscope and the Grafana API stand-in on the
// real datasource; static serves a page with an index.html.
func harness(t *testing.T) (api, pyro *httptest.Server) {
	t.Helper()
	rep, err := LoadReplay(testdataDir, fixturesDir)
	if err != nil {
		t.Fatal(err)
	}
	pyro = httptest.NewServer(rep)
	t.Cleanup(pyro.Close)
	static := t.TempDir()
	if err := os.WriteFile(filepath.Join(static, "index.html"), []byte("<!doctype html><title>harness</title>"), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := NewDatasource(pyro.URL)
	if err != nil {
		t.Fatal(err)
	}
	api = httptest.NewServer(NewHandler(ds, static))
	t.Cleanup(api.Close)
	return api, pyro
}

func do(t *testing.T, method, url, contentType string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, b
}

func TestResourcesRelay(t *testing.T) {
	api, _ := harness(t)
	base := api.URL + "/api/datasources/uid/" + DatasourceUID + "/resources/"

	t.Run("attributes", func(t *testing.T) {
		status, hdr, body := do(t, "GET", base+"attributes", "", nil)
		if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Fatalf("status %d, content type %q: %s", status, hdr.Get("Content-Type"), body)
		}
		var attrs []struct{ Name string }
		if err := json.Unmarshal(body, &attrs); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, a := range attrs {
			names = append(names, a.Name)
		}
		for _, want := range []string{"slurm.job.id", "slurm.job.user", "slurm.job.name"} {
			if !slices.Contains(names, want) {
				t.Errorf("attributes %v lack %s", names, want)
			}
		}
	})

	t.Run("validate POST body", func(t *testing.T) {
		const f = `slurm.job.user == "bob" && slurm.job.usr == "x"`
		body, _ := json.Marshal(map[string]string{"filter": f})
		status, _, out := do(t, "POST", base+"validate", "application/json", body)
		if status != 200 {
			t.Fatalf("status %d: %s", status, out)
		}
		var v struct {
			OK     bool
			Issues []struct {
				Line, Column, Offset int
				Message              string
			}
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		at := strings.Index(f, "slurm.job.usr")
		if v.OK || len(v.Issues) == 0 || v.Issues[0].Offset != at || v.Issues[0].Line != 1 || v.Issues[0].Column != at+1 {
			t.Errorf("validate %q = %s, want an issue at offset %d, 1:%d", f, out, at, at+1)
		}
	})

	t.Run("validate GET query string", func(t *testing.T) {
		status, _, out := do(t, "GET", base+"validate?filter="+urlQueryEscape(`slurm.job.id == "4242"`), "", nil)
		if status != 200 || !strings.Contains(string(out), `"ok":true`) {
			t.Errorf("status %d: %s", status, out)
		}
	})

	t.Run("values through the replay", func(t *testing.T) {
		status, _, out := do(t, "GET", base+"values?attribute=slurm.job.id&from="+recFrom+"&to="+recTo, "", nil)
		if status != 200 {
			t.Fatalf("status %d: %s", status, out)
		}
		var v struct{ Values []string }
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(v.Values, []string{"4242", "4243"}) {
			t.Errorf("values %v, want [4242 4243] (05a-select-series-by-job-id)", v.Values)
		}
	})

	t.Run("values of a label without a recording", func(t *testing.T) {
		status, _, out := do(t, "GET", base+"values?attribute=slurm.job.name", "", nil)
		if status != 200 || strings.TrimSpace(string(out)) != `{"values":[]}` {
			t.Errorf("status %d: %s", status, out)
		}
	})

	t.Run("profile-types through the replay", func(t *testing.T) {
		status, _, out := do(t, "GET", base+"profile-types?from="+recFrom+"&to="+recTo, "", nil)
		var pts []plugin.ProfileType
		if err := json.Unmarshal(out, &pts); status != 200 || err != nil {
			t.Fatalf("status %d, %v: %s", status, err, out)
		}
		// The schema lists the type either way; the recording says it has data.
		i := slices.IndexFunc(pts, func(p plugin.ProfileType) bool { return p.ID == "process_cpu:cpu:nanoseconds:cpu:nanoseconds" })
		if i < 0 || !pts[i].HasData || !pts[i].Default {
			t.Errorf("profile types %+v: want process_cpu, the default, with data", pts)
		}
	})

	t.Run("the plugin's status is relayed", func(t *testing.T) {
		status, _, out := do(t, "GET", base+"values?attribute=no.such", "", nil)
		if status != http.StatusBadRequest || !strings.Contains(string(out), "no.such") {
			t.Errorf("status %d: %s", status, out)
		}
	})

	t.Run("unknown uid", func(t *testing.T) {
		status, _, out := do(t, "GET", api.URL+"/api/datasources/uid/other/resources/attributes", "", nil)
		if status != http.StatusNotFound {
			t.Errorf("status %d: %s", status, out)
		}
	})

	t.Run("unknown API is a 404", func(t *testing.T) {
		status, _, out := do(t, "GET", api.URL+"/api/frontend/settings", "", nil)
		if status != http.StatusNotFound || !strings.Contains(string(out), "no such API") {
			t.Errorf("status %d: %s", status, out)
		}
	})

	t.Run("static page", func(t *testing.T) {
		status, _, out := do(t, "GET", api.URL+"/", "", nil)
		if status != 200 || !strings.Contains(string(out), "<title>harness</title>") {
			t.Errorf("status %d: %s", status, out)
		}
	})

	t.Run("health", func(t *testing.T) {
		status, _, out := do(t, "GET", api.URL+"/api/datasources/uid/"+DatasourceUID+"/health", "", nil)
		if status != 200 || !strings.Contains(string(out), `"status":"OK"`) {
			t.Errorf("status %d: %s", status, out)
		}
	})
}

func urlQueryEscape(s string) string {
	r := strings.NewReplacer(" ", "%20", `"`, "%22", "=", "%3D", "&", "%26")
	return r.Replace(s)
}

// dsQuery posts one query as DataSourceWithBackend does.
func dsQuery(t *testing.T, api *httptest.Server, query map[string]any) (int, *backend.QueryDataResponse, []byte) {
	t.Helper()
	q := map[string]any{"refId": "A", "datasource": map[string]string{"type": "slurmscope-slurm-datasource", "uid": DatasourceUID},
		"datasourceId": 1, "intervalMs": 1000, "maxDataPoints": 500}
	for k, v := range query {
		q[k] = v
	}
	body, _ := json.Marshal(map[string]any{"queries": []any{q}, "from": recFrom, "to": recTo})
	status, _, out := do(t, "POST", api.URL+"/api/ds/query?ds_type=slurmscope-slurm-datasource&requestId=Q1", "application/json", body)
	var resp backend.QueryDataResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("status %d, undecodable answer: %v\n%s", status, err, out)
	}
	return status, &resp, out
}

func TestDSQueryFlamegraph(t *testing.T) {
	api, _ := harness(t)
	status, resp, raw := dsQuery(t, api, map[string]any{"queryType": "flamegraph", "filter": `slurm.job.id == "4242"`})
	if status != 200 {
		t.Fatalf("status %d: %s", status, raw)
	}
	// Grafana's wire form: results by refId, frames as schema + data.
	var wire struct {
		Results map[string]struct {
			Status int `json:"status"`
			Frames []struct {
				Schema struct {
					Name   string `json:"name"`
					RefID  string `json:"refId"`
					Fields []struct{ Name string }
					Meta   struct {
						PreferredVisualisationType string `json:"preferredVisualisationType"`
					} `json:"meta"`
				} `json:"schema"`
				Data struct{ Values []json.RawMessage } `json:"data"`
			} `json:"frames"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &wire); err != nil {
		t.Fatal(err)
	}
	a, ok := wire.Results["A"]
	if !ok || a.Status != 200 || len(a.Frames) != 1 {
		t.Fatalf("wire form: %s", raw)
	}
	sch := a.Frames[0].Schema
	var fields []string
	for _, f := range sch.Fields {
		fields = append(fields, f.Name)
	}
	if sch.RefID != "A" || sch.Meta.PreferredVisualisationType != "flamegraph" || !slices.Equal(fields, []string{"level", "value", "self", "label"}) {
		t.Errorf("frame schema %+v", sch)
	}

	r := resp.Responses["A"]
	if r.Error != nil || len(r.Frames) != 1 {
		t.Fatalf("response A: %v, %d frames", r.Error, len(r.Frames))
	}
	got, ok := querytype.FromFrame(r.Frames[0])
	if !ok {
		t.Fatal("not a flame graph frame")
	}
	if got.Total() != 18_700_000_000 {
		t.Errorf("total %d, want 18.7e9 (job 4242 over both pushes)", got.Total())
	}
	var names []string
	got.Walk(func(_ int, name string, _, _ int64) bool { names = append(names, name); return true })
	for _, want := range []string{"matmul_kernel_launch", "decode_jpeg", "at::native::add_kernel<float>(at::TensorIterator&, c10::Scalar const&)"} {
		if !slices.Contains(names, want) {
			t.Errorf("flame graph lacks %s: %v", want, names)
		}
	}
}

func TestDSQueryOtherRecordings(t *testing.T) {
	api, _ := harness(t)
	// 04b: the node-a part of job 4242.
	status, resp, raw := dsQuery(t, api, map[string]any{"queryType": "flamegraph", "filter": `slurm.job.id == "4242" && host.name == "node-a"`})
	if status != 200 {
		t.Fatalf("status %d: %s", status, raw)
	}
	if tr, ok := querytype.FromFrame(resp.Responses["A"].Frames[0]); !ok || tr.Total() != 10_500_000_000 {
		t.Errorf("node-a: %s", raw)
	}
}

func TestUnknownPyroscopeCallIsLoud(t *testing.T) {
	api, pyro := harness(t)

	t.Run("method not replayed", func(t *testing.T) {
		b, _ := proto.Marshal(&querierv1.SelectMergeProfileRequest{LabelSelector: "{}"})
		status, hdr, out := do(t, "POST", pyro.URL+"/querier.v1.QuerierService/SelectMergeProfile", "application/proto", b)
		var ce struct{ Code, Message string }
		if err := json.Unmarshal(out, &ce); err != nil {
			t.Fatalf("not a Connect error body: %s", out)
		}
		if status != http.StatusNotImplemented || hdr.Get("Content-Type") != "application/json" ||
			ce.Code != "unimplemented" || !strings.Contains(ce.Message, "SelectMergeProfile") {
			t.Errorf("status %d, %+v", status, ce)
		}
	})

	t.Run("through the datasource", func(t *testing.T) {
		// A profileSeries query of job 4242 makes the datasource call
		// SelectSeries with arguments nobody recorded.
		status, resp, raw := dsQuery(t, api, map[string]any{"queryType": "profileSeries", "filter": `slurm.job.id == "4242"`})
		r := resp.Responses["A"]
		if status == http.StatusOK || r.Error == nil || !strings.Contains(r.Error.Error(), "404") || !strings.Contains(r.Error.Error(), "no recording for") || !strings.Contains(r.Error.Error(), "SelectSeries") {
			t.Errorf("status %d: %s", status, raw)
		}
	})

	t.Run("arguments not recorded", func(t *testing.T) {
		status, resp, raw := dsQuery(t, api, map[string]any{"queryType": "flamegraph", "filter": `slurm.job.id == "9999"`})
		r := resp.Responses["A"]
		if status != http.StatusBadRequest || r.Error == nil || !strings.Contains(r.Error.Error(), "no recording") || !strings.Contains(r.Error.Error(), "9999") {
			t.Errorf("status %d: %s", status, raw)
		}
	})
}

func TestParseQueryRequest(t *testing.T) {
	req, err := ParseQueryRequest([]byte(`{"queries":[{"refId":"B","queryType":"flamegraph","filter":"x","maxDataPoints":42,"intervalMs":250,
		"datasource":{"uid":"slurmscope","type":"slurmscope-slurm-datasource"}}],"from":"1000","to":"61000"}`))
	if err != nil {
		t.Fatal(err)
	}
	q := req.Queries[0]
	if q.RefID != "B" || q.QueryType != "flamegraph" || q.MaxDataPoints != 42 || q.Interval != 250*time.Millisecond ||
		!q.TimeRange.From.Equal(time.UnixMilli(1000)) || !q.TimeRange.To.Equal(time.UnixMilli(61000)) ||
		!strings.Contains(string(q.JSON), `"filter":"x"`) {
		t.Errorf("query %+v", q)
	}
	if _, err := ParseQueryRequest([]byte(`{"queries":[{"refId":"A","datasource":{"uid":"other"}}]}`)); err == nil {
		t.Error("a query for another datasource was accepted")
	}
	if _, err := ParseQueryRequest([]byte(`{"queries":[{"refId":"A"}],"from":"yesterday"}`)); err == nil {
		t.Error("from=yesterday was accepted")
	}
}

func TestSameSelector(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{`{slurm_job_id="4242"}`, `{ slurm_job_id = "4242" }`, true},
		{`{slurm_job_id="4242", host_name="node-a"}`, `{host_name="node-a",slurm_job_id="4242"}`, true},
		{`{slurm_job_id="4242"}`, `{slurm_job_id="4243"}`, false},
		{`{a="x,y"}`, `{a="x", y}`, false},
		{`{a="x y"}`, `{a="xy"}`, false},
	} {
		if got := sameSelector(c.a, c.b); got != c.want {
			t.Errorf("sameSelector(%s, %s) = %v", c.a, c.b, got)
		}
	}
}
