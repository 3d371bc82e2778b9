// Package pyroscope pushes job-labelled pprof profiles to Grafana Pyroscope
// through push.v1.PusherService/Push, and ships them from the agent's
// on-disk spool in order, with retries, so that a backend outage loses
// nothing while the spool has room.
package pyroscope

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/slurmscope/slurmscope/agent/httpclient"
)

// TenantHeader carries the tenant to a multi-tenant Pyroscope (and to a
// Grafana Enterprise / Cloud gateway).
const TenantHeader = httpclient.TenantHeader

// Config is how the agent reaches Pyroscope.
type Config struct {
	// URL is the server's base URL, e.g. https://pyroscope:4040. A path
	// prefix (a gateway's) is kept.
	URL string
	// Tenant is sent as X-Scope-OrgID when not empty.
	Tenant string

	// BasicAuthUser and BasicAuthPasswordFile enable basic auth. The file is
	// re-read when it changes, so credentials rotate without a restart.
	BasicAuthUser         string
	BasicAuthPasswordFile string
	// BearerTokenFile enables bearer auth; re-read when it changes.
	// Exclusive with basic auth.
	BearerTokenFile string

	TLS TLSConfig

	// Timeout bounds one push, connection included. Default 30 s.
	Timeout time.Duration
	// Transport replaces the HTTP transport (tests); TLS is then ignored.
	Transport http.RoundTripper
}

// TLSConfig configures TLS to the server.
type TLSConfig = httpclient.TLSConfig

// Pusher sends one push request. *Client implements it; the shipper takes
// the interface so that it can be tested without a server.
type Pusher interface {
	Push(ctx context.Context, req *pushv1.PushRequest) error
}

// Client is a Pyroscope push client. It is safe for concurrent use.
type Client struct {
	push    pushv1connect.PusherServiceClient
	timeout time.Duration
}

// NewClient validates cfg and builds a client. It reads the credential and
// TLS files once now, so that a wrong path fails at start-up.
func NewClient(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("pyroscope URL %q: want http(s)://host[:port][/prefix]", cfg.URL)
	}
	rt, err := httpclient.New("pyroscope", u.Scheme, cfg.TLS, httpclient.Auth{
		Tenant: cfg.Tenant, BasicAuthUser: cfg.BasicAuthUser,
		BasicAuthPasswordFile: cfg.BasicAuthPasswordFile, BearerTokenFile: cfg.BearerTokenFile,
	}, cfg.Transport)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	base := strings.TrimSuffix(u.String(), "/")
	return &Client{
		push:    pushv1connect.NewPusherServiceClient(&http.Client{Transport: rt}, base),
		timeout: timeout,
	}, nil
}

// Push sends req. A failure is a *PushError that says whether to retry.
func (c *Client) Push(ctx context.Context, req *pushv1.PushRequest) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	// The transport records the HTTP status here: connect's error codes
	// alone cannot tell a proxy's 400 from a server's 500.
	var status int
	ctx = httpclient.RecordStatus(ctx, &status)
	_, err := c.push.Push(ctx, connect.NewRequest(req))
	if err == nil {
		return nil
	}
	return classify(err, status)
}
