package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang/snappy"
	"github.com/google/pprof/profile"
	"github.com/grafana/grafana-plugin-sdk-go/backend/grpcplugin"
	"github.com/grafana/grafana-plugin-sdk-go/data"
	"github.com/grafana/grafana-plugin-sdk-go/genproto/pluginv2"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/slurmscope/slurmscope/agent/remotewrite"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/querytype"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

// TestDatasource launches the built datasource binary as Grafana does
// (hashicorp go-plugin, the SDK's handshake, gRPC) and drives CheckHealth,
// QueryData and CallResource against a real Prometheus and a Pyroscope
// (the stand-in, or PYROSCOPE_URL / PROMETHEUS_URL, into which it writes
// its own data under fresh job ids).
func TestDatasource(t *testing.T) {
	lane(t, &simLane)
	pyroURL, promURL := os.Getenv("PYROSCOPE_URL"), os.Getenv("PROMETHEUS_URL")
	if promURL == "" { // else a deployment's Prometheus (and Pyroscope) is given
		testenv.RequireIntegration(t, testenv.Tools("prometheus", "promtool"))
	}
	if pyroURL == "" {
		srv := pyrostandin.New()
		if err := srv.Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		pyroURL = srv.URL()
	}
	writeURL := os.Getenv("PROMETHEUS_REMOTE_WRITE_URL")
	if promURL == "" {
		// A fresh tsdb with the remote-write receiver on.
		promURL = runPrometheus(t, t.TempDir(), "global:\n  scrape_interval: 15s\n", "--web.enable-remote-write-receiver")
	}
	if writeURL == "" {
		writeURL = strings.TrimRight(promURL, "/") + "/api/v1/write"
	}
	tenant := os.Getenv("PYROSCOPE_TENANT")

	// Fresh ids, so that data already on a real server never matches.
	base := 5000000 + time.Now().UnixMilli()%1000000*2
	jobA, jobB := strconv.FormatInt(base, 10), strconv.FormatInt(base+1, 10)
	now := time.Now()
	hosts := pushProfiles(t, pyroURL, tenant, jobA, jobB, now)
	gpu := pushGPUMetrics(t, writeURL, jobA, jobB, now)

	bin := buildDatasource(t)
	settings := map[string]any{
		"pyroscope":  map[string]any{"url": pyroURL, "tenantId": tenant},
		"prometheus": map[string]any{"url": promURL},
	}
	owned := map[string]any{
		"pyroscope":    map[string]any{"url": pyroURL, "tenantId": tenant},
		"prometheus":   map[string]any{"url": promURL},
		"jobOwnership": map[string]any{"enabled": true, "allowUsers": []string{"carol"}},
	}
	p := launch(t, bin)
	admin := &pluginv2.User{Login: "admin", Role: "Admin"}
	from, to := now.Add(-40*time.Minute), now.Add(time.Minute)
	jobFilter := fmt.Sprintf("slurm.job.id in [%q, %q]", jobA, jobB)

	t.Run("health", func(t *testing.T) {
		res := p.health(t, settings, admin)
		if res.Status != pluginv2.CheckHealthResponse_OK {
			t.Fatalf("health %v: %s", res.Status, res.Message)
		}
		broken := map[string]any{"pyroscope": settings["pyroscope"], "prometheus": map[string]any{"url": "http://" + dsClosedAddr(t)}}
		res = p.health(t, broken, admin)
		if res.Status != pluginv2.CheckHealthResponse_ERROR || !strings.Contains(res.Message, "Prometheus at") ||
			!strings.Contains(res.Message, "cannot connect") || strings.Contains(res.Message, "Pyroscope at "+pyroURL+" failed") {
			t.Errorf("broken Prometheus: %v %q", res.Status, res.Message)
		}
		t.Logf("broken Prometheus: %s", res.Message)
	})

	t.Run("flamegraph-is-sum-of-hosts", func(t *testing.T) {
		want := flame.New()
		for _, h := range hosts[jobA] {
			want.Merge(h)
		}
		got := p.flame(t, settings, admin, fmt.Sprintf("slurm.job.id == %q", jobA), from, to)
		if g, w := treeLines(got), treeLines(want); !reflect.DeepEqual(g, w) {
			t.Errorf("job flame graph\n%s\nwant the sum of its hosts\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
		one := p.flame(t, settings, admin, fmt.Sprintf("slurm.job.id == %q && host.name == %q", jobA, "node-b"), from, to)
		if g, w := treeLines(one), treeLines(hosts[jobA]["node-b"]); !reflect.DeepEqual(g, w) {
			t.Errorf("node-b alone\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
	})

	t.Run("group-by-host", func(t *testing.T) {
		frames := p.query(t, settings, admin, map[string]any{"queryType": "profileSeries",
			"filter": fmt.Sprintf("slurm.job.id == %q", jobA), "groupBy": []string{"host.name"}}, from, to)
		got := totals(t, frames, "host.name")
		want := map[string]float64{}
		for h, tr := range hosts[jobA] {
			want[h] = float64(tr.Total())
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("per host %v, want %v", got, want)
		}
		// Without group-by the hosts merge into one series.
		frames = p.query(t, settings, admin, map[string]any{"queryType": "profileSeries",
			"filter": fmt.Sprintf("slurm.job.id == %q", jobA)}, from, to)
		if got := totals(t, frames, ""); len(got) != 1 || got[""] != want["node-a"]+want["node-b"] {
			t.Errorf("merged %v, want one series of %v", got, want["node-a"]+want["node-b"])
		}
	})

	t.Run("gpu-utilization-per-user", func(t *testing.T) {
		frames := p.query(t, settings, admin, map[string]any{"queryType": "gpuMetric", "filter": jobFilter,
			"metric": "slurmscope_job_gpu_utilization_ratio", "aggregation": "avg", "groupBy": []string{"slurm.job.user"},
			"window": "30m"}, now.Add(-30*time.Minute), now)
		if len(frames) != 2 {
			t.Fatalf("%d frames, want one series per user:\n%s", len(frames), dump(frames))
		}
		for _, f := range frames {
			v := f.Fields[1]
			user := v.Labels[schema.JobUser.Name]
			if f.Meta == nil || f.Meta.Type != data.FrameTypeTimeSeriesMulti || v.Type() != data.FieldTypeFloat64 || v.Len() == 0 {
				t.Errorf("%s: not an alertable numeric series: %s", user, dump(data.Frames{f}))
				continue
			}
			last := v.At(v.Len() - 1).(float64)
			if math.Abs(last-gpu[user]) > 0.02 {
				t.Errorf("%s: 30-minute average %.3f, want %.3f", user, last, gpu[user])
			}
		}
	})

	t.Run("ownership", func(t *testing.T) {
		alice := &pluginv2.User{Login: "alice", Role: "Viewer"}
		editorBob := &pluginv2.User{Login: "bob", Role: "Editor"}
		carol := &pluginv2.User{Login: "carol", Role: "Viewer"}
		// The escape attempt: a filter that is true for everything.
		escape := fmt.Sprintf("slurm.job.id == %q || true", jobB)

		all := p.flame(t, owned, admin, jobFilter, from, to)
		aliceOnly := p.flame(t, owned, alice, escape, from, to)
		wantAlice := flame.New()
		for _, h := range hosts[jobA] {
			wantAlice.Merge(h)
		}
		if g, w := treeLines(aliceOnly), treeLines(wantAlice); !reflect.DeepEqual(g, w) {
			t.Errorf("alice with %q saw\n%s\nwant only her job\n%s", escape, strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
		if c := p.flame(t, owned, carol, jobFilter, from, to); c.Total() != all.Total() || all.Total() <= aliceOnly.Total() {
			t.Errorf("allow-listed carol saw %d, admin %d, alice %d", c.Total(), all.Total(), aliceOnly.Total())
		}
		// Values lookups, as a query and as a resource.
		vals := p.query(t, owned, editorBob, map[string]any{"queryType": "attributeValues", "attribute": "slurm.job.id", "filter": jobFilter + " || true"}, from, to)
		if got := columnStrings(vals); !reflect.DeepEqual(got, []string{jobB}) {
			t.Errorf("bob's job ids %v, want [%s]", got, jobB)
		}
		code, body := p.resource(t, owned, alice, "values?attribute=slurm.job.user&filter="+urlQuery(jobFilter+" || true")+
			fmt.Sprintf("&from=%d&to=%d", from.UnixMilli(), to.UnixMilli()))
		if code != http.StatusOK || !strings.Contains(body, `"alice"`) || strings.Contains(body, `"bob"`) {
			t.Errorf("alice /values: %d %s", code, body)
		}
		// Profile series grouped by user.
		ser := p.query(t, owned, alice, map[string]any{"queryType": "profileSeries", "filter": "true", "groupBy": []string{"slurm.job.user"}}, from, to)
		if got := totals(t, ser, "slurm.job.user"); len(got) != 1 || got["alice"] == 0 {
			t.Errorf("alice's series by user: %v", got)
		}
		// GPU metrics too.
		g := p.query(t, owned, alice, map[string]any{"queryType": "gpuMetric", "filter": escape, "groupBy": []string{"slurm.job.user"}}, now.Add(-30*time.Minute), now)
		for _, f := range g {
			if u := f.Fields[1].Labels[schema.JobUser.Name]; f.Fields[1].Len() > 0 && u != "alice" {
				t.Errorf("alice saw GPU series of %q", u)
			}
		}
		// No login: nothing, and an error that says why.
		res := p.queryRaw(t, owned, &pluginv2.User{Role: "Viewer"}, map[string]any{"queryType": "flamegraph"}, from, to)
		if res.Error == "" || !strings.Contains(res.Error, "login") {
			t.Errorf("anonymous request: error %q", res.Error)
		}
		// Matched by email in the configured domain: mallory's login is
		// nobody's, her address names alice.
		byEmail := map[string]any{"pyroscope": owned["pyroscope"], "prometheus": owned["prometheus"],
			"jobOwnership": map[string]any{"enabled": true, "matchField": "email", "emailDomain": "uni.example"}}
		if got := p.flame(t, byEmail, &pluginv2.User{Login: "mallory", Email: "alice@uni.example", Role: "Viewer"}, escape, from, to); !reflect.DeepEqual(treeLines(got), treeLines(wantAlice)) {
			t.Errorf("alice@uni.example saw\n%s\nwant only alice's job", strings.Join(treeLines(got), "\n"))
		}
		// Grafana's alerting runs rules as an org admin and marks their
		// queries: refused while ownership is on, unless allowed.
		alertQuery := func(settings map[string]any) *pluginv2.DataResponse {
			b, _ := json.Marshal(map[string]any{"queryType": "gpuMetric", "filter": "true"})
			r, err := p.data.QueryData(context.Background(), &pluginv2.QueryDataRequest{
				PluginContext: pluginContext(t, settings, admin), Headers: map[string]string{"FromAlert": "true"},
				Queries: []*pluginv2.DataQuery{{RefId: "A", Json: b, MaxDataPoints: 100, IntervalMS: 15000,
					TimeRange: &pluginv2.TimeRange{FromEpochMS: now.Add(-30 * time.Minute).UnixMilli(), ToEpochMS: now.UnixMilli()}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			return r.Responses["A"]
		}
		if r := alertQuery(owned); r.Status != http.StatusForbidden || !strings.Contains(r.Error, "allowAlertQueries") {
			t.Errorf("an alert query with ownership on: %d %q, want refused", r.Status, r.Error)
		}
		allowAlerts := map[string]any{"pyroscope": owned["pyroscope"], "prometheus": owned["prometheus"],
			"jobOwnership": map[string]any{"enabled": true, "allowAlertQueries": true}}
		for name, set := range map[string]map[string]any{"allowed": allowAlerts, "ownership off": settings} {
			if r := alertQuery(set); r.Error != "" || len(r.Frames) == 0 {
				t.Errorf("an alert query, %s: %q", name, r.Error)
			}
		}
	})

	t.Run("cli-job", func(t *testing.T) {
		cli := buildCLI(t)
		cmd := exec.Command(cli, "job", jobA, "--pyroscope-url", pyroURL, "--prometheus-url", promURL, "--tenant", tenant, "--since", "40m", "--json")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("slurmscope job: %v\n%s", err, out)
		}
		var rep struct {
			Nodes []string `json:"nodes"`
			GPUs  []struct {
				Host     string  `json:"host"`
				UtilMean float64 `json:"utilization_mean"`
			} `json:"gpus"`
			TopCPU []struct {
				Name string `json:"name"`
				Self int64  `json:"self_ns"`
			} `json:"top_cpu_functions"`
		}
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !reflect.DeepEqual(rep.Nodes, []string{"node-a", "node-b"}) || len(rep.GPUs) != 2 ||
			len(rep.TopCPU) == 0 || rep.TopCPU[0].Name != "matmul" || rep.TopCPU[0].Self != 3e9 {
			t.Errorf("job report:\n%s", out)
		}
		for _, g := range rep.GPUs {
			if want := map[string]float64{"node-a": 0.8, "node-b": 0.6}[g.Host]; math.Abs(g.UtilMean-want) > 0.01 {
				t.Errorf("%s: mean utilisation %.3f, want %.1f", g.Host, g.UtilMean, want)
			}
		}
		text, err := exec.Command(cli, "job", jobA, "--pyroscope-url", pyroURL, "--prometheus-url", promURL, "--tenant", tenant, "--since", "40m").Output()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("slurmscope job %s:\n%s", jobA, text)
	})

	t.Run("errors-per-query", func(t *testing.T) {
		for name, model := range map[string]string{
			"garbage":     `{"queryType": 42, "filter": [}`,
			"bad type":    `{"queryType": "nope"}`,
			"bad filter":  `{"queryType": "flamegraph", "filter": "slurm.job.id =="}`,
			"bad metric":  `{"queryType": "gpuMetric", "metric": "up"}`,
			"bad profile": `{"queryType": "flamegraph", "profileType": "process_cpu:cpu"}`,
		} {
			res := p.queryJSON(t, settings, admin, []byte(model), from, to)
			if res.Error == "" {
				t.Errorf("%s: no error", name)
			}
			t.Logf("%s: %s", name, res.Error)
		}
		code, body := p.resource(t, settings, admin, "validate?filter="+urlQuery(`slurm.job.id == "1" &&`))
		if code != http.StatusOK || !strings.Contains(body, `"ok":false`) || !strings.Contains(body, `"column"`) {
			t.Errorf("/validate: %d %s", code, body)
		}
		code, body = p.resource(t, settings, admin, "attributes")
		if code != http.StatusOK || !strings.Contains(body, `"slurm.job.id"`) {
			t.Errorf("/attributes: %d %s", code, body)
		}
		code, body = p.resource(t, settings, admin, "profile-types")
		if code != http.StatusOK || !strings.Contains(body, "process_cpu") {
			t.Errorf("/profile-types: %d %s", code, body)
		}
	})
}

// pushProfiles pushes one CPU profile per host of job A (alice: node-a,
// node-b) and one of job B (bob: node-a), and returns each host's tree.
func pushProfiles(t *testing.T, pyroURL, tenant, jobA, jobB string, at time.Time) map[string]map[string]*flame.Tree {
	t.Helper()
	type prof struct {
		job, user, host string
		stacks          map[string]int64 // "a;b;c" root first -> samples of 10 ms
	}
	profs := []prof{
		{jobA, "alice", "node-a", map[string]int64{"python;train_step;forward;matmul": 300, "python;train_step;backward": 120}},
		{jobA, "alice", "node-b", map[string]int64{"python;train_step;forward;attention": 250, "python;dataloader;decode_jpeg": 90, "python;train_step;backward": 40}},
		{jobB, "bob", "node-a", map[string]int64{"main;eval;score": 150}},
	}
	client := pushv1connect.NewPusherServiceClient(http.DefaultClient, pyroURL, connect.WithInterceptors(tenantInterceptor(tenant)))
	out := map[string]map[string]*flame.Tree{}
	req := &pushv1.PushRequest{}
	for _, pr := range profs {
		tr := flame.New()
		p := &profile.Profile{
			SampleType:    []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}},
			PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
			Period:        10_000_000,
			TimeNanos:     at.Add(-2 * time.Minute).UnixNano(),
			DurationNanos: int64(10 * time.Second),
		}
		fns := map[string]*profile.Location{}
		for stack, n := range pr.stacks {
			frames := strings.Split(stack, ";")
			tr.Add(frames, n*10_000_000)
			var locs []*profile.Location
			for i := len(frames) - 1; i >= 0; i-- { // leaf first
				loc, ok := fns[frames[i]]
				if !ok {
					fn := &profile.Function{ID: uint64(len(fns) + 1), Name: frames[i], SystemName: frames[i]}
					p.Function = append(p.Function, fn)
					loc = &profile.Location{ID: uint64(len(fns) + 1), Line: []profile.Line{{Function: fn}}}
					p.Location = append(p.Location, loc)
					fns[frames[i]] = loc
				}
				locs = append(locs, loc)
			}
			p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{n * 10_000_000}})
		}
		var buf bytes.Buffer
		if err := p.Write(&buf); err != nil {
			t.Fatal(err)
		}
		labels := []*typesv1.LabelPair{
			{Name: "__name__", Value: "process_cpu"},
			{Name: schema.ServiceName, Value: "ds-e2e-" + pr.job},
			{Name: schema.JobID.Label, Value: pr.job},
			{Name: schema.JobUser.Label, Value: pr.user},
			{Name: schema.JobName.Label, Value: "ds-e2e"},
			{Name: schema.HostName.Label, Value: pr.host},
		}
		sort.Slice(labels, func(i, j int) bool { return labels[i].Name < labels[j].Name })
		req.Series = append(req.Series, &pushv1.RawProfileSeries{Labels: labels,
			Samples: []*pushv1.RawSample{{RawProfile: buf.Bytes()}}})
		if out[pr.job] == nil {
			out[pr.job] = map[string]*flame.Tree{}
		}
		out[pr.job][pr.host] = tr
	}
	if _, err := client.Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatalf("push to %s: %v", pyroURL, err)
	}
	return out
}

// pushGPUMetrics remote-writes 30 minutes of per-job GPU utilisation, one
// sample every 15 s, and returns each user's expected average: alice's job
// has a GPU on two nodes (0.8 and 0.6), bob's one GPU at 0.2.
func pushGPUMetrics(t *testing.T, writeURL, jobA, jobB string, now time.Time) map[string]float64 {
	t.Helper()
	type gpu struct {
		job, user, host, uuid string
		util                  float64
	}
	gpus := []gpu{
		{jobA, "alice", "node-a", "GPU-aaaa-0", 0.8},
		{jobA, "alice", "node-b", "GPU-bbbb-0", 0.6},
		{jobB, "bob", "node-a", "GPU-aaaa-1", 0.2},
	}
	var series []remotewrite.TimeSeries
	for _, g := range gpus {
		for _, m := range []struct {
			name string
			v    float64
		}{{"slurmscope_job_gpu_utilization_ratio", g.util}, {"slurmscope_job_gpu_allocated", 1}} {
			labels := []remotewrite.Label{
				{Name: remotewrite.MetricNameLabel, Value: m.name},
				{Name: schema.GPUIndex.Label, Value: "0"},
				{Name: schema.GPUUUID.Label, Value: g.uuid},
				{Name: schema.HostName.Label, Value: g.host},
				{Name: schema.JobID.Label, Value: g.job},
				{Name: schema.JobName.Label, Value: "ds-e2e"},
				{Name: schema.JobUser.Label, Value: g.user},
			}
			sort.Slice(labels, func(i, j int) bool { return labels[i].Name < labels[j].Name })
			s := remotewrite.TimeSeries{Labels: labels}
			for ts := now.Add(-35 * time.Minute); !ts.After(now); ts = ts.Add(15 * time.Second) {
				s.Samples = append(s.Samples, remotewrite.Sample{Value: m.v, Timestamp: ts.UnixMilli()})
			}
			series = append(series, s)
		}
	}
	body := snappy.Encode(nil, remotewrite.MarshalWriteRequest(series))
	req, err := http.NewRequest(http.MethodPost, writeURL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("remote write to %s: %v", writeURL, err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("remote write to %s: %s %s", writeURL, res.Status, b)
	}
	return map[string]float64{"alice": 0.7, "bob": 0.2}
}

// dsClosedAddr is an address where nothing listens.
func dsClosedAddr(t *testing.T) string { return freeAddr(t) }

func buildDatasource(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpx_slurmscope")
	cmd := exec.Command("go", "build", "-o", bin, "../grafana-plugin/cmd/slurmscope-datasource")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the datasource: %v\n%s", err, out)
	}
	return bin
}

// pluginProc is the datasource process and its gRPC clients.
type pluginProc struct {
	diag pluginv2.DiagnosticsClient
	data pluginv2.DataClient
	res  pluginv2.ResourceClient
}

// clientPlugin is the host side of one of the SDK's gRPC services.
type clientPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	make func(*grpc.ClientConn) any
}

func (c *clientPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error {
	return fmt.Errorf("host side only")
}

func (c *clientPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return c.make(conn), nil
}

// launch starts the plugin binary with Grafana's handshake.
func launch(t *testing.T, bin string) *pluginProc {
	t.Helper()
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: goplugin.HandshakeConfig{ProtocolVersion: grpcplugin.ProtocolVersion,
			MagicCookieKey: grpcplugin.MagicCookieKey, MagicCookieValue: grpcplugin.MagicCookieValue},
		VersionedPlugins: map[int]goplugin.PluginSet{grpcplugin.ProtocolVersion: {
			"diagnostics": &clientPlugin{make: func(c *grpc.ClientConn) any { return pluginv2.NewDiagnosticsClient(c) }},
			"data":        &clientPlugin{make: func(c *grpc.ClientConn) any { return pluginv2.NewDataClient(c) }},
			"resource":    &clientPlugin{make: func(c *grpc.ClientConn) any { return pluginv2.NewResourceClient(c) }},
		}},
		Cmd:              exec.Command(bin),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           hclog.New(&hclog.LoggerOptions{Output: io.Discard}),
	})
	t.Cleanup(client.Kill)
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("plugin handshake: %v", err)
	}
	p := &pluginProc{}
	for name, dst := range map[string]any{"diagnostics": &p.diag, "data": &p.data, "resource": &p.res} {
		raw, err := rpc.Dispense(name)
		if err != nil {
			t.Fatalf("dispense %s: %v", name, err)
		}
		reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(raw))
	}
	return p
}

func pluginContext(t *testing.T, settings map[string]any, u *pluginv2.User) *pluginv2.PluginContext {
	t.Helper()
	js, err := json.Marshal(settings)
	if err != nil {
		t.Fatal(err)
	}
	// Grafana keeps one instance per datasource id and update time: give
	// each distinct configuration its own, as distinct datasources.
	h := fnv.New32a()
	h.Write(js)
	id := int64(h.Sum32())
	return &pluginv2.PluginContext{OrgId: 1, PluginId: "slurmscope-slurm-datasource", User: u,
		DataSourceInstanceSettings: &pluginv2.DataSourceInstanceSettings{Id: id, Uid: fmt.Sprintf("slurmscope-%d", id),
			Name: "slurmscope", JsonData: js, LastUpdatedMS: id}}
}

func (p *pluginProc) health(t *testing.T, settings map[string]any, u *pluginv2.User) *pluginv2.CheckHealthResponse {
	t.Helper()
	res, err := p.diag.CheckHealth(context.Background(), &pluginv2.CheckHealthRequest{PluginContext: pluginContext(t, settings, u)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (p *pluginProc) queryJSON(t *testing.T, settings map[string]any, u *pluginv2.User, model []byte, from, to time.Time) *pluginv2.DataResponse {
	t.Helper()
	res, err := p.data.QueryData(context.Background(), &pluginv2.QueryDataRequest{
		PluginContext: pluginContext(t, settings, u),
		Queries: []*pluginv2.DataQuery{{RefId: "A", Json: model, MaxDataPoints: 100, IntervalMS: 15000,
			TimeRange: &pluginv2.TimeRange{FromEpochMS: from.UnixMilli(), ToEpochMS: to.UnixMilli()}}},
	})
	if err != nil {
		t.Fatalf("QueryData returned an error, not a per-query response: %v", err)
	}
	r := res.Responses["A"]
	if r == nil {
		t.Fatal("no response for refId A")
	}
	return r
}

func (p *pluginProc) queryRaw(t *testing.T, settings map[string]any, u *pluginv2.User, model map[string]any, from, to time.Time) *pluginv2.DataResponse {
	t.Helper()
	b, err := json.Marshal(model)
	if err != nil {
		t.Fatal(err)
	}
	return p.queryJSON(t, settings, u, b, from, to)
}

func (p *pluginProc) query(t *testing.T, settings map[string]any, u *pluginv2.User, model map[string]any, from, to time.Time) data.Frames {
	t.Helper()
	r := p.queryRaw(t, settings, u, model, from, to)
	if r.Error != "" {
		t.Fatalf("query %v: %s", model, r.Error)
	}
	frames, err := data.UnmarshalArrowFrames(r.Frames)
	if err != nil {
		t.Fatal(err)
	}
	return frames
}

func (p *pluginProc) flame(t *testing.T, settings map[string]any, u *pluginv2.User, filter string, from, to time.Time) *flame.Tree {
	t.Helper()
	frames := p.query(t, settings, u, map[string]any{"queryType": "flamegraph", "filter": filter}, from, to)
	if len(frames) != 1 {
		t.Fatalf("%d frames", len(frames))
	}
	if frames[0].Meta == nil || frames[0].Meta.PreferredVisualization != data.VisTypeFlameGraph {
		t.Errorf("frame meta %+v", frames[0].Meta)
	}
	tr, ok := querytype.FromFrame(frames[0])
	if !ok {
		t.Fatalf("not a nested-set frame: %s", dump(frames))
	}
	return tr
}

func (p *pluginProc) resource(t *testing.T, settings map[string]any, u *pluginv2.User, path string) (int, string) {
	t.Helper()
	route, _, _ := strings.Cut(path, "?")
	stream, err := p.res.CallResource(context.Background(), &pluginv2.CallResourceRequest{
		PluginContext: pluginContext(t, settings, u), Path: route, Method: http.MethodGet, Url: "/" + path})
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	code := 0
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Code != 0 {
			code = int(r.Code)
		}
		body = append(body, r.Body...)
	}
	return code, string(body)
}

func treeLines(tr *flame.Tree) []string {
	var out, path []string
	tr.Walk(func(level int, name string, self, total int64) bool {
		path = append(path[:level], name)
		out = append(out, fmt.Sprintf("%s %d/%d", strings.Join(path, ";"), total, self))
		return true
	})
	return out
}

// totals sums each series of frames, keyed by the value of label.
func totals(t *testing.T, frames data.Frames, label string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, f := range frames {
		if len(f.Fields) != 2 || f.Fields[1].Len() == 0 {
			continue
		}
		v := f.Fields[1]
		k := v.Labels[label]
		for i := 0; i < v.Len(); i++ {
			out[k] += v.At(i).(float64)
		}
	}
	return out
}

func columnStrings(frames data.Frames) []string {
	var out []string
	for _, f := range frames {
		for i := 0; i < f.Fields[0].Len(); i++ {
			out = append(out, f.Fields[0].At(i).(string))
		}
	}
	return out
}

func dump(frames data.Frames) string {
	var b strings.Builder
	for _, f := range frames {
		s, _ := f.StringTable(20, 10)
		b.WriteString(s)
	}
	return b.String()
}

func urlQuery(s string) string { return url.QueryEscape(s) }
