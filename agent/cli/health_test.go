package cli

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

func serve(h http.Handler, method, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// TestMetricsMuxEndpoints: /-/healthy answers while the process serves,
// /-/ready only once the agent is ready, "/" points at /metrics, and any
// other path is not found.
func TestMetricsMuxEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	var ready atomic.Bool
	mux := metricsMux(reg, reg, ready.Load)
	check := func(method, path string, code int, body string) {
		t.Helper()
		got, b := serve(mux, method, path)
		if got != code || !strings.Contains(b, body) {
			t.Errorf("%s %s: %d %q, want %d with %q", method, path, got, b, code, body)
		}
	}
	check("GET", "/-/healthy", 200, "OK")
	check("HEAD", "/-/healthy", 200, "")
	check("GET", "/-/ready", 503, "not ready")
	check("GET", "/", 200, "see /metrics")
	check("GET", "/metrics", 200, "promhttp_metric_handler")
	for _, p := range []string{"/nope", "/metrics/x", "/-/", "/-/readyz", "/debug/pprof/"} {
		check("GET", p, 404, "")
	}
	ready.Store(true)
	check("GET", "/-/ready", 200, "OK")
	check("GET", "/-/healthy", 200, "OK")

	// Without a readiness report the server never claims to be ready.
	if code, _ := serve(metricsMux(reg, reg, nil), "GET", "/-/ready"); code != 503 {
		t.Errorf("nil readiness: /-/ready %d, want 503", code)
	}
}

// TestRunFlagsShareReadiness: what run stores in its copy of the flags is
// what the metrics server it opens answers on /-/ready.
func TestRunFlagsShareReadiness(t *testing.T) {
	_, f := runFlagSet(t)
	var srv *metricsServer
	for _, k := range f.services {
		if m, ok := k.(*metricsServer); ok {
			srv = m
		}
	}
	if srv == nil || srv.ready == nil {
		t.Fatal("the metrics server has no readiness report")
	}
	copied := *f // run takes its flags by value
	if srv.ready() {
		t.Fatal("ready before anything ran")
	}
	copied.ready.Store(true)
	if !srv.ready() {
		t.Error("the metrics server does not see run's readiness")
	}
}

// TestFirstIntervalWrite: the first successful Write of the sinks makes
// the agent ready; a failed one does not, nor does an empty interval after
// it, until a Write succeeds.
func TestFirstIntervalWrite(t *testing.T) {
	var ready atomic.Bool
	first := &firstInterval{ready: &ready, clock: time.Now}
	s := &fakeSink{err: errors.New("disk full")}
	sink := first.sink(s)
	first.now() // daemon.New
	first.now() // Collect 1
	if ready.Load() {
		t.Fatal("ready before any interval ended")
	}
	if err := sink.Write(context.Background(), []daemon.Output{{}}); err == nil {
		t.Fatal("the sink's error was lost")
	}
	first.now() // Collect 2: nothing to write
	first.now() // Collect 3
	if ready.Load() {
		t.Fatal("ready though the only Write failed")
	}
	s.err = nil
	if err := sink.Write(context.Background(), []daemon.Output{{}}); err != nil {
		t.Fatal(err)
	}
	if !ready.Load() {
		t.Error("not ready after a successful Write")
	}
	if s.writes != 2 {
		t.Errorf("%d writes reached the sink, want 2", s.writes)
	}
}

// TestFirstIntervalIdle drives a real daemon: on a node where nothing is
// profiled, no interval is written, and the agent is ready once the first
// interval has ended, i.e. when the second begins. This also checks what
// firstInterval assumes of the daemon: one clock read when made, one as
// each Collect begins.
func TestFirstIntervalIdle(t *testing.T) {
	var ready atomic.Bool
	first := &firstInterval{ready: &ready, clock: time.Now}
	s := &fakeSink{}
	d := daemon.New(daemon.Config{Interval: time.Hour, Now: first.now},
		[]source.Source{idleSource{}}, nopSym{}, nopRes{}, first.sink(s))
	if ready.Load() {
		t.Fatal("ready before the first interval")
	}
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ready.Load() {
		t.Fatal("ready while the first interval may still be collecting")
	}
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !ready.Load() {
		t.Error("not ready after an idle first interval")
	}
	if s.writes != 0 {
		t.Errorf("%d writes of nothing", s.writes)
	}
}

type fakeSink struct {
	err    error
	writes int
}

func (s *fakeSink) Write(context.Context, []daemon.Output) error {
	s.writes++
	return s.err
}

type idleSource struct{}

func (idleSource) Info() source.Info {
	return source.Info{Name: "idle",
		Drained:      prometheus.NewCounter(prometheus.CounterOpts{Name: "idle_drained"}),
		Unattributed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idle_unattributed"}, []string{"reason"})}
}

func (idleSource) Drain() (source.Batch, error) { return source.Batch{}, nil }

type nopSym struct{}

func (nopSym) User(procfs.ID, []uint64) []symbolize.Frame { return nil }
func (nopSym) Kernel([]uint64) []symbolize.Frame          { return nil }
func (nopSym) Prepare(procfs.ID)                          {}
func (nopSym) Forget(procfs.ID)                           {}

type nopRes struct{}

func (nopRes) Cached(procfs.ID) (attribution.Process, bool) { return attribution.Process{}, false }
func (nopRes) Resolve(int) (attribution.Process, error) {
	return attribution.Process{}, errors.New("no process")
}
func (nopRes) Scan() ([]attribution.Process, error)    { return nil, nil }
func (nopRes) Refresh() ([]attribution.Process, error) { return nil, nil }
