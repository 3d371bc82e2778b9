package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/data"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/querytype"
	"github.com/slurmscope/slurmscope/schema"
)

// fakeProfiles records the selectors it is asked for and answers a fixed
// one-frame graph per call.
type fakeProfiles struct {
	mu   sync.Mutex
	sels []string
	err  error
	// held are the profile types it holds; nil: memory and CPU.
	held []*typesv1.ProfileType
}

func (f *fakeProfiles) record(s ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sels = append(f.sels, s...)
	return f.err
}

func (f *fakeProfiles) MergeStacktraces(_ context.Context, _, sel string, _, _ time.Time, _ int64) (*querierv1.FlameGraph, error) {
	if err := f.record(sel); err != nil {
		return nil, err
	}
	t := flame.New()
	t.Add([]string{"main", "work"}, 10)
	return t.Flamegraph(), nil
}

// Diff records both sides' selectors and answers main;work 10 on each.
func (f *fakeProfiles) Diff(_ context.Context, _ string, left, right backends.Selection, _ int64) (*querierv1.FlameGraphDiff, error) {
	if err := f.record(left.Selector, right.Selector); err != nil {
		return nil, err
	}
	return &querierv1.FlameGraphDiff{Names: []string{"total", "main", "work"}, Levels: []*querierv1.Level{
		{Values: []int64{0, 10, 0, 0, 10, 0, 0}}, {Values: []int64{0, 10, 0, 0, 10, 0, 1}}, {Values: []int64{0, 10, 10, 0, 10, 10, 2}},
	}}, nil
}

func (f *fakeProfiles) SelectSeries(_ context.Context, _, sel string, groupBy []string, start, _ time.Time, _ time.Duration) ([]*typesv1.Series, error) {
	if err := f.record(sel); err != nil {
		return nil, err
	}
	s := &typesv1.Series{Points: []*typesv1.Point{{Timestamp: start.UnixMilli(), Value: 5}}}
	for _, g := range groupBy {
		s.Labels = append(s.Labels, &typesv1.LabelPair{Name: g, Value: "v"})
	}
	return []*typesv1.Series{s}, nil
}

func (f *fakeProfiles) LabelValues(_ context.Context, _ string, sels []string, _, _ time.Time) ([]string, error) {
	return []string{"1"}, f.record(sels...)
}

func (f *fakeProfiles) ProfileTypes(context.Context, time.Time, time.Time) ([]*typesv1.ProfileType, error) {
	if f.held != nil {
		return f.held, f.record()
	}
	return []*typesv1.ProfileType{
		{ID: "memory:alloc_space:bytes:space:bytes", Name: "memory", SampleType: "alloc_space"},
		{ID: "process_cpu:cpu:nanoseconds:cpu:nanoseconds", Name: "process_cpu", SampleType: "cpu"},
	}, f.record()
}

type fakeMetrics struct {
	mu    sync.Mutex
	exprs []string
}

func (f *fakeMetrics) record(s ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exprs = append(f.exprs, s...)
}

func (f *fakeMetrics) QueryRange(_ context.Context, expr string, start, _ time.Time, _ time.Duration) ([]backends.PromSeries, error) {
	f.record(expr)
	return []backends.PromSeries{{Labels: map[string]string{schema.JobUser.Label: "alice"}, Samples: []backends.Sample{{T: start, V: 0.5}}}}, nil
}

func (f *fakeMetrics) Query(_ context.Context, expr string, at time.Time) ([]backends.PromSeries, error) {
	f.record(expr)
	return nil, nil
}

func (f *fakeMetrics) LabelValues(_ context.Context, _ string, sels []string, _, _ time.Time) ([]string, error) {
	f.record(sels...)
	return []string{"2"}, nil
}

// queryModel is a query's JSON model as the tests write it: the common fields
// and those of the types the tests use.
type queryModel struct {
	QueryType string   `json:"queryType,omitempty"`
	Filter    string   `json:"filter,omitempty"`
	GroupBy   []string `json:"groupBy,omitempty"`
	Attribute string   `json:"attribute,omitempty"`
	Entity    string   `json:"entity,omitempty"`
	RankBy    string   `json:"rankBy,omitempty"`
	Finding   string   `json:"finding,omitempty"`
	// A diff's sides.
	LeftFilter  string `json:"leftFilter,omitempty"`
	RightFilter string `json:"rightFilter,omitempty"`
}

func dataQuery(refID string, model any) backend.DataQuery {
	b, _ := json.Marshal(model)
	now := time.Now()
	return backend.DataQuery{RefID: refID, JSON: b, Interval: 15 * time.Second, MaxDataPoints: 100,
		TimeRange: backend.TimeRange{From: now.Add(-time.Hour), To: now}}
}

var owned = Settings{Ownership: Ownership{Enabled: true, AllowUsers: []string{"carol"}}}

// Every call a restricted user causes carries their login, whatever the
// filter says; admins and allow-listed users are not narrowed.
func TestOwnershipIsEnforcedOnEveryCall(t *testing.T) {
	userMatcher := func(login string) string { return schema.JobUser.Label + `="` + login + `"` }
	for _, tc := range []struct {
		user       *backend.User
		restricted bool
	}{
		{&backend.User{Login: "alice", Role: "Viewer"}, true},
		{&backend.User{Login: "bob", Role: "Editor"}, true},
		{&backend.User{Login: "root", Role: "Admin"}, false},
		{&backend.User{Login: "carol", Role: "Viewer"}, false},
	} {
		p, m := &fakeProfiles{}, &fakeMetrics{}
		d := NewWith(owned, p, m)
		pc := backend.PluginContext{User: tc.user}
		escape := `slurm.job.user == "mallory" || true || !(slurm.job.id == "1")`
		resp, err := d.QueryData(context.Background(), &backend.QueryDataRequest{PluginContext: pc, Queries: []backend.DataQuery{
			dataQuery("A", queryModel{QueryType: querytype.Flamegraph, Filter: escape}),
			dataQuery("B", queryModel{QueryType: querytype.ProfileSeries, Filter: escape, GroupBy: []string{"slurm.job.user"}}),
			dataQuery("C", queryModel{QueryType: querytype.GPUMetric, Filter: escape, GroupBy: []string{"slurm.job.user"}}),
			dataQuery("D", queryModel{QueryType: querytype.AttributeValues, Filter: escape, Attribute: "slurm.job.id"}),
			dataQuery("E", queryModel{QueryType: querytype.TopEntities, Filter: escape, Entity: "slurm.job.user"}),
			dataQuery("F", queryModel{QueryType: querytype.Findings, Filter: escape}),
			dataQuery("G", queryModel{QueryType: querytype.TopEntities, Filter: escape, Entity: "slurm.job.user", RankBy: "wastedCoreHours"}),
			// Each side of a diff, merged here or in one Diff call.
			dataQuery("H", queryModel{QueryType: querytype.Diff, Filter: escape, LeftFilter: escape, RightFilter: escape}),
			dataQuery("I", queryModel{QueryType: querytype.Diff, LeftFilter: `slurm.job.id == "1"`, RightFilter: `slurm.job.id != "1"`}),
			dataQuery("J", queryModel{QueryType: querytype.Findings, Filter: escape, Finding: "straggler"}),
		}})
		if err != nil {
			t.Fatal(err)
		}
		for ref, r := range resp.Responses {
			if r.Error != nil {
				t.Errorf("%s %s: %v", tc.user.Login, ref, r.Error)
			}
		}
		req := &backend.CallResourceRequest{PluginContext: pc, Path: "values", Method: http.MethodGet,
			URL: "values?attribute=slurm.job.user&filter=true"}
		if status, _ := d.resource(context.Background(), req); status != http.StatusOK {
			t.Errorf("%s /values: %d", tc.user.Login, status)
		}
		calls := append(append([]string(nil), p.sels...), m.exprs...)
		if len(calls) < 6 {
			t.Fatalf("%s: only %d backend calls", tc.user.Login, len(calls))
		}
		for _, c := range calls {
			if has := strings.Contains(c, userMatcher(tc.user.Login)); has != tc.restricted {
				t.Errorf("%s (restricted %v) sent %s", tc.user.Login, tc.restricted, c)
			}
		}
	}
}

func TestOwnershipWithoutLoginSeesNothing(t *testing.T) {
	p := &fakeProfiles{}
	d := NewWith(owned, p, &fakeMetrics{})
	for _, u := range []*backend.User{nil, {Role: "Viewer"}} {
		resp, err := d.QueryData(context.Background(), &backend.QueryDataRequest{PluginContext: backend.PluginContext{User: u},
			Queries: []backend.DataQuery{dataQuery("A", queryModel{QueryType: querytype.Flamegraph})}})
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.Responses["A"]; r.Error == nil || r.Status != backend.StatusBadRequest {
			t.Errorf("user %+v: %v %v", u, r.Status, r.Error)
		}
	}
	if len(p.sels) != 0 {
		t.Errorf("backend asked %v", p.sels)
	}
}

// Garbage in one query fails that query only, never the request, and
// never panics.
func TestGarbageQueries(t *testing.T) {
	d := NewWith(Settings{}, &fakeProfiles{}, &fakeMetrics{})
	garbage := []string{`{`, `[]`, `"x"`, `{"queryType":7}`, `{"maxNodes":-1}`, `{"maxNodes":1e12}`,
		`{"queryType":"gpuMetric","window":"-5m"}`, `{"queryType":"gpuMetric","aggregation":"median"}`,
		`{"queryType":"topEntities","rankBy":"x"}`, `{"queryType":"topEntities","entity":"uid"}`,
		`{"queryType":"attributeValues"}`, `{"queryType":"profileSeries","groupBy":["nope"]}`,
		`{"filter":"slurm.job.id ==="}`, `{"filter":"\xff"}`, `{"limit":-3,"queryType":"topEntities"}`,
		`{"queryType":"findings","finding":"slow"}`, `{"queryType":"findings","format":"csv"}`,
		`{"queryType":"topEntities","rankBy":"wastedGPUHours","entity":"gpu.uuid"}`,
		`{"queryType":"diff","leftFilter":"slurm.job.id ==="}`, `{"queryType":"diff","rightTo":"tomorrow"}`,
		`{"queryType":"findings","finding":"straggler","format":"numeric"}`}
	var qs []backend.DataQuery
	for i, g := range garbage {
		q := dataQuery(string(rune('a'+i)), nil)
		q.JSON = []byte(g)
		qs = append(qs, q)
	}
	qs = append(qs, dataQuery("ok", queryModel{QueryType: querytype.Flamegraph}))
	resp, err := d.QueryData(context.Background(), &backend.QueryDataRequest{Queries: qs})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range garbage {
		if r := resp.Responses[string(rune('a'+i))]; r.Error == nil {
			t.Errorf("%s: no error", g)
		}
	}
	if r := resp.Responses["ok"]; r.Error != nil || len(r.Frames) != 1 {
		t.Errorf("the good query: %v", r.Error)
	}
}

func TestBackendErrorsStayInTheResponse(t *testing.T) {
	p := &fakeProfiles{err: &backends.Error{Backend: "pyroscope", Status: 503, Msg: "HTTP 503 Service Unavailable"}}
	d := NewWith(Settings{}, p, nil)
	resp, err := d.QueryData(context.Background(), &backend.QueryDataRequest{Queries: []backend.DataQuery{
		dataQuery("A", queryModel{QueryType: querytype.Flamegraph}), dataQuery("B", queryModel{QueryType: querytype.GPUMetric})}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Responses["A"]; r.Status != backend.StatusBadGateway || !strings.Contains(r.Error.Error(), "503") {
		t.Errorf("A: %v %v", r.Status, r.Error)
	}
	if r := resp.Responses["B"]; r.Error == nil || !strings.Contains(r.Error.Error(), "Prometheus") {
		t.Errorf("B without Prometheus: %v", r.Error)
	}
}

func TestFlamegraphFrame(t *testing.T) {
	d := NewWith(Settings{}, &fakeProfiles{}, nil)
	resp, _ := d.QueryData(context.Background(), &backend.QueryDataRequest{Queries: []backend.DataQuery{
		dataQuery("A", queryModel{QueryType: querytype.Flamegraph, Filter: `host.name in ["a", "b"] || slurm.job.id == "3"`})}})
	r := resp.Responses["A"]
	if r.Error != nil {
		t.Fatal(r.Error)
	}
	f := r.Frames[0]
	if f.RefID != "A" || f.Meta.PreferredVisualization != data.VisTypeFlameGraph {
		t.Errorf("frame %s meta %+v", f.RefID, f.Meta)
	}
	tr, ok := querytype.FromFrame(f)
	if !ok {
		t.Fatal("not a nested set")
	}
	// Each disjoint selector answered 10; the graph is their sum.
	if sels := len(d.engine.Profiles.(*fakeProfiles).sels); tr.Total() != int64(10*sels) || sels < 2 {
		t.Errorf("total %d over %d selectors", tr.Total(), sels)
	}
}

func TestResources(t *testing.T) {
	d := NewWith(Settings{}, &fakeProfiles{}, &fakeMetrics{})
	for _, tc := range []struct {
		url    string
		status int
		want   string
	}{
		{"attributes", 200, `{"name":"slurm.job.id","type":"int","scope":"job","description":`},
		{"attributes", 200, `{"name":"gpu.mig.profile","type":"string","scope":"gpu","description":`},
		{"validate?filter=slurm.job.id+%3D%3D+%221%22", 200, `"ok":true`},
		{"validate?filter=slurm.job.uid+%3D%3D+1", 200, `"column":1`},
		{"values?attribute=slurm.job.id", 200, `"values":["2","v"]`}, // "v" from SelectSeries, "2" from Prometheus
		{"values?attribute=nope", 400, `unknown attribute`},
		{"values?attribute=host.name&from=x", 400, `milliseconds`},
		{"profile-types", 200, `process_cpu`},
		{"metrics", 200, `{"name":"slurmscope_gpu_sm_active_ratio","help":"Fraction of SMs busy between the last two polls (GPM, Hopper and later).","type":"gauge","level":"gpu","unit":"percentunit","aggregation":"avg"}`},
		{"nope", 404, `no resource`},
	} {
		path, _, _ := strings.Cut(tc.url, "?")
		var got backend.CallResourceResponse
		err := d.CallResource(context.Background(), &backend.CallResourceRequest{Path: path, Method: http.MethodGet, URL: tc.url},
			backend.CallResourceResponseSenderFunc(func(r *backend.CallResourceResponse) error { got = *r; return nil }))
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != tc.status || !strings.Contains(string(got.Body), tc.want) {
			t.Errorf("%s: %d %s", tc.url, got.Status, got.Body)
		}
	}
}

func resource(t *testing.T, d *Datasource, url string, into any) int {
	t.Helper()
	var got backend.CallResourceResponse
	path, _, _ := strings.Cut(url, "?")
	err := d.CallResource(context.Background(), &backend.CallResourceRequest{Path: path, Method: http.MethodGet, URL: url},
		backend.CallResourceResponseSenderFunc(func(r *backend.CallResourceResponse) error { got = *r; return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got.Body, into); err != nil {
		t.Fatalf("%s: %v: %s", url, err, got.Body)
	}
	return got.Status
}

// The editor's lists are the schema's: every attribute, every metric the
// engine offers and every profile type, the default marked; Pyroscope only
// says which have data, and adds the types of other agents.
func TestResourceListsAreTheSchemas(t *testing.T) {
	d := NewWith(Settings{}, &fakeProfiles{}, &fakeMetrics{})
	var attrs []Attribute
	if st := resource(t, d, "attributes", &attrs); st != 200 || len(attrs) != len(schema.All) {
		t.Fatalf("attributes: %d %v", st, attrs)
	}
	for i, a := range schema.All {
		if attrs[i] != (Attribute{a.Name, a.Type.String(), a.Scope.String(), a.Description}) {
			t.Errorf("attribute %d: %+v, want %s", i, attrs[i], a.Name)
		}
	}
	var metrics []Metric
	resource(t, d, "metrics", &metrics)
	var offered []string
	for _, m := range schema.Metrics {
		if m.Merge != "" {
			offered = append(offered, m.Name)
		}
	}
	if len(metrics) != len(offered) {
		t.Fatalf("metrics %v, want %v", metrics, offered)
	}
	for i, m := range metrics {
		def, _ := schema.MetricByName(m.Name)
		if m.Name != offered[i] || m.Help != def.Help || m.Type != def.Type.String() || m.Aggregation != def.Merge {
			t.Errorf("metric %d: %+v, want %s", i, m, offered[i])
		}
	}

	var pts []ProfileType
	if st := resource(t, d, "profile-types", &pts); st != 200 {
		t.Fatalf("profile-types: %d", st)
	}
	want := []ProfileType{
		{ID: schema.ProcessCPU.ID(), Name: schema.ProcessCPU.Title, Description: schema.ProcessCPU.Description, Default: true, HasData: true},
		{ID: schema.GPUTime.ID(), Name: schema.GPUTime.Title, Description: schema.GPUTime.Description},
		{ID: schema.OffCPU.ID(), Name: schema.OffCPU.Title, Description: schema.OffCPU.Description},
		{ID: schema.OffCPURunnable.ID(), Name: schema.OffCPURunnable.Title, Description: schema.OffCPURunnable.Description},
		{ID: schema.GPUUntraced.ID(), Name: schema.GPUUntraced.Title, Description: schema.GPUUntraced.Description},
		{ID: "memory:alloc_space:bytes:space:bytes", Name: "memory / alloc_space", HasData: true},
	}
	if !reflect.DeepEqual(pts, want) {
		t.Errorf("profile-types\n%+v, want\n%+v", pts, want)
	}
	// The agent's one off_cpu profile is three types in Pyroscope: blocked
	// and runnable time are offered apart, each under its own id, and
	// never as one; the switch count is Pyroscope's, listed as it names it.
	offCPU := []*typesv1.ProfileType{
		{ID: "off_cpu:switches:count:off_cpu:nanoseconds", Name: "off_cpu", SampleType: "switches"},
		{ID: "off_cpu:runnable:nanoseconds:off_cpu:nanoseconds", Name: "off_cpu", SampleType: "runnable"},
		{ID: "off_cpu:blocked:nanoseconds:off_cpu:nanoseconds", Name: "off_cpu", SampleType: "blocked"},
		{ID: "process_cpu:cpu:nanoseconds:cpu:nanoseconds", Name: "process_cpu", SampleType: "cpu"},
	}
	pts = nil
	if st := resource(t, NewWith(Settings{}, &fakeProfiles{held: offCPU}, &fakeMetrics{}), "profile-types", &pts); st != 200 {
		t.Fatalf("profile-types: %d", st)
	}
	want = []ProfileType{
		{ID: schema.ProcessCPU.ID(), Name: schema.ProcessCPU.Title, Description: schema.ProcessCPU.Description, Default: true, HasData: true},
		{ID: schema.GPUTime.ID(), Name: schema.GPUTime.Title, Description: schema.GPUTime.Description},
		{ID: "off_cpu:blocked:nanoseconds:off_cpu:nanoseconds", Name: "Off-CPU time, blocked", Description: schema.OffCPU.Description, HasData: true},
		{ID: "off_cpu:runnable:nanoseconds:off_cpu:nanoseconds", Name: "Off-CPU time, waiting for a CPU", Description: schema.OffCPURunnable.Description, HasData: true},
		{ID: schema.GPUUntraced.ID(), Name: schema.GPUUntraced.Title, Description: schema.GPUUntraced.Description},
		{ID: "off_cpu:switches:count:off_cpu:nanoseconds", Name: "off_cpu / switches", HasData: true},
	}
	if !reflect.DeepEqual(pts, want) {
		t.Errorf("profile-types with off-CPU data\n%+v, want\n%+v", pts, want)
	}
	// Without Pyroscope the schema's types are still listed, none with data.
	pts = nil
	if st := resource(t, NewWith(Settings{}, nil, &fakeMetrics{}), "profile-types", &pts); st != 200 || len(pts) != len(schema.ProfileTypes) || pts[0].HasData || !pts[0].Default {
		t.Errorf("no Pyroscope: %d %+v", st, pts)
	}
	// A failing Pyroscope is an error, not an empty list.
	var e errorBody
	if st := resource(t, NewWith(Settings{}, &fakeProfiles{err: errors.New("down")}, &fakeMetrics{}), "profile-types", &e); st != http.StatusInternalServerError || e.Error != "down" {
		t.Errorf("failing Pyroscope: %d %+v", st, e)
	}
}

func TestCheckHealthNamesTheFailingBackend(t *testing.T) {
	d := New(Settings{Pyroscope: BackendSettings{URL: "http://127.0.0.1:1"}, Prometheus: BackendSettings{URL: "ftp://x"}}, nil)
	res, err := d.CheckHealth(context.Background(), &backend.CheckHealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != backend.HealthStatusError || !strings.Contains(res.Message, "Pyroscope at http://127.0.0.1:1 failed") ||
		!strings.Contains(res.Message, "Prometheus settings are invalid") {
		t.Errorf("%v: %s", res.Status, res.Message)
	}
	res, _ = New(Settings{}, nil).CheckHealth(context.Background(), &backend.CheckHealthRequest{})
	if res.Status != backend.HealthStatusError {
		t.Errorf("nothing configured: %v %s", res.Status, res.Message)
	}
}

func TestSettings(t *testing.T) {
	s, err := ParseSettings(backend.DataSourceInstanceSettings{JSONData: []byte(`{
		"pyroscope": {"url": "https://p", "auth": "bearer", "tlsWithCACert": true},
		"prometheus": {"url": "http://m", "auth": "basic", "basicAuthUser": "u", "tenantId": "t2"},
		"tenantId": "t1", "jobOwnership": {"enabled": true, "allowUsers": ["x"]}}`)})
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"pyroscopeBearerToken": "tok", "prometheusBasicAuthPassword": "pw", "pyroscopeTlsCACert": "pem"}
	pc, err := s.backendConfig("pyroscope", s.Pyroscope, secrets)
	if err != nil || pc.BearerToken != "tok" || pc.TenantID != "t1" || pc.TLS.CACert != "pem" {
		t.Errorf("pyroscope: %+v %v", pc, err)
	}
	mc, err := s.backendConfig("prometheus", s.Prometheus, secrets)
	if err != nil || mc.BasicUser != "u" || mc.BasicPassword != "pw" || mc.TenantID != "t2" {
		t.Errorf("prometheus: %+v %v", mc, err)
	}
	if _, err := s.backendConfig("pyroscope", s.Pyroscope, nil); err == nil {
		t.Error("bearer auth without a token accepted")
	}
	if s.DefaultProfileType == "" || !s.Ownership.Enabled {
		t.Errorf("%+v", s)
	}
}

// The fan-out settings reach the engine; a query over the call cap fails
// on its own with a 400 that says why, and sends nothing.
func TestFanOutSettings(t *testing.T) {
	s, err := ParseSettings(backend.DataSourceInstanceSettings{JSONData: []byte(
		`{"pyroscopeMaxQueryLength": "1d", "maxConcurrentCalls": 2, "maxCallsPerQuery": 6}`)})
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeProfiles{}
	d := NewWith(s, p, nil)
	if e := d.engine; e.MaxQueryLength != 24*time.Hour || e.Parallel != 2 || e.MaxCalls != 6 {
		t.Errorf("engine %+v", e)
	}
	week := dataQuery("W", queryModel{QueryType: querytype.Flamegraph})
	week.TimeRange.From = week.TimeRange.To.Add(-7 * 24 * time.Hour)
	resp, _ := d.QueryData(context.Background(), &backend.QueryDataRequest{Queries: []backend.DataQuery{
		week, dataQuery("H", queryModel{QueryType: querytype.Flamegraph})}})
	if r := resp.Responses["W"]; r.Status != backend.StatusBadRequest || r.Error == nil ||
		!strings.Contains(r.Error.Error(), "needs 7 Pyroscope calls (1 selector(s) × 7 time chunk(s)") {
		t.Errorf("a week: %v %v", r.Status, r.Error)
	}
	if r := resp.Responses["H"]; r.Error != nil {
		t.Errorf("an hour: %v", r.Error)
	}
	if len(p.sels) != 1 {
		t.Errorf("%d calls, want only the hour's", len(p.sels))
	}
	for _, bad := range []string{`{"pyroscopeMaxQueryLength": "soon"}`, `{"pyroscopeMaxQueryLength": "10ms"}`, `{"maxCallsPerQuery": -1}`} {
		if _, err := ParseSettings(backend.DataSourceInstanceSettings{JSONData: []byte(bad)}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// Finding thresholds come from jsonData, reach the engine, and bad ones
// fail the settings with the name of the setting.
func TestFindingSettings(t *testing.T) {
	s, err := ParseSettings(backend.DataSourceInstanceSettings{JSONData: []byte(`{"findings": {"cpuEfficiencyBelow": 0.7, "stragglerAbove": 2}}`)})
	if err != nil {
		t.Fatal(err)
	}
	e := s.engine()
	if th := e.Thresholds.WithDefaults(); th.CPUEfficiencyBelow != 0.7 || th.MemoryUsedAbove != 0.9 || th.StragglerAbove != 2 {
		t.Errorf("engine thresholds %+v", th)
	}
	for _, bad := range []string{`{"findings": {"gpuIdleBelow": 2}}`, `{"findings": {"memoryUsedBelow": 0.95}}`, `{"findings": {"stragglerAbove": 0.9}}`} {
		_, err := ParseSettings(backend.DataSourceInstanceSettings{JSONData: []byte(bad)})
		if err == nil || !strings.Contains(err.Error(), "findings") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// Grafana evaluates alert rules as an org admin (its scheduler's
// identity), so ownership cannot narrow them: with ownership on, a query
// Grafana's alerting sends (the FromAlert header) is refused, before any
// backend is asked, unless the admin allowed alert queries. Without
// ownership, alert queries are answered like any other.
func TestAlertQueriesWithOwnership(t *testing.T) {
	admin := backend.PluginContext{User: &backend.User{Login: "admin", Role: "Admin"}}
	alertReq := func() *backend.QueryDataRequest {
		return &backend.QueryDataRequest{PluginContext: admin, Headers: map[string]string{backend.FromAlertHeaderName: "true"},
			Queries: []backend.DataQuery{dataQuery("A", queryModel{QueryType: querytype.GPUMetric}), dataQuery("B", queryModel{QueryType: querytype.Flamegraph})}}
	}
	allowed := owned
	allowed.Ownership.AllowAlertQueries = true
	for _, tc := range []struct {
		name    string
		set     Settings
		refused bool
	}{{"ownership on", owned, true}, {"ownership on, alerts allowed", allowed, false}, {"ownership off", Settings{}, false}} {
		p, m := &fakeProfiles{}, &fakeMetrics{}
		resp, err := NewWith(tc.set, p, m).QueryData(context.Background(), alertReq())
		if err != nil {
			t.Fatal(err)
		}
		for ref, r := range resp.Responses {
			if refused := r.Error != nil && r.Status == backend.StatusForbidden && strings.Contains(r.Error.Error(), "allowAlertQueries"); refused != tc.refused {
				t.Errorf("%s: %s answered %v %v, want refused %v", tc.name, ref, r.Status, r.Error, tc.refused)
			}
		}
		if asked := len(p.sels) + len(m.exprs); (asked == 0) != tc.refused {
			t.Errorf("%s: %d backend calls", tc.name, asked)
		}
	}
	// The same admin's query from a browser (no header) is answered.
	req := alertReq()
	req.Headers = nil
	resp, _ := NewWith(owned, &fakeProfiles{}, &fakeMetrics{}).QueryData(context.Background(), req)
	if r := resp.Responses["A"]; r.Error != nil {
		t.Errorf("a dashboard query refused: %v", r.Error)
	}
}

// The admin chooses which user field ownership matches: the login, or
// the email address in one domain, whose local part is the Slurm user.
func TestOwnershipMatchesEmail(t *testing.T) {
	set := Settings{Ownership: Ownership{Enabled: true, MatchField: MatchEmail, EmailDomain: "uni.example"}}
	for _, tc := range []struct {
		user  backend.User
		owner string // "" sees nothing
	}{
		{backend.User{Login: "mallory", Email: "bob@uni.example", Role: "Viewer"}, "bob"},
		{backend.User{Login: "bob", Email: "bob@elsewhere.example", Role: "Viewer"}, ""},
		{backend.User{Login: "bob", Email: "", Role: "Viewer"}, ""},
		{backend.User{Login: "bob", Email: "@uni.example", Role: "Viewer"}, ""},
		{backend.User{Login: "x", Email: "carol@UNI.example", Role: "Editor"}, "carol"},
	} {
		p := &fakeProfiles{}
		resp, err := NewWith(set, p, &fakeMetrics{}).QueryData(context.Background(), &backend.QueryDataRequest{
			PluginContext: backend.PluginContext{User: &tc.user}, Queries: []backend.DataQuery{dataQuery("A", queryModel{QueryType: querytype.Flamegraph})}})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Responses["A"]
		if tc.owner == "" {
			if r.Error == nil || len(p.sels) != 0 {
				t.Errorf("%+v: answered (%v), asked %v", tc.user, r.Error, p.sels)
			}
			continue
		}
		want := schema.JobUser.Label + `="` + tc.owner + `"`
		if r.Error != nil || len(p.sels) == 0 || !strings.Contains(p.sels[0], want) {
			t.Errorf("%+v: %v, asked %v, want %s", tc.user, r.Error, p.sels, want)
		}
	}
}

func TestOwnershipSettings(t *testing.T) {
	for js, ok := range map[string]bool{
		`{"jobOwnership":{"enabled":true}}`:                                                  true,
		`{"jobOwnership":{"enabled":true,"matchField":"login","allowAlertQueries":true}}`:    true,
		`{"jobOwnership":{"enabled":true,"matchField":"email","emailDomain":"uni.example"}}`: true,
		`{"jobOwnership":{"enabled":true,"matchField":"email"}}`:                             false,
		`{"jobOwnership":{"enabled":true,"matchField":"email","emailDomain":"@x"}}`:          false,
		`{"jobOwnership":{"enabled":true,"matchField":"uid"}}`:                               false,
	} {
		s, err := ParseSettings(backend.DataSourceInstanceSettings{JSONData: []byte(js)})
		if (err == nil) != ok {
			t.Errorf("%s: %+v, %v", js, s.Ownership, err)
		}
		if err == nil && s.Ownership.MatchField == "" {
			t.Errorf("%s: no match field", js)
		}
	}
}
