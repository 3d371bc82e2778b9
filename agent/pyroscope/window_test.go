package pyroscope_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	googlev1 "github.com/grafana/pyroscope/api/gen/proto/go/google/v1"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
	"github.com/slurmscope/slurmscope/agent/ship/shiptest"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
)

const seriesLabel = "test_series"

// stamped builds push seq with one series per element of series, each
// holding one profile per time stamp.
func stamped(t testing.TB, seq int, series ...[]time.Time) *pushv1.PushRequest {
	t.Helper()
	var ss []pyroscope.Series
	for i, stamps := range series {
		s := pyroscope.Series{Name: "process_cpu", ServiceName: "train-llama",
			Labels: map[string]string{seqLabel: strconv.Itoa(seq), seriesLabel: strconv.Itoa(i)}}
		for _, ts := range stamps {
			s.Profiles = append(s.Profiles, pprofGz(t, ts, map[string]int64{"python;train_step": 1e7}))
		}
		ss = append(ss, s)
	}
	req, err := pyroscope.NewPushRequest(ss...)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// got is one profile a server kept: push seq, series, time stamp.
type got struct {
	seq, series int
	ts          time.Time
}

func (g got) String() string {
	return fmt.Sprintf("%d/%d@%s", g.seq, g.series, g.ts.UTC().Format("15:04:05"))
}

// judge applies Pyroscope's ingestion window at now to req, as the server
// does (validation.ValidateProfile, the distributor): each profile on its
// own, the good ones kept, the first error answered, with the server's
// message.
func judge(w pyroscope.Window, now time.Time, req *pushv1.PushRequest) ([]got, error) {
	var kept []got
	var first error
	for _, s := range req.Series {
		var g got
		for _, l := range s.Labels {
			switch l.Name {
			case seqLabel:
				g.seq, _ = strconv.Atoi(l.Value)
			case seriesLabel:
				g.series, _ = strconv.Atoi(l.Value)
			}
		}
		for _, sample := range s.Samples {
			ts, err := pprofTime(sample.RawProfile)
			if err != nil {
				return nil, err
			}
			g.ts = time.Unix(0, ts)
			from, to := now.Add(-w.OlderThan).UnixMilli(), now.Add(w.NewerThan).UnixMilli()
			if ms := g.ts.UnixMilli(); ms > from && ms < to {
				kept = append(kept, g)
				continue
			}
			if first == nil {
				first = fmt.Errorf("profile with labels '%s' is outside of ingestion window (profile timestamp: %s, the ingestion window starts at %s and ends at %s)",
					pyroscope.LabelsString(s.Labels), time.UnixMilli(g.ts.UnixMilli()).UTC(), time.UnixMilli(from).UTC(), time.UnixMilli(to).UTC())
			}
		}
	}
	return kept, first
}

// pprofTime decodes a gzipped profile in full, as the server does.
func pprofTime(raw []byte) (int64, error) {
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return 0, err
	}
	p := &googlev1.Profile{}
	if err := proto.Unmarshal(b, p); err != nil {
		return 0, err
	}
	return p.TimeNanos, nil
}

// fakeClock is the node's clock. Its After (the shipper's timer) moves it
// on by each delay asked for, at once, and records the delays.
type fakeClock struct {
	shiptest.Delays
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	return c.Delays.After(d)
}

// windowServer is a Pusher that behaves like Pyroscope's ingestion window
// by a clock of its own (the node's plus skew), connection refused until
// upAt, and tells its clock to the shipper's as each response's Date
// would (the node's plus dateSkew: a gateway's clock).
type windowServer struct {
	node           *fakeClock
	clock          *pyroscope.Clock // the shipper's
	skew, dateSkew time.Duration
	upAt           time.Time

	mu       sync.Mutex
	kept     []got
	attempts int // pushes that reached the server
	refused  int // of those, answered 400
}

func (s *windowServer) Push(_ context.Context, req *pushv1.PushRequest) error {
	now := s.node.Now().Add(s.skew)
	if now.Before(s.upAt) {
		return &pyroscope.PushError{Op: "pyroscope push", Retryable: true, Reason: "unavailable", Err: errors.New("connection refused")}
	}
	defer s.clock.Observe(s.node.Now().Add(s.dateSkew))
	kept, err := judge(pyroscope.DefaultWindow, now, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	s.kept = append(s.kept, kept...)
	if err != nil {
		s.refused++
		return &pyroscope.PushError{Op: "pyroscope push", Reason: pyroscope.DropRejected, HTTPStatus: http.StatusBadRequest, Err: err}
	}
	return nil
}

func (s *windowServer) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.kept)
}

// logCounter keeps each record logged, as text.
type logCounter struct {
	mu   sync.Mutex
	recs []string
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	rec := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { rec += " " + a.String(); return true })
	h.mu.Lock()
	h.recs = append(h.recs, rec)
	h.mu.Unlock()
	return nil
}
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

func (h *logCounter) matching(s string) (n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if strings.Contains(r, s) {
			n++
		}
	}
	return n
}

// windowShipper is a shipper judged by node's clock, with backoffs long
// enough that the fake clock crosses an outage in a few steps.
func windowShipper(t *testing.T, node *fakeClock, clock *pyroscope.Clock, p pyroscope.Pusher, logs *logCounter) *pyroscope.Shipper {
	t.Helper()
	return pyroscope.NewShipper(openSpool(t), p, pyroscope.WithClock(clock), pyroscope.WithAfter(node.After),
		pyroscope.WithBackoff(time.Minute, 10*time.Minute), pyroscope.WithLogger(slog.New(logs)))
}

var tw = time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)

// TestShipperDropsProfilesOlderThanTheWindow: the server is unreachable for
// two hours, and the spool holds what was made from the start of the
// outage to its end. The profiles that are older than the server's window
// when it is back are dropped before sending, counted as too_old and
// logged once; of a request holding old and new ones only the new are
// sent; everything else arrives in order and the server refuses nothing.
func TestShipperDropsProfilesOlderThanTheWindow(t *testing.T) {
	node := &fakeClock{t: tw}
	clock := pyroscope.NewClock(node.Now)
	srv := &windowServer{node: node, clock: clock, upAt: tw.Add(2 * time.Hour)}
	logs := &logCounter{}
	sh := windowShipper(t, node, clock, srv, logs)
	at := func(m int) []time.Time { return []time.Time{tw.Add(time.Duration(m) * time.Minute)} }
	for _, req := range []*pushv1.PushRequest{
		stamped(t, 1, at(0)),
		stamped(t, 2, at(25)),
		// Two series: the first half old, half new; the second all old.
		stamped(t, 3, []time.Time{tw.Add(30 * time.Minute), tw.Add(90 * time.Minute)}, at(20)),
		stamped(t, 4, at(50)),
		stamped(t, 5, at(75)),
		stamped(t, 6, at(100)),
		stamped(t, 7, at(119)),
	} {
		if err := sh.Enqueue(req); err != nil {
			t.Fatal(err)
		}
	}
	_, stop := runShipper(t, sh)
	waitFor(t, "the spool to drain", func() bool { return sh.Stats().SpoolEntries == 0 })
	stop()

	// The server came back somewhere in [2h, 2h10m) (jittered backoff):
	// the profiles up to 50 min are then over an hour old, those from 75 min
	// are not.
	if now := node.Now(); now.Before(srv.upAt) || now.After(srv.upAt.Add(10*time.Minute)) {
		t.Fatalf("the fake clock is at %v", now.Sub(tw))
	}
	if got, want := srv.got(), "[3/0@09:30:00 5/0@09:15:00 6/0@09:40:00 7/0@09:59:00]"; got != want {
		t.Errorf("server kept %s, want %s", got, want)
	}
	if srv.attempts != 4 || srv.refused != 0 {
		t.Errorf("%d pushes reached the server, %d refused; want 4 and none: too old profiles must not be sent", srv.attempts, srv.refused)
	}
	st := sh.Stats()
	if d := fmt.Sprint(nonzero(st.Dropped)); d != "map[too_old:3]" || st.TooOldProfiles != 5 || st.Pushed != 4 {
		t.Errorf("dropped %s, %d too old profiles, %d pushed; want too_old:3 (requests 1, 2, 4), 5 profiles, 4 pushed", d, st.TooOldProfiles, st.Pushed)
	}
	if n := logs.matching("too_old"); n != 1 {
		t.Errorf("%d log records about too_old profiles, want 1: %v", n, logs.recs)
	}
	if st.ClockSkew != 0 || !st.ClockSkewKnown {
		t.Errorf("skew %v (known %v) between clocks that agree", st.ClockSkew, st.ClockSkewKnown)
	}

	// The counters reach /metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(pyroscope.NewCollector(sh))
	want := `
# HELP slurmscope_pyroscope_dropped_requests_total Push requests dropped, by reason.
# TYPE slurmscope_pyroscope_dropped_requests_total counter
slurmscope_pyroscope_dropped_requests_total{reason="corrupt"} 0
slurmscope_pyroscope_dropped_requests_total{reason="invalid"} 0
slurmscope_pyroscope_dropped_requests_total{reason="rejected"} 0
slurmscope_pyroscope_dropped_requests_total{reason="spool_full"} 0
slurmscope_pyroscope_dropped_requests_total{reason="spool_write"} 0
slurmscope_pyroscope_dropped_requests_total{reason="too_large"} 0
slurmscope_pyroscope_dropped_requests_total{reason="too_old"} 3
# HELP slurmscope_pyroscope_too_old_profiles_total Profiles dropped before sending as older than Pyroscope's ingestion window, with their request (dropped_requests_total{reason="too_old"}) or cut from it.
# TYPE slurmscope_pyroscope_too_old_profiles_total counter
slurmscope_pyroscope_too_old_profiles_total 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"slurmscope_pyroscope_dropped_requests_total", "slurmscope_pyroscope_too_old_profiles_total"); err != nil {
		t.Error(err)
	}
}

// TestShipperHoldsProfilesAheadOfTheServer: the node's clock is 20 min
// fast, so the server refuses its fresh profiles as ahead of its window
// (10 min). Told the server's clock by the refusal's Date, the shipper
// holds each request until the window takes it, instead of dropping it:
// one refusal, nothing lost, in order, and the skew logged once.
func TestShipperHoldsProfilesAheadOfTheServer(t *testing.T) {
	node := &fakeClock{t: tw}
	clock := pyroscope.NewClock(node.Now)
	srv := &windowServer{node: node, clock: clock, skew: -20 * time.Minute, dateSkew: -20 * time.Minute}
	logs := &logCounter{}
	sh := windowShipper(t, node, clock, srv, logs)
	for i := 1; i <= 3; i++ {
		if err := sh.Enqueue(stamped(t, i, []time.Time{tw.Add(time.Duration(i-1) * 15 * time.Second)})); err != nil {
			t.Fatal(err)
		}
	}
	_, stop := runShipper(t, sh)
	waitFor(t, "the spool to drain", func() bool { return sh.Stats().SpoolEntries == 0 })
	stop()
	if got, want := srv.got(), "[1/0@08:00:00 2/0@08:00:15 3/0@08:00:30]"; got != want {
		t.Errorf("server kept %s, want %s", got, want)
	}
	// The first until 5 s inside the window, the others 15 s each after it.
	if got, want := fmt.Sprint(node.Got()), "[10m5s 15s 15s]"; got != want {
		t.Errorf("held for %s, want %s", got, want)
	}
	st := sh.Stats()
	if srv.refused != 1 || len(nonzero(st.Dropped)) != 0 || st.Held != 3 || st.Retries != 0 {
		t.Errorf("%d refused, stats %+v; want 1 refusal, nothing dropped, 3 held, no retries", srv.refused, st)
	}
	if st.ClockSkew != -20*time.Minute {
		t.Errorf("skew %v, want -20m", st.ClockSkew)
	}
	if w, a := logs.matching("disagree"), logs.matching("ahead of the server"); w != 1 || a != 1 {
		t.Errorf("%d skew warnings and %d hold records, want one each: %v", w, a, logs.recs)
	}
}

// TestShipperWindowTrustsNoClockAlone: a profile is dropped unsent only
// when both clocks call it too old. A gateway whose Date is two hours
// ahead of the server drops nothing the server takes; a node whose clock
// is 30 min slow sends what the server then refuses as too old, and the
// refusal is counted as too_old, not rejected.
func TestShipperWindowTrustsNoClockAlone(t *testing.T) {
	t.Run("lying Date", func(t *testing.T) {
		srv, st := shipAged(t, 0, 2*time.Hour, 50*time.Minute, 30*time.Minute, time.Minute)
		if got, want := srv.got(), "[1/0@07:10:00 2/0@07:30:00 3/0@07:59:00]"; got != want {
			t.Errorf("server kept %s, want %s", got, want)
		}
		if len(nonzero(st.Dropped)) != 0 || st.ClockSkew != 2*time.Hour {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("slow node", func(t *testing.T) {
		srv, st := shipAged(t, 30*time.Minute, 30*time.Minute, 40*time.Minute, 10*time.Minute, 45*time.Minute)
		if got, want := srv.got(), "[2/0@07:50:00]"; got != want {
			t.Errorf("server kept %s, want %s", got, want)
		}
		if d := fmt.Sprint(nonzero(st.Dropped)); d != "map[too_old:2]" || srv.refused != 2 || st.TooOldProfiles != 2 {
			t.Errorf("dropped %s, %d refused, stats %+v; want too_old:2 after 2 refusals", d, srv.refused, st)
		}
	})
}

// shipAged ships one single-profile push per age (by the node's clock, at
// tw) to a server whose clock and Date are skew and dateSkew off the
// node's, until the spool is empty.
func shipAged(t *testing.T, skew, dateSkew time.Duration, ages ...time.Duration) (*windowServer, pyroscope.Stats) {
	t.Helper()
	node := &fakeClock{t: tw}
	clock := pyroscope.NewClock(node.Now)
	srv := &windowServer{node: node, clock: clock, skew: skew, dateSkew: dateSkew}
	sh := windowShipper(t, node, clock, srv, &logCounter{})
	for i, age := range ages {
		if err := sh.Enqueue(stamped(t, i+1, []time.Time{tw.Add(-age)})); err != nil {
			t.Fatal(err)
		}
	}
	_, stop := runShipper(t, sh)
	waitFor(t, "the spool to drain", func() bool { return sh.Stats().SpoolEntries == 0 })
	stop()
	return srv, sh.Stats()
}

// TestProfileTime reads time_nanos from literal profiles.
func TestProfileTime(t *testing.T) {
	gz := func(b []byte) []byte {
		var out bytes.Buffer
		zw := gzip.NewWriter(&out)
		zw.Write(b)
		zw.Close()
		return out.Bytes()
	}
	// Field 6 (string_table, bytes) "ab", field 9 (time_nanos) 300, field
	// 12 (period, varint) 1, field 9 again 5.
	plain := []byte{6<<3 | 2, 2, 'a', 'b', 9 << 3, 0xac, 0x02, 12 << 3, 1}
	twice := append(append([]byte{}, plain...), 9<<3, 5)
	for _, tc := range []struct {
		name string
		raw  []byte
		want int64
		err  bool
	}{
		{"plain", plain, 300, false},
		{"gzipped", gz(plain), 300, false},
		{"last wins", twice, 5, false},
		{"unset", []byte{6<<3 | 2, 1, 'a'}, 0, false},
		{"empty", nil, 0, false},
		{"truncated varint", []byte{9 << 3, 0xac}, 0, true},
		{"truncated bytes", []byte{6<<3 | 2, 5, 'a'}, 0, true},
		{"huge length", []byte{6<<3 | 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 0, true},
		{"group", []byte{1<<3 | 3}, 0, true},
		// Field 2^32+9 (varint) 7: as an int32 the number is time_nanos's.
		{"field number wraps", append(binary.AppendUvarint(nil, (1<<32+9)<<3), 7), 0, true},
		{"bad gzip", []byte{0x1f, 0x8b, 0}, 0, true},
		{"a real profile", pprofGz(t, tw, map[string]int64{"main": 1}), tw.UnixNano(), false},
	} {
		got, err := pyroscope.ProfileTime(tc.raw)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s: %d, %v; want %d (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// startStandIn serves the Pyroscope stand-in with its clock skew off the
// node's: its ingestion window and its responses' Date headers follow that
// clock, as a real server's follow its own.
func startStandIn(t *testing.T, skew time.Duration) (*pyrostandin.Server, *pyroscope.Client) {
	t.Helper()
	s := pyrostandin.New(pyrostandin.WithClock(func() time.Time { return time.Now().Add(skew) }))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return s, newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL}})
}

// keptBy lists the profiles of the requests the stand-in accepted, and
// how many it refused.
func keptBy(t *testing.T, s *pyrostandin.Server) (kept []got, refused int) {
	t.Helper()
	always := pyroscope.Window{OlderThan: 1e6 * time.Hour, NewerThan: 1e6 * time.Hour}
	for _, req := range s.Accepted() {
		k, err := judge(always, time.Now(), req)
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, k...)
	}
	return kept, s.Attempts() - s.AcceptedPushes()
}

// TestWindowOverHTTP: the agent's client and shipper against a server
// that answers the window as Pyroscope does. A spool that waited 2 h
// delivers its new profiles in order and drops its old ones as too_old
// before sending; a node 20 min fast is told so by the server's Date and
// holds its profiles instead of losing them.
func TestWindowOverHTTP(t *testing.T) {
	t.Run("spool waited 2h", func(t *testing.T) {
		srv, client := startStandIn(t, 0)
		sh := pyroscope.NewShipper(openSpool(t), client, pyroscope.WithLogger(quiet))
		now := time.Now()
		ago := func(d time.Duration) []time.Time { return []time.Time{now.Add(-d)} }
		for i, series := range [][][]time.Time{
			{ago(119 * time.Minute)},
			{ago(61 * time.Minute)},
			{{now.Add(-70 * time.Minute), now.Add(-20 * time.Minute)}, ago(65 * time.Minute)},
			{ago(59 * time.Minute)},
			{ago(time.Minute)},
		} {
			if err := sh.Enqueue(stamped(t, i+1, series...)); err != nil {
				t.Fatal(err)
			}
		}
		_, stop := runShipper(t, sh)
		waitFor(t, "the spool to drain", func() bool { return sh.Stats().SpoolEntries == 0 })
		stop()
		want := []got{{3, 0, now.Add(-20 * time.Minute)}, {4, 0, now.Add(-59 * time.Minute)}, {5, 0, now.Add(-time.Minute)}}
		if kept, refused := keptBy(t, srv); fmt.Sprint(kept) != fmt.Sprint(want) || refused != 0 {
			t.Errorf("server kept %v after %d refusals, want %v after none", kept, refused, want)
		}
		st := sh.Stats()
		if d := fmt.Sprint(nonzero(st.Dropped)); d != "map[too_old:2]" || st.TooOldProfiles != 4 || st.Pushed != 3 {
			t.Errorf("dropped %s, %d too old profiles, %d pushed", d, st.TooOldProfiles, st.Pushed)
		}
		if !st.ClockSkewKnown || st.ClockSkew.Abs() > 2*time.Second {
			t.Errorf("skew %v (known %v) between one machine's clocks", st.ClockSkew, st.ClockSkewKnown)
		}
	})
	t.Run("node 20 min fast", func(t *testing.T) {
		srv, client := startStandIn(t, -20*time.Minute)
		holds := make(chan time.Duration, 10)
		// The hold never ends here: the test stops the shipper in it.
		sh := pyroscope.NewShipper(openSpool(t), client, pyroscope.WithLogger(quiet), pyroscope.WithFlushTimeout(0),
			pyroscope.WithAfter(func(d time.Duration) <-chan time.Time { holds <- d; return nil }))
		if err := sh.Enqueue(stamped(t, 1, []time.Time{time.Now()})); err != nil {
			t.Fatal(err)
		}
		_, stop := runShipper(t, sh)
		var d time.Duration
		select {
		case d = <-holds:
		case <-time.After(20 * time.Second):
			t.Fatal("no hold")
		}
		stop()
		// 20 min ahead, the window reaches 10 min ahead, 5 s of slack; the
		// Date is good to a second.
		if want := 10*time.Minute + 5*time.Second; (d - want).Abs() > 2*time.Second {
			t.Errorf("held for %v, want about %v", d, want)
		}
		st := sh.Stats()
		if kept, refused := keptBy(t, srv); refused != 1 || len(kept) != 0 || st.Held != 1 || st.SpoolEntries != 1 || len(nonzero(st.Dropped)) != 0 {
			t.Errorf("%d refusals, kept %v, stats %+v; want one refusal and the request still spooled", refused, kept, st)
		}
		if (st.ClockSkew + 20*time.Minute).Abs() > 2*time.Second {
			t.Errorf("skew %v, want about -20m", st.ClockSkew)
		}
	})
}
