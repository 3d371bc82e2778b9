package pyrostandin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/querier/v1/querierv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/slurmscope/slurmscope/schema"
)

// Each test here pins one behaviour seen on a real Pyroscope (v2 storage,
// default limits): the project relies on it, so the stand-in must do the
// same.

const cpuType = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"

// now is the stand-in's clock in these tests: whole seconds, so that the
// expected messages are easy to write.
var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type env struct {
	push    pushv1connect.PusherServiceClient
	querier querierv1connect.QuerierServiceClient
}

func newEnv(t *testing.T, opts ...Option) env {
	t.Helper()
	srv := httptest.NewServer(New(append([]Option{WithClock(func() time.Time { return now })}, opts...)...).Handler())
	t.Cleanup(srv.Close)
	return env{pushv1connect.NewPusherServiceClient(http.DefaultClient, srv.URL),
		querierv1connect.NewQuerierServiceClient(http.DefaultClient, srv.URL)}
}

func pprofAt(_ *testing.T, ts time.Time, stacks map[string]int64) []byte {
	return CPUProfile(ts, stacks)
}

func series(_ *testing.T, ts time.Time, stacks map[string]int64, labels ...string) *pushv1.RawProfileSeries {
	return CPUSeries(ts, stacks, labels...)
}

func (e env) pushErr(t *testing.T, ss ...*pushv1.RawProfileSeries) error {
	t.Helper()
	_, err := e.push.Push(context.Background(), connect.NewRequest(&pushv1.PushRequest{Series: ss}))
	return err
}

func (e env) mustPush(t *testing.T, ss ...*pushv1.RawProfileSeries) {
	t.Helper()
	if err := e.pushErr(t, ss...); err != nil {
		t.Fatal(err)
	}
}

func job(id, host string) []string {
	return []string{schema.ServiceName, "svc", schema.JobID.Label, id, schema.HostName.Label, host}
}

func ms(t time.Time) int64 { return t.UnixMilli() }

type point struct {
	T int64
	V float64
}

func (e env) selectSeries(t *testing.T, start, end time.Time, step float64, groupBy []string, agg *typesv1.TimeSeriesAggregationType) map[string][]point {
	t.Helper()
	resp, err := e.querier.SelectSeries(context.Background(), connect.NewRequest(&querierv1.SelectSeriesRequest{
		ProfileTypeID: cpuType, LabelSelector: "{}", Start: ms(start), End: ms(end), Step: step, GroupBy: groupBy, Aggregation: agg}))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]point{}
	for _, s := range resp.Msg.Series {
		var k []string
		for _, l := range s.Labels {
			k = append(k, l.Name+"="+l.Value)
		}
		for _, p := range s.Points {
			out[strings.Join(k, ",")] = append(out[strings.Join(k, ",")], point{p.Timestamp, p.Value})
		}
	}
	return out
}

// A point at t sums (t - step, t]; the first, at start, sums from start -
// step; profiles after the last point are not counted.
func TestSelectSeriesPoints(t *testing.T) {
	e := newEnv(t)
	start := now.Add(-10 * time.Minute)
	at := func(d time.Duration, v int64) *pushv1.RawProfileSeries {
		return series(t, start.Add(d), map[string]int64{"main": v}, job("1", "n1")...)
	}
	e.mustPush(t,
		at(-61*time.Second, 1),       // before start - step: not read
		at(-60*time.Second, 2),       // exactly start - step: the first point
		at(-time.Second, 4),          // (start - step, start]: the first point
		at(30*time.Second, 8),        // (start, start+60]: the second
		at(60*time.Second, 16),       // the second point's end, inclusive
		at(60*time.Second+1e6, 32),   // the third
		at(190*time.Second, 64),      // after the last point (start+180 <= end < start+240): dropped
		at(5*time.Minute, 128),       // after end: not read
		at(121*time.Second-1e6, 256), // 120.999 s: (start+120, start+180]
	)
	got := e.selectSeries(t, start, start.Add(200*time.Second), 60, nil, nil)
	want := map[string][]point{"": {{ms(start), 6}, {ms(start) + 60000, 24}, {ms(start) + 120000, 32}, {ms(start) + 180000, 256}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("points %v\nwant %v", got, want)
	}
}

// Series come largest total first, their labels in group-by order; the
// AVERAGE aggregation sums, as the real server's does (job 1's first 5 s
// point: 2268041160 there where an average would give 1134020580).
func TestSelectSeriesOrderAndAggregation(t *testing.T) {
	e := newEnv(t)
	ts := now.Add(-time.Minute)
	e.mustPush(t,
		series(t, ts, map[string]int64{"main": 1134020580}, job("1", "n1")...),
		series(t, ts.Add(-time.Second), map[string]int64{"main": 1134020580}, job("1", "n2")...),
		series(t, ts, map[string]int64{"main": 5}, job("2", "n1")...),
		series(t, ts, map[string]int64{"main": 7}, job("3", "n3")...))
	avg := typesv1.TimeSeriesAggregationType_TIME_SERIES_AGGREGATION_TYPE_AVERAGE
	resp, err := e.querier.SelectSeries(context.Background(), connect.NewRequest(&querierv1.SelectSeriesRequest{
		ProfileTypeID: cpuType, LabelSelector: "{}", Start: ms(ts), End: ms(now), Step: 5,
		GroupBy: []string{schema.JobID.Label, schema.HostName.Label}, Aggregation: &avg}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range resp.Msg.Series {
		var ls []string
		for _, l := range s.Labels {
			ls = append(ls, l.Name+"="+l.Value)
		}
		got = append(got, fmt.Sprintf("%s %v", strings.Join(ls, ","), s.Points[0].Value))
	}
	j, h := schema.JobID.Label, schema.HostName.Label
	want := []string{j + "=1," + h + "=n1 1.13402058e+09", j + "=1," + h + "=n2 1.13402058e+09",
		j + "=3," + h + "=n3 7", j + "=2," + h + "=n1 5"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("series\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	byJob := e.selectSeries(t, ts, now, 5, []string{j}, &avg)
	if p := byJob[j+"=1"]; len(p) != 1 || p[0].V != 2268041160 {
		t.Errorf("job 1 with AVERAGE: %v, want one point of 2268041160 (the sum)", p)
	}
}

func TestMaxQueryLength(t *testing.T) {
	e := newEnv(t)
	e.mustPush(t, series(t, now.Add(-time.Minute), map[string]int64{"main": 1}, job("1", "n1")...))
	calls := map[string]func(start, end int64) error{
		"SelectMergeStacktraces": func(s, en int64) error {
			_, err := e.querier.SelectMergeStacktraces(context.Background(), connect.NewRequest(&querierv1.SelectMergeStacktracesRequest{
				ProfileTypeID: cpuType, LabelSelector: "{}", Start: s, End: en}))
			return err
		},
		"SelectSeries": func(s, en int64) error {
			_, err := e.querier.SelectSeries(context.Background(), connect.NewRequest(&querierv1.SelectSeriesRequest{
				ProfileTypeID: cpuType, LabelSelector: "{}", Start: s, End: en, Step: 60}))
			return err
		},
		"SelectMergeProfile": func(s, en int64) error {
			_, err := e.querier.SelectMergeProfile(context.Background(), connect.NewRequest(&querierv1.SelectMergeProfileRequest{
				ProfileTypeID: cpuType, LabelSelector: "{}", Start: s, End: en}))
			return err
		},
		"LabelValues": func(s, en int64) error {
			_, err := e.querier.LabelValues(context.Background(), connect.NewRequest(&typesv1.LabelValuesRequest{Name: schema.JobID.Label, Start: s, End: en}))
			return err
		},
		"LabelNames": func(s, en int64) error {
			_, err := e.querier.LabelNames(context.Background(), connect.NewRequest(&typesv1.LabelNamesRequest{Start: s, End: en}))
			return err
		},
		"Series": func(s, en int64) error {
			_, err := e.querier.Series(context.Background(), connect.NewRequest(&querierv1.SeriesRequest{Start: s, End: en}))
			return err
		},
		"ProfileTypes": func(s, en int64) error {
			_, err := e.querier.ProfileTypes(context.Background(), connect.NewRequest(&querierv1.ProfileTypesRequest{Start: s, End: en}))
			return err
		},
	}
	end := ms(now)
	for name, call := range calls {
		if err := call(end-24*3600*1000, end); err != nil {
			t.Errorf("%s over exactly 24 h: %v", name, err)
		}
		err := call(end-7*24*3600*1000, end)
		want := "invalid_argument: the query time range exceeds the limit (max_query_length, actual: 168h0m0s, limit: 1d)"
		if err == nil || err.Error() != want || connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s over 7 days: %v, want %q", name, err, want)
		}
		if err := call(end, end-1); err == nil || !strings.Contains(err.Error(), "query start time is after end time") {
			t.Errorf("%s with start after end: %v", name, err)
		}
	}
	// HTTP 400, as a client without Connect sees it.
	body := fmt.Sprintf(`{"profile_typeID":%q,"label_selector":"{}","start":%d,"end":%d}`, cpuType, end-25*3600*1000, end)
	srv := httptest.NewServer(New().Handler())
	defer srv.Close()
	res, err := http.Post(srv.URL+"/querier.v1.QuerierService/SelectMergeStacktraces", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("HTTP %d, want 400", res.StatusCode)
	}
	long := newEnv(t, WithMaxQueryLength(0))
	if _, err := long.querier.LabelValues(context.Background(), connect.NewRequest(&typesv1.LabelValuesRequest{
		Name: schema.JobID.Label, Start: end - 30*24*3600*1000, End: end})); err != nil {
		t.Errorf("with the limit off: %v", err)
	}
}

func TestIngestionWindow(t *testing.T) {
	e := newEnv(t)
	old := series(t, now.Add(-time.Hour), map[string]int64{"main": 1}, job("1", "n1")...)
	err := e.pushErr(t, old)
	want := `invalid_argument: profile with labels '{__name__="process_cpu", ` + schema.HostName.Label + `="n1", ` + schema.ServiceName + `="svc", ` +
		schema.JobID.Label + `="1"}' is outside of ingestion window (profile timestamp: 2026-11-30 11:00:00 +0000 UTC, ` +
		`the ingestion window starts at 2026-11-30 11:00:00 +0000 UTC and ends at 2026-11-30 12:10:00 +0000 UTC)`
	if err == nil || err.Error() != want {
		t.Errorf("a profile exactly 1 h old: %v\nwant %s", err, want)
	}
	if err := e.pushErr(t, series(t, now.Add(10*time.Minute), map[string]int64{"main": 1}, job("1", "n1")...)); err == nil ||
		!strings.Contains(err.Error(), "outside of ingestion window (profile timestamp: 2026-11-30 12:10:00 +0000 UTC") {
		t.Errorf("a profile 10 min ahead: %v", err)
	}
	// The good series of a request are kept, its answer is the bad one's.
	err = e.pushErr(t,
		series(t, now.Add(-time.Hour+time.Millisecond), map[string]int64{"main": 2}, job("2", "n1")...),
		series(t, now.Add(-2*time.Hour), map[string]int64{"main": 4}, job("3", "n1")...),
		series(t, now.Add(10*time.Minute-time.Millisecond), map[string]int64{"main": 8}, job("4", "n1")...))
	if err == nil || connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), `="3"}' is outside of ingestion window`) {
		t.Errorf("mixed request: %v", err)
	}
	vs := e.labelValues(t, schema.JobID.Label, now.Add(-3*time.Hour), now.Add(time.Hour))
	if !reflect.DeepEqual(vs, []string{"2", "4"}) {
		t.Errorf("stored jobs %v, want [2 4]", vs)
	}
	wide := newEnv(t, WithIngestionWindow(48*time.Hour, 0))
	if err := wide.pushErr(t, old, series(t, now.Add(24*time.Hour), map[string]int64{"main": 1}, job("1", "n1")...)); err != nil {
		t.Errorf("a 48 h window, no upper bound: %v", err)
	}
}

func (e env) labelValues(t *testing.T, name string, start, end time.Time, matchers ...string) []string {
	t.Helper()
	resp, err := e.querier.LabelValues(context.Background(), connect.NewRequest(&typesv1.LabelValuesRequest{
		Name: name, Matchers: matchers, Start: ms(start), End: ms(end)}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.Names
}

// Label queries see whole blocks of time: a job from 50 minutes before the
// range shows up; flame graphs and series stay exact.
func TestLabelQueriesAreCoarse(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want []string
	}{{nil, []string{"1", "2"}}, {[]Option{WithBlockDuration(0)}, []string{"2"}}} {
		e := newEnv(t, tc.opts...)
		e.mustPush(t,
			series(t, now.Add(-50*time.Minute), map[string]int64{"main": 1}, job("1", "n-old")...),
			series(t, now.Add(-5*time.Minute), map[string]int64{"main": 1}, job("2", "n1")...))
		from, to := now.Add(-10*time.Minute), now
		if got := e.labelValues(t, schema.JobID.Label, from, to); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%d options: LabelValues %v, want %v", len(tc.opts), got, tc.want)
		}
		ser, err := e.querier.Series(context.Background(), connect.NewRequest(&querierv1.SeriesRequest{
			LabelNames: []string{schema.JobID.Label}, Start: ms(from), End: ms(to)}))
		if err != nil || len(ser.Msg.LabelsSet) != len(tc.want) {
			t.Errorf("Series %v %v, want %d sets", ser, err, len(tc.want))
		}
		if got := e.selectSeries(t, from, to, 600, []string{schema.JobID.Label}, nil); len(got) != 1 {
			t.Errorf("SelectSeries is exact, got %v", got)
		}
	}
}

// flame decodes a SelectMergeStacktraces answer into "path total self"
// lines and counts its nodes that are not "other".
func (e env) flame(t *testing.T, maxNodes int64) (lines []string, counted int) {
	t.Helper()
	req := &querierv1.SelectMergeStacktracesRequest{ProfileTypeID: cpuType, LabelSelector: "{}", Start: ms(now.Add(-time.Hour)), End: ms(now)}
	if maxNodes > 0 {
		req.MaxNodes = &maxNodes
	}
	resp, err := e.querier.SelectMergeStacktraces(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(resp.Msg)
	if err != nil {
		t.Fatal(err)
	}
	lines, _, _ = boxes(t, b)
	for _, l := range lines {
		if !strings.Contains(l, ";other ") && !strings.HasPrefix(l, "total ") {
			counted++
		}
	}
	return lines, counted
}

func TestMaxNodesKeepsTies(t *testing.T) {
	e := newEnv(t)
	stacks := map[string]int64{"main;a": 10, "main;b": 5, "main;c": 5, "main;d": 5, "main;e": 1}
	e.mustPush(t, series(t, now.Add(-time.Minute), stacks, job("1", "n1")...))
	// The 3rd largest is 5, shared by b, c and d: all three stay, so four
	// nodes come back where three were asked for.
	lines, counted := e.flame(t, 3)
	if counted != 5 || !contains(lines, "total;main;d @20 total=5 self=5") || !contains(lines, "total;main;other @25 total=1 self=1") {
		t.Errorf("max_nodes 3: %d counted nodes\n%s", counted, strings.Join(lines, "\n"))
	}
	if _, n := e.flame(t, 0); n != 6 {
		t.Errorf("default max_nodes: %d nodes, want all 6", n)
	}
}

// Each pushed block is truncated on its own, then the merge: at max_nodes
// 1 the blocks' folded remainders add up to an "other" larger than any
// function, and the answer is the root and "other" only.
func TestMaxNodesOneIsRootAndOther(t *testing.T) {
	e := newEnv(t)
	e.mustPush(t, series(t, now.Add(-2*time.Minute), map[string]int64{"python;step": 60, "sshd;poll": 40}, job("1", "n1")...))
	e.mustPush(t, series(t, now.Add(-time.Minute), map[string]int64{"python;step": 40, "sshd;poll": 60}, job("1", "n1")...))
	lines, counted := e.flame(t, 1)
	want := []string{"total @0 total=200 self=0", "total;other @0 total=200 self=200"}
	if counted != 0 || !reflect.DeepEqual(lines, want) {
		t.Errorf("max_nodes 1:\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestPushLabelRules(t *testing.T) {
	e := newEnv(t)
	ts := now.Add(-time.Minute)
	one := map[string]int64{"main": 1}
	e.mustPush(t,
		series(t, ts, one, schema.JobID.Label, "7"), // no service_name
		series(t, ts, one, schema.ServiceName, "svc", schema.JobID.Label, "8", schema.JobName.Label, ""),
		series(t, ts, one, schema.ServiceName, "svc", schema.JobID.Label, "9", "gpu.uuid", "GPU-1", "k8s-pod", "p"))
	from, to := now.Add(-time.Hour), now
	if got := e.labelValues(t, schema.ServiceName, from, to); !reflect.DeepEqual(got, []string{"svc", "unknown_service"}) {
		t.Errorf("service names %v", got)
	}
	names, err := e.querier.LabelNames(context.Background(), connect.NewRequest(&typesv1.LabelNamesRequest{Start: ms(from), End: ms(to)}))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names.Msg.Names {
		if n == "gpu.uuid" || n == "k8s-pod" || n == schema.JobName.Label {
			t.Errorf("LabelNames lists %q: %v", n, names.Msg.Names)
		}
	}
	ser, err := e.querier.Series(context.Background(), connect.NewRequest(&querierv1.SeriesRequest{
		Matchers: []string{`{` + schema.JobID.Label + `=~"8|9"}`}, Start: ms(from), End: ms(to)}))
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range ser.Msg.LabelsSet {
		for _, l := range set.Labels {
			if l.Value == "" || strings.ContainsAny(l.Name, ".-") {
				t.Errorf("Series shows %s=%q", l.Name, l.Value)
			}
		}
	}
	// Stored all the same: the dotted series answers a query.
	if lines, _ := e.flameSel(t, `{`+schema.JobID.Label+`="9"}`); !contains(lines, "total @0 total=1 self=0") {
		t.Errorf("the series with dotted names: %v", lines)
	}
}

func (e env) flameSel(t *testing.T, sel string) ([]string, error) {
	t.Helper()
	resp, err := e.querier.SelectMergeStacktraces(context.Background(), connect.NewRequest(&querierv1.SelectMergeStacktracesRequest{
		ProfileTypeID: cpuType, LabelSelector: sel, Start: ms(now.Add(-time.Hour)), End: ms(now)}))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := protojson.Marshal(resp.Msg)
	lines, _, _ := boxes(t, b)
	return lines, nil
}

// A push's label limits: at most 30 names, names of 1024 bytes, values of
// 2048, no duplicate, with the real server's messages.
func TestPushLimits(t *testing.T) {
	e := newEnv(t)
	ts := now.Add(-time.Minute)
	one := map[string]int64{"main": 1}
	labels := func(n int) []string {
		ls := []string{schema.ServiceName, "svc"}
		for i := 0; len(ls)/2 < n-1; i++ {
			ls = append(ls, fmt.Sprintf("l%02d", i), "v")
		}
		return ls
	}
	for _, tc := range []struct {
		name   string
		labels []string
		err    string // "" = accepted
	}{
		{"30 labels", labels(30), ""},
		{"31 labels", labels(31), "has 31 label names; limit 30"},
		{"name of 1024 bytes", []string{schema.ServiceName, "svc", strings.Repeat("n", 1024), "v"}, ""},
		{"name of 1025 bytes", []string{schema.ServiceName, "svc", strings.Repeat("n", 1025), "v"}, "has label name too long"},
		{"value of 2048 bytes", []string{schema.ServiceName, "svc", "a", strings.Repeat("v", 2048)}, ""},
		{"value of 2049 bytes", []string{schema.ServiceName, "svc", "a", strings.Repeat("v", 2049)}, "has label value too long"},
		{"duplicate", []string{schema.ServiceName, "svc", "a", "1", "a", "2"}, "has duplicate label name: 'a'"},
	} {
		err := e.pushErr(t, series(t, ts, one, tc.labels...))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || connect.CodeOf(err) != connect.CodeInvalidArgument):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

// Invalid UTF-8 cannot even be decoded: a protobuf string must be UTF-8,
// and the request fails with 400 before any label is looked at.
func TestPushInvalidUTF8(t *testing.T) {
	srv := httptest.NewServer(New(WithClock(func() time.Time { return now })).Handler())
	defer srv.Close()
	raw := pprofAt(t, now.Add(-time.Minute), map[string]int64{"main": 1})
	pair := func(n, v string) []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		b = protowire.AppendString(b, n)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		return protowire.AppendString(b, v)
	}
	for _, bad := range [][2]string{{"a", "\xff"}, {"\xff", "v"}} {
		var ser []byte
		for _, l := range [][2]string{{"__name__", "process_cpu"}, {schema.ServiceName, "svc"}, bad} {
			ser = protowire.AppendTag(ser, 1, protowire.BytesType)
			ser = protowire.AppendBytes(ser, pair(l[0], l[1]))
		}
		ser = protowire.AppendTag(ser, 2, protowire.BytesType)
		ser = protowire.AppendBytes(ser, protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), raw))
		req := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), ser)
		res, err := http.Post(srv.URL+"/push.v1.PusherService/Push", "application/proto", bytes.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "invalid UTF-8") {
			t.Errorf("label %q=%q: HTTP %d %s", bad[0], bad[1], res.StatusCode, body)
		}
	}
}

// The agent reads a server's clock from its responses' Date headers (to
// drop what its ingestion window no longer takes): the stand-in's answers,
// push and query, errors and refusals included, carry its own clock's.
func TestDateIsTheServersClock(t *testing.T) {
	srv := httptest.NewServer(New(WithClock(func() time.Time { return now })).Handler())
	defer srv.Close()
	for _, path := range []string{"/push.v1.PusherService/Push", "/querier.v1.QuerierService/LabelNames"} {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.Header.Get("Date"), now.Format(http.TimeFormat); got != want {
			t.Errorf("%s: Date %q, want %q (the stand-in's clock, not the host's)", path, got, want)
		}
	}
}
