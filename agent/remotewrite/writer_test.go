package remotewrite

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/schema"
)

// step is a gauge whose value the test sets before each CollectOnce, so that
// every request can be told apart by the value it carries.
type step struct {
	reg   *prometheus.Registry
	gauge prometheus.Gauge
}

func newStep() *step {
	s := &step{reg: prometheus.NewRegistry()}
	s.gauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "step", Help: "h"})
	s.reg.MustRegister(s.gauge)
	return s
}

// values returns the step values of series, in order.
func values(series []TimeSeries) []float64 {
	var out []float64
	for _, s := range series {
		for _, smp := range s.Samples {
			out = append(out, smp.Value)
		}
	}
	return out
}

func newWriter(t *testing.T, cfg Config, sp *spool.Spool, g prometheus.Gatherer) *Writer {
	t.Helper()
	w, err := New(cfg, sp, g, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	w.now = newFakeClock().now
	return w
}

// start runs w until the returned stop is called; stop waits for Run.
func start(t *testing.T, w *Writer) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(ceiling):
				t.Errorf("Run did not stop within %v", ceiling)
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestDeliversWithHeadersAndCredentials(t *testing.T) {
	rcv := newReceiver(t)
	dir := t.TempDir()
	pw := filepath.Join(dir, "password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(rcv.url())
	cfg.Tenant = "team-a"
	cfg.BasicAuthUser, cfg.BasicAuthPasswordFile = "agent", pw
	cfg.ExternalLabels = map[string]string{schema.HostName.Label: "node-1"}
	st := newStep()
	st.gauge.Set(1)
	w := newWriter(t, cfg, openSpool(t, tempSpoolDir(t), 1<<20), st.reg)
	stop := start(t, w)
	waitFor(t, "the first request", func() bool { return len(rcv.accepted()) > 0 })

	q := rcv.all()[0]
	for k, v := range map[string]string{
		"Content-Encoding":                  "snappy",
		"Content-Type":                      "application/x-protobuf",
		"X-Prometheus-Remote-Write-Version": "0.1.0",
		"User-Agent":                        "slurmscope-agent",
		TenantHeader:                        "team-a",
	} {
		if got := q.header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if u, p, ok := (&http.Request{Header: q.header}).BasicAuth(); !ok || u != "agent" || p != "s3cret" {
		t.Errorf("basic auth = %q, %q, %v", u, p, ok)
	}
	if got, want := render(q.series), fmt.Sprintf("__name__=\"step\",%s=\"node-1\" 1@1767323046000\n", schema.HostName.Label); got != want {
		t.Errorf("got %s want %s", got, want)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s := w.Stats()
	if s.RequestsSent != 2 || s.SamplesSent != 2 || s.SpoolRequests != 0 || s.BytesSent == 0 {
		// Two requests: the gather at start and the one at stop.
		t.Errorf("stats after stop: %+v", s)
	}
}

// TestBadCredentialsFileIsRetryable: a secret file that goes bad is an
// "auth" problem that an operator's fix resolves, so the request is kept.
// Rotation and the file checks are tested in agent/httpclient.
func TestBadCredentialsFileIsRetryable(t *testing.T) {
	rcv := newReceiver(t)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(rcv.url())
	cfg.BearerTokenFile = tok
	w := newWriter(t, cfg, openSpool(t, tempSpoolDir(t), 1<<20), newStep().reg)
	body, _, _ := decodeEntry(must(encodeEntry(nil)))
	if err := w.client.send(context.Background(), body); err != nil {
		t.Fatal(err)
	}
	if got := rcv.all()[0].header.Get("Authorization"); got != "Bearer one" {
		t.Errorf("Authorization %q", got)
	}
	if err := os.WriteFile(tok, []byte("bad\ntoken"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := w.client.send(context.Background(), body)
	var se *SendError
	if !errors.As(err, &se) || !se.Retryable || se.Reason != "auth" ||
		!strings.HasPrefix(se.Err.Error(), "remote write credentials: ") || !strings.Contains(err.Error(), "control characters") {
		t.Errorf("a token with a newline: %v", err)
	}
	if n := len(rcv.all()); n != 1 {
		t.Errorf("%d requests reached the receiver, want 1", n)
	}
}

func must(b []byte, _ int) []byte { return b }

func TestClassification(t *testing.T) {
	var status int
	var retryAfter string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		if status/100 == 3 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte("why:\nbecause"))
	}))
	defer srv.Close()
	c, err := newClient(Config{Config: httpclient.Config{URL: srv.URL, Timeout: ceiling}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status    int
		retryable bool
		reason    string
	}{
		{200, false, ""}, {204, false, ""},
		{500, true, "unavailable"}, {502, true, "unavailable"}, {503, true, "unavailable"},
		{429, true, "rate_limited"}, {408, true, "timeout"},
		{401, true, "auth"}, {403, true, "auth"},
		{400, false, "rejected"}, {404, false, "rejected"}, {409, false, "rejected"}, {413, false, "rejected"},
		{301, false, "rejected"}, {307, false, "rejected"},
	} {
		status = tc.status
		err := c.send(context.Background(), []byte{0})
		if tc.reason == "" {
			if err != nil {
				t.Errorf("%d: %v", tc.status, err)
			}
			continue
		}
		var se *SendError
		if !errors.As(err, &se) || se.Retryable != tc.retryable || se.Reason != tc.reason || se.HTTPStatus != tc.status {
			t.Errorf("%d: got %#v, want retryable=%v reason=%s", tc.status, err, tc.retryable, tc.reason)
			continue
		}
		if strings.Contains(se.Error(), "\n") {
			t.Errorf("%d: the error must be one line: %q", tc.status, se.Error())
		}
		if tc.status/100 == 3 && !strings.Contains(se.Error(), "/elsewhere") {
			t.Errorf("%d: a redirect must say where to: %v", tc.status, se)
		}
	}

	status, retryAfter = 429, "7"
	var se *SendError
	if err := c.send(context.Background(), []byte{0}); !errors.As(err, &se) || se.RetryAfter != 7*time.Second {
		t.Errorf("Retry-After: %v", err)
	}
	// The HTTP-date form too (its parsing is tested in agent/httpclient).
	retryAfter = time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	if err := c.send(context.Background(), []byte{0}); !errors.As(err, &se) || se.RetryAfter <= 20*time.Second || se.RetryAfter > 30*time.Second {
		t.Errorf("Retry-After %s: %v", retryAfter, err)
	}
	retryAfter = ""

	// No server at all: a connection error is retryable.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, _ = newClient(Config{Config: httpclient.Config{URL: "http://" + addr + "/api/v1/write", Timeout: ceiling}})
	if err := c.send(context.Background(), []byte{0}); !IsRetryable(err) {
		t.Errorf("connection refused must be retryable: %v", err)
	}
	if IsRetryable(nil) || !IsRetryable(errors.New("unclassified")) {
		t.Error("IsRetryable: nil is not, unclassified errors are")
	}
}

func TestConfigErrors(t *testing.T) {
	sp := openSpool(t, tempSpoolDir(t), 1<<20)
	reg := prometheus.NewRegistry()
	missing := filepath.Join(t.TempDir(), "missing")
	for name, cfg := range map[string]Config{
		"no URL":            {},
		"bad scheme":        {Config: httpclient.Config{URL: "ftp://x/y"}},
		"no host":           {Config: httpclient.Config{URL: "http:///api/v1/write"}},
		"both auths":        {Config: httpclient.Config{URL: "http://x", BasicAuthUser: "u", BasicAuthPasswordFile: missing, BearerTokenFile: missing}},
		"user, no password": {Config: httpclient.Config{URL: "http://x", BasicAuthUser: "u"}},
		"missing token":     {Config: httpclient.Config{URL: "http://x", BearerTokenFile: missing}},
		"half a cert":       {Config: httpclient.Config{URL: "https://x", TLS: TLSConfig{CertFile: missing}}},
		"missing CA":        {Config: httpclient.Config{URL: "https://x", TLS: TLSConfig{CAFile: missing}}},
		"bad external":      {Config: httpclient.Config{URL: "http://x"}, ExternalLabels: map[string]string{"": "v"}},
	} {
		if _, err := New(cfg, sp, reg, nil); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		} else if !strings.HasPrefix(err.Error(), "remote write") {
			t.Errorf("%s: the error must name remote write: %v", name, err)
		}
	}
	if _, err := New(Config{Config: httpclient.Config{URL: "http://x"}}, nil, reg, nil); err == nil {
		t.Error("New accepted a nil spool")
	}
}

// TestRetriesHeadOfLineInOrder: while the receiver fails, the oldest request
// is retried and nothing behind it overtakes it.
func TestRetriesHeadOfLineInOrder(t *testing.T) {
	rcv := newReceiver(t)
	const failures = 5
	rcv.setRespond(func(n int, _ []TimeSeries) int {
		if n < failures {
			return []int{503, 429, 500, 502, 503}[n]
		}
		return 204
	})
	st := newStep()
	sp := openSpool(t, tempSpoolDir(t), 1<<20)
	w := newWriter(t, testConfig(rcv.url()), sp, st.reg)
	// Queue three requests before the shipper runs, then one at start
	// and one at stop.
	for i := 1; i <= 3; i++ {
		st.gauge.Set(float64(i))
		w.CollectOnce()
	}
	st.gauge.Set(4)
	stop := start(t, w)
	waitFor(t, "four requests delivered", func() bool { return len(rcv.accepted()) == 4 })
	st.gauge.Set(5)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	all := rcv.all()
	for i := 0; i <= failures; i++ {
		// Every failed attempt and the first success carry request 1.
		if got := values(all[i].series); len(got) != 1 || got[0] != 1 {
			t.Fatalf("attempt %d carried %v, want the head request [1]", i, got)
		}
	}
	if got := values(rcv.accepted()); !equal(got, []float64{1, 2, 3, 4, 5}) {
		t.Errorf("delivered %v, want 1..5 in order", got)
	}
	var last int64
	for _, s := range rcv.accepted() {
		if s.Samples[0].Timestamp <= last {
			t.Errorf("timestamps not increasing: %d after %d", s.Samples[0].Timestamp, last)
		}
		last = s.Samples[0].Timestamp
	}
	if s := w.Stats(); s.Retries != failures || s.RequestsSent != 5 || s.LastError != "" || s.Dropped[DropRejected] != 0 {
		t.Errorf("stats: %+v", s)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRejectedIsDroppedOnce: a 400 drops that request (sent once, counted
// once) and delivery goes on with the next.
func TestRejectedIsDroppedOnce(t *testing.T) {
	rcv := newReceiver(t)
	rcv.setRespond(func(_ int, series []TimeSeries) int {
		if v := values(series); len(v) == 1 && v[0] == 2 {
			return http.StatusBadRequest
		}
		return 204
	})
	st := newStep()
	w := newWriter(t, testConfig(rcv.url()), openSpool(t, tempSpoolDir(t), 1<<20), st.reg)
	for i := 1; i <= 3; i++ {
		st.gauge.Set(float64(i))
		w.CollectOnce()
	}
	stop := start(t, w) // gathers 3 again at start
	waitFor(t, "three requests delivered", func() bool { return len(rcv.accepted()) == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	sent2 := 0
	for _, q := range rcv.all() {
		if v := values(q.series); v[0] == 2 {
			sent2++
		}
	}
	if sent2 != 1 {
		t.Errorf("the rejected request was sent %d times, want once", sent2)
	}
	if got := values(rcv.accepted()); !equal(got, []float64{1, 3, 3, 3}) {
		t.Errorf("delivered %v, want [1 3 3 3]", got)
	}
	s := w.Stats()
	if s.Dropped[DropRejected] != 1 || s.Retries != 0 {
		t.Errorf("stats: %+v", s)
	}
	checkExportedDrops(t, w, map[string]int{DropRejected: 1})
}

// checkExportedDrops compares the exported dropped_requests_total with want
// (reasons not in want are 0).
func checkExportedDrops(t *testing.T, w *Writer, want map[string]int) {
	t.Helper()
	const name = "slurmscope_remote_write_dropped_requests_total"
	var b strings.Builder
	fmt.Fprintf(&b, "# HELP %s Remote-write requests dropped, by reason.\n# TYPE %s counter\n", name, name)
	for _, r := range dropReasons {
		fmt.Fprintf(&b, "%s{reason=%q} %d\n", name, r, want[r])
	}
	if err := testutil.CollectAndCompare(NewCollector(w), strings.NewReader(b.String()), name); err != nil {
		t.Error(err)
	}
}

// TestSpoolFullDropsOldestAndCounts: with the receiver down, a small spool
// keeps the newest requests, and every eviction is counted.
func TestSpoolFullDropsOldestAndCounts(t *testing.T) {
	rcv := newReceiver(t)
	st := newStep()
	entry, _ := encodeEntry([]TimeSeries{{Labels: []Label{{MetricNameLabel, "step"}}, Samples: []Sample{{1, 1}}}})
	entrySize := int64(len(entry)) + 12 // spool header
	const keep = 4
	sp := openSpool(t, tempSpoolDir(t), keep*entrySize+entrySize/2)
	w := newWriter(t, testConfig(rcv.url()), sp, st.reg)
	const total = 10
	for i := 1; i <= total; i++ {
		st.gauge.Set(float64(i))
		w.CollectOnce()
	}
	s := w.Stats()
	if s.SpoolRequests != keep || s.Dropped[DropSpoolFull] != total-keep {
		t.Fatalf("after %d gathers into room for %d: %+v", total, keep, s)
	}
	checkExportedDrops(t, w, map[string]int{DropSpoolFull: total - keep})
	// Run gathers once more before it ships, evicting one more.
	st.gauge.Set(total + 1)
	stop := start(t, w)
	waitFor(t, "the spool to drain", func() bool { return len(rcv.accepted()) == keep })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The newest survived, in order, then the gather at stop.
	if got := values(rcv.accepted()); !equal(got, []float64{8, 9, 10, 11, 11}) {
		t.Errorf("delivered %v, want [8 9 10 11 11]", got)
	}
	checkExportedDrops(t, w, map[string]int{DropSpoolFull: total - keep + 1})
}

// TestTooLargeIsCounted: a request bigger than the whole spool is refused
// and counted, never silently lost.
func TestTooLargeIsCounted(t *testing.T) {
	st := newStep()
	w := newWriter(t, testConfig("http://127.0.0.1:1/api/v1/write"), openSpool(t, tempSpoolDir(t), 20), st.reg)
	w.CollectOnce()
	if s := w.Stats(); s.Dropped[DropTooLarge] != 1 || s.SpoolRequests != 0 {
		t.Errorf("stats: %+v", s)
	}
}

// TestRestartReplaysTheSpool: what an agent could not deliver before it
// stopped is delivered, first and in order, by the next one.
func TestRestartReplaysTheSpool(t *testing.T) {
	dir := tempSpoolDir(t)
	st := newStep()

	// First run: the receiver is unreachable the whole time.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() + "/api/v1/write"
	l.Close()
	sp1 := openSpool(t, dir, 1<<20)
	w1 := newWriter(t, testConfig(down), sp1, st.reg)
	clock := newFakeClock()
	w1.now = clock.now
	st.gauge.Set(1)
	stop := start(t, w1)
	waitFor(t, "the gather at start", func() bool { return sp1.Stats().Appended == 1 })
	for i := 2; i <= 4; i++ {
		st.gauge.Set(float64(i))
		w1.CollectOnce()
	}
	waitFor(t, "a retry", func() bool { return w1.Stats().Retries > 0 })
	st.gauge.Set(5)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := w1.Stats().SpoolRequests; n != 5 {
		t.Fatalf("%d requests left in the spool, want 5", n)
	}
	sp1.Close()

	// Second run, same spool directory, receiver up.
	rcv := newReceiver(t)
	w2 := newWriter(t, testConfig(rcv.url()), openSpool(t, dir, 1<<20), st.reg)
	w2.now = clock.now // the clock goes on, as a wall clock would
	st.gauge.Set(6)
	stop = start(t, w2)
	waitFor(t, "the gather at start", func() bool { return w2.spool.Stats().Appended == 1 })
	waitFor(t, "the replay", func() bool { return len(rcv.accepted()) >= 6 })
	st.gauge.Set(7)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := values(rcv.accepted()); !equal(got, []float64{1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("delivered %v, want 1..7 in order", got)
	}
	if s := w2.Stats(); s.SpoolRequests != 0 || s.SamplesSent != 7 {
		t.Errorf("stats: %+v", s)
	}
}

// TestCorruptEntryIsDroppedAndCounted: junk in the spool (a foreign entry,
// a bit flip the spool's checksum cannot see) is dropped, not retried.
func TestCorruptEntryIsDroppedAndCounted(t *testing.T) {
	rcv := newReceiver(t)
	sp := openSpool(t, tempSpoolDir(t), 1<<20)
	for _, junk := range [][]byte{[]byte("not ours"), {'R', 'W', 1, 1, 0xff, 0xff, 0xff, 0xff, 0x7f}} {
		if err := sp.Append(junk); err != nil {
			t.Fatal(err)
		}
	}
	st := newStep()
	st.gauge.Set(1)
	w := newWriter(t, testConfig(rcv.url()), sp, st.reg)
	stop := start(t, w)
	waitFor(t, "a delivery", func() bool { return len(rcv.accepted()) > 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := w.Stats(); s.Dropped[DropCorrupt] != 2 {
		t.Errorf("stats: %+v", s)
	}
	for _, q := range rcv.all() {
		if len(q.series) == 0 {
			t.Error("junk reached the receiver")
		}
	}
}

// TestStopFlushIsBounded: stopping while the receiver hangs returns within
// the flush timeout and keeps the data for the next start.
func TestStopFlushIsBounded(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	defer close(release)
	cfg := testConfig(srv.URL)
	cfg.FlushTimeout = 50 * time.Millisecond
	st := newStep()
	w := newWriter(t, cfg, openSpool(t, tempSpoolDir(t), 1<<20), st.reg)
	stop := start(t, w)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := w.Stats(); s.SpoolRequests != 2 || s.RequestsSent != 0 {
		t.Errorf("stats: %+v", s)
	}
}

func TestRunTwiceAndClosedSpool(t *testing.T) {
	rcv := newReceiver(t)
	sp := openSpool(t, tempSpoolDir(t), 1<<20)
	w := newWriter(t, testConfig(rcv.url()), sp, newStep().reg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	// Once the gather at start is delivered, the shipper waits on the spool.
	waitFor(t, "the first delivery", func() bool { return w.Stats().RequestsSent == 1 })
	if err := w.Run(context.Background()); err == nil {
		t.Error("a second Run must fail")
	}
	sp.Close()
	// The shipper sees the closed spool, and Run ends on its own.
	select {
	case err := <-done:
		if !errors.Is(err, spool.ErrClosed) {
			t.Errorf("Run returned %v, want the spool's ErrClosed", err)
		}
	case <-time.After(ceiling):
		t.Fatal("Run did not notice the closed spool")
	}
}

func TestCollectorLints(t *testing.T) {
	w := newWriter(t, testConfig("http://x/api/v1/write"), openSpool(t, tempSpoolDir(t), 1<<20), newStep().reg)
	c := NewCollector(w)
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	// 4 counters, 5 drop reasons, 2 more counters, 2 gauges.
	if n := testutil.CollectAndCount(c); n != 13 {
		t.Errorf("%d metrics, want 13", n)
	}
}

// A restarted writer must not stamp a sample at or before one its
// predecessor spooled, even if the clock says the same millisecond.
func TestTimestampsIncreaseAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	g := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "restart_test_total", Help: "x"})
	g.MustRegister(c)
	frozen := func() time.Time { return time.UnixMilli(1_700_000_000_000) }
	var last int64
	for run := 0; run < 3; run++ {
		sp := openSpool(t, dir, 1<<20)
		w, err := New(Config{Config: httpclient.Config{URL: "http://127.0.0.1:1/api/v1/write"}}, sp, g, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		w.now = frozen
		w.CollectOnce()
		if w.lastTS <= last {
			t.Fatalf("run %d stamped %d, not after the previous run's %d", run, w.lastTS, last)
		}
		last = w.lastTS
		sp.Close()
	}
}
