// Package pyroscope pushes job-labelled pprof profiles to Grafana Pyroscope
// through push.v1.PusherService/Push, and ships them from the agent's
// on-disk spool in order, with retries (package ship), so that a backend
// outage loses nothing while the spool has room. Profiles the server's
// ingestion window refuses are dropped as too old or held until it takes
// them (window.go).
package pyroscope

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/logx"
)

// TenantHeader carries the tenant to a multi-tenant Pyroscope (and to a
// Grafana Enterprise / Cloud gateway).
const TenantHeader = httpclient.TenantHeader

// Config is how the agent reaches Pyroscope. Its URL is the server's base
// URL, e.g. https://pyroscope:4040; a path prefix (a gateway's) is kept.
type Config struct {
	httpclient.Config
}

// TLSConfig configures TLS to the server.
type TLSConfig = httpclient.TLSConfig

// Pusher sends one push request. *Client implements it; the shipper takes
// the interface so that it can be tested without a server.
type Pusher interface {
	Push(ctx context.Context, req *pushv1.PushRequest) error
}

var _ Pusher = (*Client)(nil)

// Client is a Pyroscope push client. It is safe for concurrent use.
type Client struct {
	push    pushv1connect.PusherServiceClient
	url     string // of the push, without credentials: for errors
	timeout time.Duration
	clock   *Clock
}

// NewClient validates cfg and builds a client. It reads the credential and
// TLS files once now, so that a wrong path fails at start-up.
func NewClient(cfg Config) (*Client, error) {
	u, rt, err := cfg.Build("pyroscope", "http(s)://host[:port][/prefix]")
	if err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(u.String(), "/")
	clock := NewClock(nil)
	return &Client{
		push:    pushv1connect.NewPusherServiceClient(&http.Client{Transport: dateRecorder{rt, clock}}, base),
		url:     strings.TrimSuffix(httpclient.RedactURL(u), "/") + pushv1connect.PusherServicePushProcedure,
		timeout: cfg.RequestTimeout(),
		clock:   clock,
	}, nil
}

// Clock is the server's clock as the Date headers of its responses tell
// it; a Shipper judges the ingestion window by it.
func (c *Client) Clock() *Clock { return c.clock }

// Push sends req. A failure is a *PushError that says whether to retry.
func (c *Client) Push(ctx context.Context, req *pushv1.PushRequest) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	// The transport records the HTTP status and Retry-After here: connect's
	// errors alone cannot tell a proxy's 400 from a server's 500.
	var resp httpclient.Response
	ctx = httpclient.RecordResponse(ctx, &resp)
	_, err := c.push.Push(ctx, connect.NewRequest(req))
	if err == nil {
		return nil
	}
	return classify(&requestError{url: c.url, err: err}, resp)
}

// requestError names the push's URL (without credentials) before what
// connect said, in one bounded line, as remote write's errors do: connect
// already keeps a proxy's HTML page out (a 502 is "unavailable: 502 Bad
// Gateway"), but a server's message may be long.
type requestError struct {
	url string
	err error
}

func (e *requestError) Error() string {
	return fmt.Sprintf("Post %q: %s", e.url, logx.Line(e.err.Error(), maxServerMessage))
}

// maxServerMessage bounds what connect said: Pyroscope's own refusals
// quote the series' labels, and name the label at fault after them.
const maxServerMessage = 400

func (e *requestError) Unwrap() error { return e.err }
