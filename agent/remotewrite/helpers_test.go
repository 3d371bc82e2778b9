package remotewrite

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/spool"
)

// ceiling bounds every wait in these tests. It is a guard against hangs,
// not a performance assertion: a passing run never comes near it.
const ceiling = 30 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(ceiling)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %v", what, ceiling)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// request is what the receiver saw in one POST.
type request struct {
	header http.Header
	series []TimeSeries
	status int // what the receiver answered
}

// receiver is a remote-write receiver that decodes snappy and protobuf as
// Prometheus does and records every request. respond picks the status for
// each request (nil: 204).
type receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []request
	respond  func(n int, series []TimeSeries) int
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) url() string { return r.srv.URL + "/api/v1/write" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "want POST", http.StatusMethodNotAllowed)
		return
	}
	raw, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pb, err := snappy.Decode(nil, raw)
	if err != nil {
		http.Error(w, "snappy: "+err.Error(), http.StatusBadRequest)
		return
	}
	series, err := UnmarshalWriteRequest(pb)
	if err != nil {
		http.Error(w, "protobuf: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	status := http.StatusNoContent
	if r.respond != nil {
		status = r.respond(len(r.requests), series)
	}
	r.requests = append(r.requests, request{header: req.Header.Clone(), series: series, status: status})
	r.mu.Unlock()
	if status/100 != 2 {
		http.Error(w, "test receiver says no", status)
		return
	}
	w.WriteHeader(status)
}

func (r *receiver) setRespond(f func(n int, series []TimeSeries) int) {
	r.mu.Lock()
	r.respond = f
	r.mu.Unlock()
}

func (r *receiver) all() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.requests...)
}

// accepted returns the series of the requests answered 2xx, in order.
func (r *receiver) accepted() []TimeSeries {
	var out []TimeSeries
	for _, q := range r.all() {
		if q.status/100 == 2 {
			out = append(out, q.series...)
		}
	}
	return out
}

func openSpool(t *testing.T, dir string, bound int64) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(dir, bound, spool.WithoutFsync(), spool.WithLogger(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testConfig is a Config with fast retries and gathers only when asked:
// Run gathers at start and at stop, and tests call CollectOnce in between.
func testConfig(url string) Config {
	return Config{
		Config:     httpclient.Config{URL: url},
		Interval:   time.Hour,
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		FlushTimeout: 5 * time.Second,
	}
}

// fakeClock hands out strictly increasing times, one second apart.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func tempSpoolDir(t *testing.T) string { return filepath.Join(t.TempDir(), "spool") }
