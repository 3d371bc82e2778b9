package ship

import (
	"github.com/slurmscope/slurmscope/schema"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/ship/shiptest"
	"github.com/slurmscope/slurmscope/agent/spool"
)

// ceiling bounds every wait: a guard against hangs, not a performance
// assertion.
const ceiling = 30 * time.Second

var quiet = slog.New(slog.DiscardHandler)

// fakeSender is a backend written by hand. Entries are strings: "bad..."
// does not decode, "old..." is dropped at decode with reason too_old. send
// decides each attempt (nil: delivered).
type fakeSender struct {
	mu       sync.Mutex
	attempts []string
	send     func(ctx context.Context, req string, attempt int) error
}

var _ Sender[string] = (*fakeSender)(nil)

func (f *fakeSender) Decode(p []byte) (string, Size, error) {
	switch s := string(p); {
	case strings.HasPrefix(s, "bad"):
		return "", Size{}, errors.New("not an entry")
	case strings.HasPrefix(s, "old"):
		return "", Size{}, Drop("too_old", errors.New("older than the server keeps"))
	default:
		return s, Size{Bytes: len(p), Samples: 2}, nil
	}
}

func (f *fakeSender) Send(ctx context.Context, req string) error {
	f.mu.Lock()
	f.attempts = append(f.attempts, req)
	n := len(f.attempts)
	f.mu.Unlock()
	if f.send == nil {
		return nil
	}
	return f.send(ctx, req, n)
}

func (f *fakeSender) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.attempts...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(ceiling)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func openSpool(t *testing.T, max int64) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(t.TempDir(), max, spool.WithoutFsync(), spool.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return sp
}

func testOptions() Options {
	return Options{Name: "test", What: "things", Log: quiet,
		MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, FlushTimeout: ceiling}
}

// running is a Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start[R any](s *Shipper[R]) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	return r
}

// stop cancels Run and returns what it returned.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(ceiling):
		t.Fatal("Run did not stop")
		return nil
	}
}

func enqueue[R any](t *testing.T, s *Shipper[R], entries ...string) {
	t.Helper()
	for _, e := range entries {
		if err := s.Enqueue([]byte(e)); err != nil {
			t.Fatal(err)
		}
	}
}

// nonzero leaves out the reasons nothing was dropped for.
func nonzero(m map[string]uint64) map[string]uint64 {
	maps.DeleteFunc(m, func(_ string, v uint64) bool { return v == 0 })
	return m
}

// TestHeadOfLineInOrder: while the backend fails, the oldest entry is
// retried and nothing overtakes it; then everything arrives once, in order.
func TestHeadOfLineInOrder(t *testing.T) {
	f := &fakeSender{send: func(_ context.Context, _ string, n int) error {
		if n <= 4 {
			return &Error{Retryable: true, Reason: "unavailable", Err: errors.New("down")}
		}
		return nil
	}}
	s := New(openSpool(t, 1<<20), Sender[string](f), testOptions())
	enqueue(t, s, "a", "b", "c")
	r := start(s)
	waitFor(t, "three deliveries", func() bool { return s.Stats().Sent == 3 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(f.sent()); got != "[a a a a a b c]" {
		t.Errorf("attempts %s, want a five times, then b, c", got)
	}
	st := s.Stats()
	if st.Retries != 4 || st.SentBytes != 3 || st.SentSamples != 6 || st.SpoolEntries != 0 || st.LastError != "" || len(nonzero(st.Dropped)) != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestBackoffIsCappedAndGrows(t *testing.T) {
	s := New(openSpool(t, 1<<20), Sender[string](&fakeSender{}), Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 80 * time.Millisecond})
	for attempt := range 10 {
		want := min(10*time.Millisecond<<attempt, 80*time.Millisecond)
		for range 50 {
			if d := s.backoff(attempt); d < want/2 || d > want {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
}

// TestRetryAfter: a longer Retry-After replaces the backoff, capped at the
// largest backoff; a shorter one does not shorten it. The delays are the
// ones the shipper asks its timer for, not measured.
func TestRetryAfter(t *testing.T) {
	retryAfter := []time.Duration{7 * time.Second, time.Hour, time.Nanosecond, 0}
	f := &fakeSender{send: func(_ context.Context, _ string, n int) error {
		if n > len(retryAfter) {
			return nil
		}
		return &Error{Retryable: true, Reason: "rate_limited", HTTPStatus: 429, RetryAfter: retryAfter[n-1], Err: errors.New("slow down")}
	}}
	var timer shiptest.Delays
	o := testOptions()
	o.MinBackoff, o.MaxBackoff = time.Millisecond, time.Minute
	o.After = timer.After
	s := New(openSpool(t, 1<<20), Sender[string](f), o)
	enqueue(t, s, "a")
	r := start(s)
	waitFor(t, "the delivery", func() bool { return s.Stats().Sent == 1 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	delays := timer.Got()
	if len(delays) != 4 || delays[0] != 7*time.Second || delays[1] != time.Minute {
		t.Fatalf("delays %v, want 7s (Retry-After), 1m (Retry-After capped), then backoffs", delays)
	}
	// Attempts 2 and 3: the backoff of 4 ms and 8 ms, with jitter.
	if delays[2] < 2*time.Millisecond || delays[2] > 4*time.Millisecond || delays[3] < 4*time.Millisecond || delays[3] > 8*time.Millisecond {
		t.Errorf("delays %v: a short Retry-After must leave the backoff alone", delays)
	}
}

// TestSoftStopLetsTheRequestInFlightFinish: stopping does not cut the
// request in flight, so the backend that stores it is not sent it twice;
// what is queued behind it is flushed.
func TestSoftStopLetsTheRequestInFlightFinish(t *testing.T) {
	inFlight, release := make(chan struct{}), make(chan struct{})
	f := &fakeSender{send: func(ctx context.Context, req string, _ int) error {
		if req != "a" {
			return nil
		}
		close(inFlight)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	s := New(openSpool(t, 1<<20), Sender[string](f), testOptions())
	enqueue(t, s, "a", "b")
	r := start(s)
	<-inFlight
	r.cancel() // Run's context is done from here on
	close(release)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(f.sent()); got != "[a b]" {
		t.Errorf("attempts %s, want a once, then the flush of b", got)
	}
	if st := s.Stats(); st.Sent != 2 || st.SpoolEntries != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestHardStopAbandonsTheRequest: a backend that hangs holds the stop for
// the flush timeout only, and the entry stays for the next start.
func TestHardStopAbandonsTheRequest(t *testing.T) {
	for _, flush := range []time.Duration{20 * time.Millisecond, 0} {
		inFlight := make(chan struct{}, 1)
		f := &fakeSender{send: func(ctx context.Context, _ string, _ int) error {
			inFlight <- struct{}{}
			<-ctx.Done()
			return &Error{Retryable: true, Reason: "timeout", Err: ctx.Err()}
		}}
		o := testOptions()
		o.FlushTimeout = flush
		s := New(openSpool(t, 1<<20), Sender[string](f), o)
		enqueue(t, s, "a", "b")
		r := start(s)
		<-inFlight
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Sent != 0 || st.SpoolEntries != 2 || len(f.sent()) != 1 {
			t.Errorf("flush timeout %v: stats %+v, attempts %v", flush, st, f.sent())
		}
	}
}

// TestFlushStopsAtTheFirstFailure: after the stop each queued entry gets
// one attempt, and the first that fails ends the flush.
func TestFlushStopsAtTheFirstFailure(t *testing.T) {
	f := &fakeSender{send: func(_ context.Context, req string, _ int) error {
		switch req {
		case "c":
			return &Error{Retryable: true, Reason: "unavailable", Err: errors.New("down again")}
		case "b":
			return &Error{Reason: "rejected", HTTPStatus: 400, Err: errors.New("bad")}
		}
		return nil
	}}
	s := New(openSpool(t, 1<<20), Sender[string](f), testOptions())
	enqueue(t, s, "a", "b", "c", "d")
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stopped before it starts: only the flush runs
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(f.sent()); got != "[a b c]" {
		t.Errorf("attempts %s, want a, b (dropped), c (fails: the flush ends)", got)
	}
	if st := s.Stats(); st.Sent != 1 || st.SpoolEntries != 2 || fmt.Sprint(nonzero(st.Dropped)) != "map[rejected:1]" {
		t.Errorf("stats %+v", st)
	}
}

// TestDropsAreCountedByReason: every way an entry is lost has its reason,
// and the collector exports each reason from the start.
func TestDropsAreCountedByReason(t *testing.T) {
	f := &fakeSender{send: func(_ context.Context, req string, _ int) error {
		switch {
		case req == "rejected":
			return &Error{Err: errors.New("400")} // permanent, no reason: rejected
		case req == "expired":
			return Drop("too_old", errors.New("decided before sending"))
		}
		return nil
	}}
	sp := openSpool(t, 200)
	s := New(sp, Sender[string](f), testOptions())
	enqueue(t, s, "bad-1", "old-1", "rejected", "expired", "ok")
	if err := s.Enqueue(make([]byte, 300)); !errors.Is(err, spool.ErrTooLarge) {
		t.Errorf("a payload over the bound: %v", err)
	}
	s.Discard("invalid", errors.New("failed validation"))
	r := start(s)
	waitFor(t, "the spool to drain", func() bool { return s.Stats().SpoolEntries == 0 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// Room for 9 of these: the 11 oldest go, counted.
	for range 20 {
		enqueue(t, s, "0123456789")
	}
	sp.Close()
	if err := s.Enqueue([]byte("x")); !errors.Is(err, spool.ErrClosed) {
		t.Errorf("a closed spool: %v", err)
	}
	if got := fmt.Sprint(f.sent()); got != "[rejected expired ok]" {
		t.Errorf("attempts %s: entries dropped at decode must not be sent", got)
	}
	st := s.Stats()
	want := "map[corrupt:1 invalid:1 rejected:1 spool_full:11 spool_write:1 too_large:1 too_old:2]"
	if got := fmt.Sprint(nonzero(st.Dropped)); got != want {
		t.Errorf("dropped %s, want %s", got, want)
	}
	const name = "test_dropped_total"
	c := NewCollector(s.Stats, Metrics{Dropped: schema.Metric{Name: name, Help: "Dropped, by reason.", Labels: []string{"reason"}}, Reasons: Reasons})
	exp := "# HELP " + name + " Dropped, by reason.\n# TYPE " + name + " counter\n"
	for _, r := range []string{"corrupt", "invalid", "rejected", "spool_full", "spool_write", "too_large", "too_old"} {
		exp += fmt.Sprintf("%s{reason=%q} %d\n", name, r, st.Dropped[r])
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(exp), name); err != nil {
		t.Error(err)
	}
}

func TestCollector(t *testing.T) {
	s := New(openSpool(t, 1<<20), Sender[string](&fakeSender{}), testOptions())
	enqueue(t, s, "abc")
	r := start(s)
	waitFor(t, "the delivery", func() bool { return s.Stats().Sent == 1 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	enqueue(t, s, "waiting")
	c := NewCollector(s.Stats, Metrics{
		Sent:         schema.Metric{Name: "t_sent_total", Help: "h"},
		SentBytes:    schema.Metric{Name: "t_sent_bytes_total", Help: "h"},
		Retries:      schema.Metric{Name: "t_retries_total", Help: "h"},
		Dropped:      schema.Metric{Name: "t_dropped_total", Help: "h", Labels: []string{"reason"}},
		SpoolEntries: schema.Metric{Name: "t_spool_requests", Help: "h"},
		Reasons:      []string{DropRejected},
	})
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	exp := `# HELP t_sent_total h
# TYPE t_sent_total counter
t_sent_total 1
# HELP t_sent_bytes_total h
# TYPE t_sent_bytes_total counter
t_sent_bytes_total 3
# HELP t_retries_total h
# TYPE t_retries_total counter
t_retries_total 0
# HELP t_spool_requests h
# TYPE t_spool_requests gauge
t_spool_requests 1
# HELP t_dropped_total h
# TYPE t_dropped_total counter
t_dropped_total{reason="rejected"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(exp)); err != nil {
		t.Error(err)
	}
}

// TestClosedSpool: a spool that fails under the shipper ends Run with its
// error.
func TestClosedSpool(t *testing.T) {
	sp := openSpool(t, 1<<20)
	s := New(sp, Sender[string](&fakeSender{}), testOptions())
	r := start(s)
	sp.Close()
	select {
	case err := <-r.done:
		if !errors.Is(err, spool.ErrClosed) || !strings.HasPrefix(err.Error(), "test spool: ") {
			t.Errorf("Run returned %v, want the spool's ErrClosed", err)
		}
	case <-time.After(ceiling):
		t.Fatal("Run did not notice the closed spool")
	}
	r.cancel()
}

func TestErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  *Error
		want string
	}{
		{&Error{Op: "remote write", Retryable: true, Reason: "unavailable", HTTPStatus: 503, Err: errors.New("x")}, "remote write failed (retryable, unavailable, HTTP 503): x"},
		{&Error{Op: "pyroscope push", Reason: "rejected", Err: errors.New("y")}, "pyroscope push failed (permanent, rejected): y"},
		{Drop("too_old", errors.New("z")), "send failed (permanent, too_old): z"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
	if IsRetryable(nil) || !IsRetryable(errors.New("unclassified")) || IsRetryable(fmt.Errorf("wrapped: %w", Drop("x", nil))) {
		t.Error("IsRetryable: nil is not, unclassified errors are, a wrapped drop is not")
	}
}

// syncBuffer is a log sink the shipper's goroutine writes while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestOutageIsLoggedNowAndThen: a backend down for five attempts, two
// minutes apart by the fake clock, is logged at the first, again at the
// first attempt five minutes later with the count, and its end in one line
// that says after how many failures; the delivery is a debug line. The
// clock is the shipper's, not the wall's.
func TestOutageIsLoggedNowAndThen(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := &fakeSender{send: func(_ context.Context, _ string, n int) error {
		if n > 5 {
			return nil
		}
		mu.Lock()
		now = now.Add(2 * time.Minute)
		mu.Unlock()
		return &Error{Op: "test send", Retryable: true, Reason: "unavailable", HTTPStatus: 502,
			Err: errors.New("Post \"http://backend/push\": 502 Bad Gateway: an HTML page of 412 bytes")}
	}}
	var logs syncBuffer
	o := testOptions()
	o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "took" {
				return slog.Attr{}
			}
			return a
		}}))
	o.LogEvery, o.Now = 5*time.Minute, clock
	s := New(openSpool(t, 1<<20), Sender[string](f), o)
	enqueue(t, s, "a")
	r := start(s)
	waitFor(t, "the delivery", func() bool { return s.Stats().Sent == 1 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	const down = `level=WARN msg="test unavailable; keeping things in the spool and retrying" err="test send failed (retryable, unavailable, HTTP 502): Post \"http://backend/push\": 502 Bad Gateway: an HTML page of 412 bytes"`
	want := []string{
		down,
		down + ` repeats=3 since=2026-03-02T08:02:00.000Z`, // the attempt at 8:08
		`level=INFO msg="test reachable again; delivering the spool (recovered after 5 failures)" failures=5 since=2026-03-02T08:02:00.000Z`,
		`level=DEBUG msg="delivered things" backend=test bytes=1 attempts=6 samples=2`,
	}
	if got := strings.Split(strings.TrimSpace(logs.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("logged\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
