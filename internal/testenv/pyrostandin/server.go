// Package pyrostandin is a stand-in for Grafana Pyroscope in tests and demos.
// It is NOT Pyroscope: Pyroscope's server is AGPL and is not a dependency of
// this project. The stand-in serves the same Connect API through the
// official Apache-2.0 API module (push.v1 PusherService and the querier.v1
// calls the datasource uses), validates pushes with the server's rules and
// messages, and answers queries in the shapes recorded from a real server
// (see testdata/fixtures). It keeps everything in memory.
//
// It keeps a real server's default limits and their messages: queries over
// more than max_query_length (1 day) fail, pushes outside the ingestion
// window (older than 1 h, or more than 10 min ahead) are rejected, label
// queries see whole blocks of time, and flame graphs are truncated per
// pushed segment and again after merging. Each is an option, and each is
// tested against what a real server did (limits_test.go).
//
// For tests it can be made to fail: SetMode switches between serving, a
// closed port (connection refused), HTTP 503 and HTTP 400, and it can require
// a tenant, basic auth, bearer auth and TLS.
package pyrostandin

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	"github.com/grafana/pyroscope/api/gen/proto/go/querier/v1/querierv1connect"
	"google.golang.org/protobuf/proto"
)

// Banner is what the stand-in says about itself, so that nobody mistakes it
// for the real thing.
const Banner = "pyroscope stand-in (not a real Pyroscope)"

// Mode is how the stand-in answers.
type Mode int

const (
	Up        Mode = iota // serve normally
	Down                  // listener closed: connection refused
	Status503             // every call answers HTTP 503, like a gateway whose backend is down
	Status400             // every call answers HTTP 400 invalid_argument
)

func (m Mode) String() string {
	return [...]string{"up", "down", "503", "400"}[m]
}

// Option configures a Server.
type Option func(*Server)

// WithTenant requires X-Scope-OrgID to equal tenant.
func WithTenant(tenant string) Option { return func(s *Server) { s.tenant = tenant } }

// WithBasicAuth requires basic auth with user and password.
func WithBasicAuth(user, password string) Option {
	return func(s *Server) { s.basicUser, s.basicPass = user, password }
}

// WithBearerToken requires "Authorization: Bearer token".
func WithBearerToken(token string) Option { return func(s *Server) { s.bearer = token } }

// WithTLS serves TLS with cfg (which must hold a certificate).
func WithTLS(cfg *tls.Config) Option { return func(s *Server) { s.tlsConfig = cfg } }

// WithClock sets the server's clock, which the ingestion window is measured
// from (tests replaying recorded data set it to the recording time).
func WithClock(now func() time.Time) Option { return func(s *Server) { s.limits.now = now } }

// WithMaxQueryLength sets max_query_length (default 24 h, Pyroscope's); 0
// disables it.
func WithMaxQueryLength(d time.Duration) Option {
	return func(s *Server) { s.limits.maxQueryLength = d }
}

// WithIngestionWindow sets how old (-validation.reject-older-than, default
// 1 h) and how far ahead (-validation.reject-newer-than, default 10 min) a
// pushed profile may be; 0 disables either bound.
func WithIngestionWindow(olderThan, newerThan time.Duration) Option {
	return func(s *Server) { s.limits.rejectOlderThan, s.limits.rejectNewerThan = olderThan, newerThan }
}

// WithBlockDuration sets the time span of the blocks that label queries
// (LabelNames, LabelValues, Series, ProfileTypes) see whole (default 1 h);
// 0 makes them exact.
func WithBlockDuration(d time.Duration) Option { return func(s *Server) { s.limits.block = d } }

// Server is the stand-in. Create it with New and start it with Start.
type Server struct {
	tenant               string
	basicUser, basicPass string
	bearer               string
	tlsConfig            *tls.Config
	limits               limits

	store   store
	handler http.Handler

	mu       sync.Mutex
	mode     Mode
	addr     string
	srv      *http.Server
	accepted []*pushv1.PushRequest
	attempts int
	closed   bool
}

// New builds a stand-in; it serves nothing until Start.
func New(opts ...Option) *Server {
	s := &Server{limits: defaultLimits()}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.Handle(pushv1connect.NewPusherServiceHandler(&pusher{s: s}))
	mux.Handle(querierv1connect.NewQuerierServiceHandler(&querier{st: &s.store, lim: &s.limits}))
	s.handler = s.gate(mux)
	return s
}

// Handler returns the stand-in's HTTP handler, modes and auth included
// (Down then behaves as 503, as there is no listener to close).
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves.
func (s *Server) Start(addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("pyrostandin: already started")
	}
	return s.listenLocked(addr)
}

func (s *Server) listenLocked(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("pyrostandin: %w", err)
	}
	// Keep the port, so that Down then Up comes back where clients look.
	s.addr = ln.Addr().String()
	srv := &http.Server{Handler: s.handler, TLSConfig: s.tlsConfig}
	s.srv = srv
	go func() {
		if s.tlsConfig != nil {
			_ = srv.ServeTLS(ln, "", "")
		} else {
			_ = srv.Serve(ln)
		}
	}()
	return nil
}

// Addr is the host:port it listens on.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL is the base URL for clients.
func (s *Server) URL() string {
	scheme := "http"
	if s.tlsConfig != nil {
		scheme = "https"
	}
	return scheme + "://" + s.Addr()
}

// SetMode switches how the stand-in answers. Down closes the listener and
// every open connection; leaving Down listens on the same address again.
func (s *Server) SetMode(m Mode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("pyrostandin: closed")
	}
	prev := s.mode
	s.mode = m
	switch {
	case m == Down && prev != Down && s.srv != nil:
		err := s.srv.Close()
		s.srv = nil
		return err
	case m != Down && prev == Down && s.addr != "" && s.srv == nil:
		return s.listenLocked(s.addr)
	}
	return nil
}

// Close stops serving.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.srv == nil {
		return nil
	}
	err := s.srv.Close()
	s.srv = nil
	return err
}

// AcceptedPushes returns how many push requests were accepted and stored.
func (s *Server) AcceptedPushes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.accepted)
}

// Accepted returns copies of the accepted push requests, in arrival order.
func (s *Server) Accepted() []*pushv1.PushRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pushv1.PushRequest, len(s.accepted))
	for i, r := range s.accepted {
		out[i] = proto.Clone(r).(*pushv1.PushRequest)
	}
	return out
}

// Attempts returns how many requests reached the stand-in, rejected or not.
func (s *Server) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// gate applies the failure mode and the auth requirements before the API.
func (s *Server) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		mode := s.mode
		s.attempts++
		s.mu.Unlock()
		// A real server's Date is its own clock, which the agent reads to
		// see how far the node's clock is off; net/http would send the
		// host's time, so the stand-in sends its clock's (WithClock).
		w.Header().Set("Date", s.limits.now().UTC().Format(http.TimeFormat))
		switch mode {
		case Down, Status503:
			// What a load balancer says: plain text, no Connect error body.
			http.Error(w, "service unavailable", http.StatusServiceUnavailable)
			return
		case Status400:
			writeConnectError(w, http.StatusBadRequest, "invalid_argument", "stand-in forced HTTP 400")
			return
		}
		if s.tenant != "" && r.Header.Get("X-Scope-OrgID") != s.tenant {
			writeConnectError(w, http.StatusUnauthorized, "unauthenticated", "no org id")
			return
		}
		if !s.authorized(r) {
			writeConnectError(w, http.StatusUnauthorized, "unauthenticated", "invalid credentials")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) authorized(r *http.Request) bool {
	eq := func(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
	auth := r.Header.Get("Authorization")
	switch {
	case s.basicUser != "":
		scheme, rest, _ := strings.Cut(auth, " ")
		if !strings.EqualFold(scheme, "basic") {
			return false
		}
		b, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return false
		}
		u, p, _ := strings.Cut(string(b), ":")
		return eq(u, s.basicUser) && eq(p, s.basicPass)
	case s.bearer != "":
		scheme, rest, _ := strings.Cut(auth, " ")
		return strings.EqualFold(scheme, "bearer") && eq(rest, s.bearer)
	}
	return true
}

func writeConnectError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"code":%q,"message":%q}`, code, msg)
}

type pusher struct {
	pushv1connect.UnimplementedPusherServiceHandler
	s *Server
}

// Push stores every valid series of the request and answers the first
// error of the others, as the real server does: a request with one bad
// series is a 400, yet its good series are kept. A request is accepted
// (counted in Accepted) only when all of it is.
func (p *pusher) Push(_ context.Context, req *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	profiles, err := ingest(req.Msg, p.s.limits.ingestionWindow(), p.s.limits.now())
	p.s.mu.Lock()
	p.s.store.add(profiles)
	if err == nil {
		p.s.accepted = append(p.s.accepted, proto.Clone(req.Msg).(*pushv1.PushRequest))
	}
	p.s.mu.Unlock()
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return connect.NewResponse(&pushv1.PushResponse{}), nil
}
