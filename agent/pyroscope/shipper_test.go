package pyroscope_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
	"github.com/slurmscope/slurmscope/agent/ship/shiptest"
	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
)

// front is a proxy before the stand-in whose handle decides, per request
// (numbered from 1), whether to answer itself (true) or pass it on.
type front struct {
	*httptest.Server
	mu sync.Mutex
	n  int
}

func newFront(t *testing.T, srv *pyrostandin.Server, handle func(n int, w http.ResponseWriter, r *http.Request) bool) *front {
	t.Helper()
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	f := &front{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.n++
		n := f.n
		f.mu.Unlock()
		if !handle(n, w, r) {
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *front) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// runShipper runs sh until cancel; wait cancels too and waits for Run.
func runShipper(t *testing.T, sh *pyroscope.Shipper) (cancel func(), wait func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sh.Run(ctx) }()
	var once sync.Once
	wait = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("shipper: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the shipper did not stop")
			}
		})
	}
	t.Cleanup(wait)
	return cancel, wait
}

func openSpool(t *testing.T) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(t.TempDir(), 1<<20, spool.WithLogger(quiet), spool.WithoutFsync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return sp
}

// TestShipperHonoursRetryAfter: a server that asks for a pause, in either
// form of Retry-After, gets it instead of the (short) backoff. The delays
// are the ones the shipper asks its timer for.
func TestShipperHonoursRetryAfter(t *testing.T) {
	srv := startStandin(t)
	date := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	fr := newFront(t, srv, func(n int, w http.ResponseWriter, _ *http.Request) bool {
		switch n {
		case 1:
			w.Header().Set("Retry-After", "7")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case 2:
			w.Header().Set("Retry-After", date)
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		default:
			return false
		}
		return true
	})
	var timer shiptest.Delays
	sh := pyroscope.NewShipper(openSpool(t), newClient(t, pyroscope.Config{Config: httpclient.Config{URL: fr.URL}}),
		pyroscope.WithBackoff(time.Millisecond, time.Hour), pyroscope.WithLogger(quiet), pyroscope.WithAfter(timer.After))
	enqueueTo(t, sh, 1, 2)
	_, stop := runShipper(t, sh)
	waitFor(t, "both pushes", func() bool { return sh.Stats().Pushed == 2 })
	stop()
	if delays := timer.Got(); len(delays) != 2 || delays[0] != 7*time.Second || delays[1] <= 20*time.Second || delays[1] > 30*time.Second {
		t.Errorf("delays %v, want 7s (delta-seconds) and about 30s (the HTTP date %s)", delays, date)
	}
	if got := fmt.Sprint(seqs(srv)); got != "[1 2]" {
		t.Errorf("server got %s", got)
	}
	if st := sh.Stats(); st.Retries != 2 || len(nonzero(st.Dropped)) != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestShipperStopLetsThePushInFlightFinish: stopping does not cut the push
// in flight (Pyroscope would often have stored it, and the flush would send
// it again); the queue behind it is flushed.
func TestShipperStopLetsThePushInFlightFinish(t *testing.T) {
	srv := startStandin(t)
	inFlight, release := make(chan struct{}), make(chan struct{})
	fr := newFront(t, srv, func(n int, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			close(inFlight)
			<-release
		}
		return false
	})
	sh := pyroscope.NewShipper(openSpool(t), newClient(t, pyroscope.Config{Config: httpclient.Config{URL: fr.URL}}),
		pyroscope.WithLogger(quiet), pyroscope.WithFlushTimeout(20*time.Second))
	enqueueTo(t, sh, 1, 2)
	cancel, wait := runShipper(t, sh)
	<-inFlight
	cancel() // Run's context is done from here on
	close(release)
	wait()
	if got := fmt.Sprint(seqs(srv)); got != "[1 2]" {
		t.Errorf("server got %s", got)
	}
	if n := fr.requests(); n != 2 {
		t.Errorf("%d requests for 2 pushes: the push in flight was cut and sent again", n)
	}
	if st := sh.Stats(); st.Pushed != 2 || st.SpoolEntries != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestShipperStopIsBounded: a server that hangs holds the stop for the
// flush timeout only, and the push stays in the spool for the next start.
func TestShipperStopIsBounded(t *testing.T) {
	srv := startStandin(t)
	inFlight := make(chan struct{}, 1)
	fr := newFront(t, srv, func(_ int, w http.ResponseWriter, r *http.Request) bool {
		// The server notices a client that went away only once the body
		// is read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case inFlight <- struct{}{}:
		default:
		}
		<-r.Context().Done()
		return true
	})
	sh := pyroscope.NewShipper(openSpool(t), newClient(t, pyroscope.Config{Config: httpclient.Config{URL: fr.URL, Timeout: time.Hour}}),
		pyroscope.WithLogger(quiet), pyroscope.WithFlushTimeout(50*time.Millisecond))
	enqueueTo(t, sh, 1, 1)
	_, stop := runShipper(t, sh)
	<-inFlight
	stop()
	if st := sh.Stats(); st.Pushed != 0 || st.SpoolEntries != 1 || srv.AcceptedPushes() != 0 {
		t.Errorf("stats %+v, accepted %d", st, srv.AcceptedPushes())
	}
}

func enqueueTo(t *testing.T, sh *pyroscope.Shipper, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := sh.Enqueue(request(t, i)); err != nil {
			t.Fatal(err)
		}
	}
}
