package pyroscope_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	googlev1 "github.com/grafana/pyroscope/api/gen/proto/go/google/v1"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/querier/v1/querierv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

// seqLabel numbers the test's requests so that order can be checked at the
// server.
const seqLabel = "test_seq"

var quiet = slog.New(slog.DiscardHandler)

// pprofGz builds a gzipped cpu/nanoseconds pprof with one stack per entry
// of stacks ("root;...;leaf" -> nanoseconds).
func pprofGz(t testing.TB, ts time.Time, stacks map[string]int64) []byte {
	t.Helper()
	p := &googlev1.Profile{StringTable: []string{"", "cpu", "nanoseconds"}}
	p.SampleType = []*googlev1.ValueType{{Type: 1, Unit: 2}}
	p.PeriodType = &googlev1.ValueType{Type: 1, Unit: 2}
	p.Period = 10_000_000
	p.TimeNanos = ts.UnixNano()
	loc := map[string]uint64{}
	for stack, v := range stacks {
		frames := strings.Split(stack, ";")
		var ids []uint64
		for i := len(frames) - 1; i >= 0; i-- {
			id, ok := loc[frames[i]]
			if !ok {
				p.StringTable = append(p.StringTable, frames[i])
				id = uint64(len(loc) + 1)
				loc[frames[i]] = id
				p.Function = append(p.Function, &googlev1.Function{Id: id, Name: int64(len(p.StringTable) - 1)})
				p.Location = append(p.Location, &googlev1.Location{Id: id, Line: []*googlev1.Line{{FunctionId: id}}})
			}
			ids = append(ids, id)
		}
		p.Sample = append(p.Sample, &googlev1.Sample{LocationId: ids, Value: []int64{v}})
	}
	raw, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(raw)
	zw.Close()
	return b.Bytes()
}

// t0 stamps the test's profiles: now, since the shipper drops what is older
// than the server's ingestion window.
var t0 = time.Now().Truncate(time.Second)

// request builds push number seq for job 4242.
func request(t testing.TB, seq int) *pushv1.PushRequest {
	t.Helper()
	req, err := pyroscope.NewPushRequest(pyroscope.Series{
		Name: "process_cpu", ServiceName: "train-llama",
		Labels: map[string]string{
			schema.JobID.Label: "4242", schema.JobUser.Label: "bob",
			schema.HostName.Label: "node-a", seqLabel: strconv.Itoa(seq),
		},
		Profiles: [][]byte{pprofGz(t, t0.Add(time.Duration(seq)*time.Second), map[string]int64{"python;train_step": 1e7})},
	})
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// seqs lists the seqLabel of every series the server accepted, in order.
func seqs(s *pyrostandin.Server) []int {
	var out []int
	for _, r := range s.Accepted() {
		for _, series := range r.Series {
			for _, l := range series.Labels {
				if l.Name == seqLabel {
					n, _ := strconv.Atoi(l.Value)
					out = append(out, n)
				}
			}
		}
	}
	return out
}

// waitFor polls cond; the timeout only keeps a broken test from hanging.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func startStandin(t *testing.T, opts ...pyrostandin.Option) *pyrostandin.Server {
	t.Helper()
	// The requests are stamped from t0: keep them inside the stand-in's
	// ingestion window.
	s := pyrostandin.New(append([]pyrostandin.Option{pyrostandin.WithClock(func() time.Time { return t0 })}, opts...)...)
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newClient(t *testing.T, cfg pyroscope.Config) *pyroscope.Client {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	c, err := pyroscope.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type agent struct {
	sp     *spool.Spool
	sh     *pyroscope.Shipper
	cancel context.CancelFunc
	done   chan error
}

// startAgent opens the spool in dir and runs a shipper on it, with tiny
// backoffs so that tests do not wait.
func startAgent(t *testing.T, dir string, max int64, p pyroscope.Pusher) *agent {
	t.Helper()
	sp, err := spool.Open(dir, max, spool.WithLogger(quiet), spool.WithoutFsync())
	if err != nil {
		t.Fatal(err)
	}
	sh := pyroscope.NewShipper(sp, p, pyroscope.WithBackoff(time.Millisecond, 4*time.Millisecond),
		pyroscope.WithFlushTimeout(time.Second), pyroscope.WithLogger(quiet))
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{sp: sp, sh: sh, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- sh.Run(ctx) }()
	t.Cleanup(func() { a.stop(t) })
	return a
}

func (a *agent) stop(t *testing.T) {
	if a.cancel == nil {
		return
	}
	a.cancel()
	if err := <-a.done; err != nil {
		t.Errorf("shipper: %v", err)
	}
	a.cancel = nil
	a.sp.Close()
}

func enqueue(t *testing.T, a *agent, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := a.sh.Enqueue(request(t, i)); err != nil {
			t.Fatal(err)
		}
	}
}

func ints(from, to int, skip ...int) []int {
	var out []int
next:
	for i := from; i <= to; i++ {
		for _, s := range skip {
			if i == s {
				continue next
			}
		}
		out = append(out, i)
	}
	return out
}

// TestFailureMatrix walks one agent through an outage: the server down, then
// answering 503, a request it rejects, an agent restart in the middle, and
// the server back. Everything the server accepts arrives once and in order.
func TestFailureMatrix(t *testing.T) {
	srv := startStandin(t)
	client := newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL()}})
	dir := t.TempDir()

	// Down: connection refused; pushes wait in the spool.
	srv.SetMode(pyrostandin.Down)
	a := startAgent(t, dir, 1<<20, client)
	enqueue(t, a, 1, 3)
	waitFor(t, "retries while down", func() bool { return a.sh.Stats().Retries >= 3 })
	if n := srv.Attempts(); n != 0 {
		t.Fatalf("%d requests reached a server that is down", n)
	}

	// 503: still retried, nothing accepted, nothing dropped.
	srv.SetMode(pyrostandin.Status503)
	waitFor(t, "attempts answered 503", func() bool { return srv.Attempts() >= 3 })
	if st := a.sh.Stats(); st.SpoolEntries != 3 || len(nonzero(st.Dropped)) != 0 || srv.AcceptedPushes() != 0 {
		t.Fatalf("during 503: %+v, accepted %d", st, srv.AcceptedPushes())
	}

	// A request the server rejects (a producer that skipped validation:
	// host name twice) sits between good ones.
	bad := request(t, 4)
	bad.Series[0].Labels = append(bad.Series[0].Labels, &typesv1.LabelPair{Name: schema.HostName.Label, Value: "node-b"})
	raw, _ := proto.Marshal(bad)
	if err := a.sp.Append(raw); err != nil {
		t.Fatal(err)
	}
	enqueue(t, a, 5, 6)

	// Down again, and the agent restarts in the middle of the outage.
	srv.SetMode(pyrostandin.Down)
	a.stop(t)
	a = startAgent(t, dir, 1<<20, client)
	enqueue(t, a, 7, 8)
	waitFor(t, "retries after restart", func() bool { return a.sh.Stats().Retries >= 2 })

	// Back up: everything replayed in order, the bad one dropped once.
	srv.SetMode(pyrostandin.Up)
	waitFor(t, "the spool to drain", func() bool { return a.sh.Stats().SpoolEntries == 0 })
	enqueue(t, a, 9, 10)
	waitFor(t, "live pushes", func() bool { return a.sh.Stats().Pushed == 9 })

	if got, want := fmt.Sprint(seqs(srv)), fmt.Sprint(ints(1, 10, 4)); got != want {
		t.Fatalf("server got %s, want %s", got, want)
	}
	st := a.sh.Stats()
	if d := nonzero(st.Dropped); fmt.Sprint(d) != "map[rejected:1]" {
		t.Fatalf("dropped %v, want exactly one rejected", d)
	}
}

func nonzero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

func TestStatus400IsDroppedAndCounted(t *testing.T) {
	srv := startStandin(t)
	a := startAgent(t, t.TempDir(), 1<<20, newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL()}}))
	srv.SetMode(pyrostandin.Status400)
	enqueue(t, a, 1, 2)
	waitFor(t, "both dropped", func() bool { return a.sh.Stats().Dropped[pyroscope.DropRejected] == 2 })
	if n := srv.Attempts(); n != 2 {
		t.Fatalf("%d attempts for 2 rejected requests: rejected requests must not be retried", n)
	}
	srv.SetMode(pyrostandin.Up)
	enqueue(t, a, 3, 3)
	waitFor(t, "delivery", func() bool { return a.sh.Stats().Pushed == 1 })
	if got := fmt.Sprint(seqs(srv)); got != "[3]" {
		t.Fatalf("server got %s", got)
	}
}

// TestSpoolFullDropsOldest: with the server down and room for four
// requests, ten arrive. The one being delivered is kept, the oldest of the
// rest go, and each drop is counted.
func TestSpoolFullDropsOldest(t *testing.T) {
	srv := startStandin(t)
	srv.SetMode(pyrostandin.Down)
	raw, _ := proto.Marshal(request(t, 1))
	size := int64(len(raw) + 12) // entry header
	a := startAgent(t, t.TempDir(), 4*size+size/2, newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL()}}))
	enqueue(t, a, 1, 1)
	waitFor(t, "the head to be in delivery", func() bool { return a.sh.Stats().Retries >= 1 })
	enqueue(t, a, 2, 10)
	st := a.sh.Stats()
	if st.Dropped[pyroscope.DropSpoolFull] != 6 || st.SpoolEntries != 4 {
		t.Fatalf("stats %+v, want 6 dropped and 4 queued", st)
	}
	srv.SetMode(pyrostandin.Up)
	waitFor(t, "the spool to drain", func() bool { return a.sh.Stats().Pushed == 4 })
	if got := fmt.Sprint(seqs(srv)); got != "[1 8 9 10]" {
		t.Fatalf("server got %s", got)
	}
}

func TestPushThenQueryFlamegraph(t *testing.T) {
	srv := startStandin(t)
	c := newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL()}})
	req, err := pyroscope.NewPushRequest(
		pyroscope.Series{Name: "process_cpu", ServiceName: "train-llama",
			Labels:   map[string]string{schema.JobID.Label: "77", schema.HostName.Label: "node-a"},
			Profiles: [][]byte{pprofGz(t, t0, map[string]int64{"python;train_step;forward": 3e9, "python;train_step": 1e9})}},
		pyroscope.Series{Name: "process_cpu", ServiceName: "train-llama",
			Labels:   map[string]string{schema.JobID.Label: "77", schema.HostName.Label: "node-b"},
			Profiles: [][]byte{pprofGz(t, t0, map[string]int64{"python;dataloader": 2e9})}},
		pyroscope.Series{Name: "process_cpu", ServiceName: "other",
			Labels:   map[string]string{schema.JobID.Label: "78", schema.HostName.Label: "node-a"},
			Profiles: [][]byte{pprofGz(t, t0, map[string]int64{"main": 5e9})}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	q := querierv1connect.NewQuerierServiceClient(http.DefaultClient, srv.URL())
	resp, err := q.SelectMergeStacktraces(context.Background(), connect.NewRequest(&querierv1.SelectMergeStacktracesRequest{
		ProfileTypeID: "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
		LabelSelector: fmt.Sprintf("{%s=%q}", schema.JobID.Label, "77"),
		Start:         t0.Add(-time.Minute).UnixMilli(), End: t0.Add(time.Minute).UnixMilli(),
	}))
	if err != nil {
		t.Fatal(err)
	}
	fg := resp.Msg.Flamegraph
	if fg.Total != 6e9 {
		t.Fatalf("total %d, want 6e9", fg.Total)
	}
	// Level 2 holds python's children: dataloader 2 s, train_step 4 s (1 s self).
	got := map[string][2]int64{}
	for d, lv := range fg.Levels {
		for i := 0; i < len(lv.Values); i += 4 {
			got[fmt.Sprint(d, fg.Names[lv.Values[i+3]])] = [2]int64{lv.Values[i+1], lv.Values[i+2]}
		}
	}
	want := map[string][2]int64{
		"0total": {6e9, 0}, "1python": {6e9, 0},
		"2dataloader": {2e9, 2e9}, "2train_step": {4e9, 1e9}, "3forward": {3e9, 3e9},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("flame graph %v, want %v", got, want)
	}
}

func TestClientValidatesLikeTheServer(t *testing.T) {
	_, err := pyroscope.NewPushRequest(pyroscope.Series{Name: "", ServiceName: "x", Profiles: [][]byte{{1}}})
	if err == nil || !strings.Contains(err.Error(), "invalid metric name") {
		t.Fatalf("missing name: %v", err)
	}
	_, err = pyroscope.NewPushRequest(pyroscope.Series{Name: "process_cpu", Profiles: [][]byte{{1}}})
	if err == nil || !strings.Contains(err.Error(), "service name is not provided") {
		t.Fatalf("missing service: %v", err)
	}
	_, err = pyroscope.NewPushRequest(pyroscope.Series{Name: "process_cpu", ServiceName: "x",
		Labels: map[string]string{"bad-name": "v"}, Profiles: [][]byte{{1}}})
	if err == nil || !strings.Contains(err.Error(), "invalid label name") {
		t.Fatalf("bad label name: %v", err)
	}
	req, err := pyroscope.NewPushRequest(pyroscope.Series{Name: "process_cpu", ServiceName: "x",
		Labels: map[string]string{schema.JobName.Label: "caf\xe9", schema.JobAccount.Label: ""}, Profiles: [][]byte{{1}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := pyroscope.LabelsString(req.Series[0].Labels); got != `{__name__="process_cpu", service_name="x", slurm_job_name="caf�"}` {
		t.Fatalf("labels %s", got)
	}
}

func TestErrorClassification(t *testing.T) {
	srv := startStandin(t)
	c := newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL()}})
	for _, tc := range []struct {
		mode      pyrostandin.Mode
		retryable bool
		reason    string
	}{
		{pyrostandin.Down, true, "unavailable"},
		{pyrostandin.Status503, true, "unavailable"},
		{pyrostandin.Status400, false, "rejected"},
	} {
		srv.SetMode(tc.mode)
		err := c.Push(context.Background(), request(t, 1))
		var pe *pyroscope.PushError
		if !errors.As(err, &pe) || pe.Retryable != tc.retryable || pe.Reason != tc.reason {
			t.Errorf("%v: got %v", tc.mode, err)
		}
	}
	// A request the real server rejects (08d) is permanent.
	srv.SetMode(pyrostandin.Up)
	bad := request(t, 1)
	bad.Series[0].Labels = append(bad.Series[0].Labels, &typesv1.LabelPair{Name: schema.HostName.Label, Value: "node-b"})
	err := c.Push(context.Background(), bad)
	if pyroscope.IsRetryable(err) || !strings.Contains(err.Error(), "duplicate label name") {
		t.Errorf("duplicate label: %v", err)
	}
	// A server that does not answer in time is retryable.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	slow := newClient(t, pyroscope.Config{Config: httpclient.Config{URL: "http://" + ln.Addr().String(), Timeout: 20 * time.Millisecond}})
	if err := slow.Push(context.Background(), request(t, 1)); !pyroscope.IsRetryable(err) {
		t.Errorf("timeout: %v", err)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTenantAndBasicAuthReachTheServer(t *testing.T) {
	srv := startStandin(t, pyrostandin.WithTenant("hpc"), pyrostandin.WithBasicAuth("agent", "s3cret"))
	dir := t.TempDir()
	good := newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL(), Tenant: "hpc", BasicAuthUser: "agent",
		BasicAuthPasswordFile: writeFile(t, dir, "pw", "s3cret\n")}})
	if err := good.Push(context.Background(), request(t, 1)); err != nil {
		t.Fatal(err)
	}
	noTenant := newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL(), BasicAuthUser: "agent",
		BasicAuthPasswordFile: writeFile(t, dir, "pw2", "s3cret")}})
	wrongPw := newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL(), Tenant: "hpc", BasicAuthUser: "agent",
		BasicAuthPasswordFile: writeFile(t, dir, "pw3", "guess")}})
	for name, c := range map[string]*pyroscope.Client{"no tenant": noTenant, "wrong password": wrongPw} {
		err := c.Push(context.Background(), request(t, 2))
		var pe *pyroscope.PushError
		if !errors.As(err, &pe) || pe.Reason != "auth" || pe.HTTPStatus != 401 {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := srv.AcceptedPushes(); n != 1 {
		t.Fatalf("accepted %d", n)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []pyroscope.Config{
		{Config: httpclient.Config{URL: "pyroscope:4040"}},
		{Config: httpclient.Config{URL: "http://p", BasicAuthUser: "u"}},
		{Config: httpclient.Config{URL: "http://p", BasicAuthUser: "u", BasicAuthPasswordFile: "/x", BearerTokenFile: "/y"}},
		{Config: httpclient.Config{URL: "http://p", BearerTokenFile: "/does/not/exist"}},
		{Config: httpclient.Config{URL: "https://p", TLS: pyroscope.TLSConfig{CAFile: "/does/not/exist"}}},
		{Config: httpclient.Config{URL: "https://p", TLS: pyroscope.TLSConfig{CertFile: "/only/cert"}}},
	} {
		if _, err := pyroscope.NewClient(cfg); err == nil || !strings.HasPrefix(err.Error(), "pyroscope ") && !strings.HasPrefix(err.Error(), "pyroscope: ") {
			t.Errorf("%+v: %v, want an error that names pyroscope", cfg, err)
		}
	}
}

// TestBearerTokenOverTLS: the client's TLS and credentials settings reach
// the server. Their details (mutual TLS, rotation, bad files) are tested in
// agent/httpclient.
func TestBearerTokenOverTLS(t *testing.T) {
	ts := httptest.NewTLSServer(http.NotFoundHandler()) // only for its certificate, valid for 127.0.0.1
	ts.Close()
	srv := startStandin(t, pyrostandin.WithTLS(&tls.Config{Certificates: ts.TLS.Certificates}),
		pyrostandin.WithBearerToken("tok"))
	dir := t.TempDir()
	ca := writeFile(t, dir, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})))
	tok := writeFile(t, dir, "token", "tok\n")
	good := newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL(), BearerTokenFile: tok, TLS: pyroscope.TLSConfig{CAFile: ca}}})
	if err := good.Push(context.Background(), request(t, 1)); err != nil {
		t.Fatal(err)
	}
	// The system roots do not know the test certificate.
	untrusted := newClient(t, pyroscope.Config{Config: httpclient.Config{URL: srv.URL(), BearerTokenFile: tok}})
	if err := untrusted.Push(context.Background(), request(t, 2)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted server: %v", err)
	}
	if got := fmt.Sprint(seqs(srv)); got != "[1]" {
		t.Fatalf("server got %s", got)
	}
}
