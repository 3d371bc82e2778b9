package query

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

// These tests run the engine against the Pyroscope stand-in, which keeps
// the real server's time semantics and limits (its own tests pin them).

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// counting is the real Pyroscope client, counting its calls.
type counting struct {
	*backends.Pyroscope
	calls atomic.Int64
}

func (c *counting) MergeStacktraces(ctx context.Context, pt, sel string, start, end time.Time, maxNodes int64) (*querierv1.FlameGraph, error) {
	c.calls.Add(1)
	return c.Pyroscope.MergeStacktraces(ctx, pt, sel, start, end, maxNodes)
}

func (c *counting) Diff(ctx context.Context, pt string, left, right backends.Selection, maxNodes int64) (*querierv1.FlameGraphDiff, error) {
	c.calls.Add(1)
	return c.Pyroscope.Diff(ctx, pt, left, right, maxNodes)
}

func (c *counting) SelectSeries(ctx context.Context, pt, sel string, groupBy []string, start, end time.Time, step time.Duration) ([]*typesv1.Series, error) {
	c.calls.Add(1)
	return c.Pyroscope.SelectSeries(ctx, pt, sel, groupBy, start, end, step)
}

func (c *counting) ProfileTypes(ctx context.Context, start, end time.Time) ([]*typesv1.ProfileType, error) {
	c.calls.Add(1)
	return c.Pyroscope.ProfileTypes(ctx, start, end)
}

var _ Profiles = (*counting)(nil)

type standin struct {
	url     string
	profile *counting
}

// newStandin serves a stand-in whose clock is now and that takes profiles
// from back to now - window.
func newStandin(t testing.TB, window time.Duration, opts ...pyrostandin.Option) standin {
	t.Helper()
	opts = append([]pyrostandin.Option{pyrostandin.WithClock(func() time.Time { return now }),
		pyrostandin.WithIngestionWindow(window, 10*time.Minute)}, opts...)
	srv := httptest.NewServer(pyrostandin.New(opts...).Handler())
	t.Cleanup(srv.Close)
	p, err := backends.NewPyroscope(backends.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return standin{srv.URL, &counting{Pyroscope: p}}
}

// prof is one pushed CPU profile.
type prof struct {
	at        time.Time
	job, host string
	stacks    map[string]int64 // "root;...;leaf" -> ns
}

func (s standin) push(t testing.TB, ps ...prof) {
	t.Helper()
	req := &pushv1.PushRequest{}
	for _, pr := range ps {
		req.Series = append(req.Series, pyrostandin.CPUSeries(pr.at, pr.stacks, schema.ServiceName, "job-"+pr.job,
			schema.JobID.Label, pr.job, schema.JobUser.Label, "u"+pr.job, schema.HostName.Label, pr.host))
	}
	c := pushv1connect.NewPusherServiceClient(http.DefaultClient, s.url)
	if _, err := c.Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
}

func jobScope(t testing.TB, f string) Scope {
	t.Helper()
	c, err := filter.Compile(f)
	if err != nil {
		t.Fatal(err)
	}
	return Scope{Filter: c}
}

func seriesTotal(ss []Series) (n float64) {
	for _, s := range ss {
		for _, v := range s.Values {
			n += v
		}
	}
	return n
}

// answers runs every Pyroscope query type over r and says what each saw.
func answers(t *testing.T, e *Engine, scope Scope, r Range) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr, err := e.FlameGraph(context.Background(), scope, CPUProfileType, r, 8192)
	if err != nil {
		t.Fatal(err)
	}
	out["flamegraph"] = fmt.Sprint(tr.Total())
	ss, err := e.ProfileSeries(context.Background(), scope, CPUProfileType, []schema.Attribute{schema.HostName}, r)
	if err != nil {
		t.Fatal(err)
	}
	out["profileSeries"] = fmt.Sprint(seriesTotal(ss))
	top, err := e.TopEntities(context.Background(), scope, schema.JobID, ByCPUTime, r, 0)
	if err != nil {
		t.Fatal(err)
	}
	out["topEntities"] = fmt.Sprint(top)
	vs, err := e.AttributeValues(context.Background(), scope, schema.HostName, r)
	if err != nil {
		t.Fatal(err)
	}
	out["attributeValues"] = fmt.Sprint(vs)
	return out
}

// Every query type covers exactly [From, To): a window after the data
// sees nothing, and one that starts on a profile and ends on the next
// sees the first only.
func TestEveryQueryTypeCoversExactlyTheRange(t *testing.T) {
	s := newStandin(t, time.Hour)
	e := &Engine{Profiles: s.profile}
	base := now.Add(-45 * time.Minute)
	for i := 0; i < 10; i++ { // job 7 on n1, one profile a minute
		s.push(t, prof{base.Add(time.Duration(i) * time.Minute), "7", "n1", map[string]int64{"main;work": 1e9}})
	}
	scope := jobScope(t, `slurm.job.id == "7"`)
	after := Range{From: base.Add(10 * time.Minute), To: now, Step: 30 * time.Second}
	want := map[string]string{"flamegraph": "0", "profileSeries": "0", "topEntities": "[]", "attributeValues": "[]"}
	if got := answers(t, e, scope, after); !reflect.DeepEqual(got, want) {
		t.Errorf("a window after the data saw %v", got)
	}
	// [minute 2, minute 5): profiles 2, 3 and 4.
	mid := Range{From: base.Add(2 * time.Minute), To: base.Add(5 * time.Minute), Step: 7 * time.Second}
	want = map[string]string{"flamegraph": "3000000000", "profileSeries": "3e+09", "topEntities": "[{7 3e+09}]", "attributeValues": "[n1]"}
	if got := answers(t, e, scope, mid); !reflect.DeepEqual(got, want) {
		t.Errorf("[minute 2, minute 5) saw %v, want %v", got, want)
	}
}

// Ranges over Pyroscope's max_query_length (a day) are split: a job of 7
// days answers every query type, summed over its chunks.
func TestAWeekIsSplitIntoDays(t *testing.T) {
	s := newStandin(t, 8*24*time.Hour)
	e := &Engine{Profiles: s.profile}
	var ps []prof
	for h := 0; h < 7*24; h += 5 {
		ps = append(ps, prof{now.Add(-time.Duration(h)*time.Hour - time.Minute), "9", []string{"a", "b"}[h%2], map[string]int64{"main;work": 1e9}})
	}
	s.push(t, ps...)
	week := Range{From: now.Add(-7 * 24 * time.Hour), To: now, Step: 6048 * time.Second}
	scope := jobScope(t, `slurm.job.id == "9"`)
	total := fmt.Sprint(int64(len(ps)) * 1e9)
	want := map[string]string{"flamegraph": total, "profileSeries": fmt.Sprint(float64(len(ps)) * 1e9),
		"topEntities": fmt.Sprintf("[{9 %v}]", float64(len(ps))*1e9), "attributeValues": "[a b]"}
	s.profile.calls.Store(0)
	if got := answers(t, e, scope, week); !reflect.DeepEqual(got, want) {
		t.Errorf("a week saw %v, want %v", got, want)
	}
	// flamegraph 7, profileSeries 8, topEntities 7, attributeValues 7 + 7
	// for the profile types.
	if n := s.profile.calls.Load(); n != 36 {
		t.Errorf("%d calls for the four queries over a week", n)
	}
	pts, err := e.ProfileTypes(context.Background(), week)
	if err != nil || len(pts) != 1 || pts[0].ID != CPUProfileType {
		t.Errorf("profile types over a week: %v %v", pts, err)
	}
}

// A query needing more calls than MaxCalls fails, saying why, before it
// sends anything.
func TestFanOutCap(t *testing.T) {
	s := newStandin(t, time.Hour)
	e := &Engine{Profiles: s.profile, MaxCalls: 20}
	// Five disjoint selectors over three days: 15 flame graph calls fit,
	// and 20 for the series (three days of 60 s steps: 3 calls and a last
	// point); six selectors' series do not.
	r := Range{From: now.Add(-72 * time.Hour), To: now, Step: time.Minute}
	five := jobScope(t, `host.name == "a" || slurm.job.id == "1" || slurm.job.user == "x" || slurm.job.name == "n" || slurm.job.account == "c"`)
	if _, err := e.FlameGraph(context.Background(), five, CPUProfileType, r, 0); err != nil {
		t.Errorf("15 calls: %v", err)
	}
	if _, err := e.ProfileSeries(context.Background(), five, CPUProfileType, nil, r); err != nil {
		t.Errorf("20 calls: %v", err)
	}
	six := jobScope(t, `host.name == "a" || slurm.job.id == "1" || slurm.job.user == "x" || slurm.job.name == "n" || slurm.job.account == "c" || slurm.job.partition == "p"`)
	s.profile.calls.Store(0)
	_, err := e.ProfileSeries(context.Background(), six, CPUProfileType, nil, r)
	want := "too many backend calls: this query needs 24 Pyroscope calls (6 selector(s) × 4 time chunk(s) of at most 24h0m0s), over the limit of 20 per query"
	if !errors.Is(err, ErrTooManyCalls) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("24 calls: %v", err)
	}
	if n := s.profile.calls.Load(); n != 0 {
		t.Errorf("the refused query still made %d calls", n)
	}
}

// With one call, the flame graph is the server's as it came: Pyroscope
// keeps every node tied at its cutoff, and those are not cut again.
func TestOneCallKeepsTheServersTree(t *testing.T) {
	s := newStandin(t, time.Hour)
	e := &Engine{Profiles: s.profile}
	stacks := map[string]int64{}
	for i := 0; i < 100; i++ {
		stacks[fmt.Sprintf("main;leaf%03d", i)] = 1e7
	}
	for i := 0; i < 10; i++ {
		stacks[fmt.Sprintf("main;big%d", i)] = 5e7
	}
	s.push(t, prof{now.Add(-time.Minute), "3", "n1", stacks})
	r := Range{From: now.Add(-time.Hour), To: now}
	sel := "{" + schema.JobID.Label + `="3"}`
	raw, err := s.profile.Pyroscope.MergeStacktraces(context.Background(), CPUProfileType, sel, r.From, r.To.Add(-time.Millisecond), 50)
	if err != nil {
		t.Fatal(err)
	}
	server, err := flame.FromFlamegraphs(raw)
	if err != nil {
		t.Fatal(err)
	}
	if server.Len() <= 51 {
		t.Fatalf("the server kept %d nodes at max_nodes 50: no ties to keep", server.Len())
	}
	got, err := e.FlameGraph(context.Background(), jobScope(t, `slurm.job.id == "3"`), CPUProfileType, r, 50)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != server.Len() || !reflect.DeepEqual(got.Flamegraph(), server.Flamegraph()) {
		t.Errorf("the engine's graph has %d nodes, the server's %d", got.Len(), server.Len())
	}
}

// Values come from profiles in the range, not from the blocks Pyroscope's
// LabelValues reads: job 5's node of 50 minutes ago is not offered for
// the last 10 minutes.
func TestValuesAreThoseInTheRange(t *testing.T) {
	s := newStandin(t, time.Hour)
	e := &Engine{Profiles: s.profile}
	s.push(t, prof{now.Add(-50 * time.Minute), "5", "n-old", map[string]int64{"main": 1e9}},
		prof{now.Add(-5 * time.Minute), "5", "n1", map[string]int64{"main": 1e9}},
		prof{now.Add(-5 * time.Minute), "6", "n2", map[string]int64{"main": 1e9}})
	r := Range{From: now.Add(-10 * time.Minute), To: now}
	hosts, err := e.AttributeValues(context.Background(), jobScope(t, `slurm.job.id == "5"`), schema.HostName, r)
	if err != nil || !reflect.DeepEqual(hosts, []string{"n1"}) {
		t.Errorf("job 5's hosts in the last 10 minutes: %v %v", hosts, err)
	}
	jobs, err := e.AttributeValues(context.Background(), Scope{}, schema.JobID, Range{From: now.Add(-time.Hour), To: now.Add(-30 * time.Minute)})
	if err != nil || !reflect.DeepEqual(jobs, []string{"5"}) {
		t.Errorf("jobs an hour ago: %v %v", jobs, err)
	}
}
