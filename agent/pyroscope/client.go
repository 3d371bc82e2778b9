// Package pyroscope pushes job-labelled pprof profiles to Grafana Pyroscope
// through push.v1.PusherService/Push, and ships them from the agent's
// on-disk spool in order, with retries, so that a backend outage loses
// nothing while the spool has room.
package pyroscope

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
)

// TenantHeader carries the tenant to a multi-tenant Pyroscope (and to a
// Grafana Enterprise / Cloud gateway).
const TenantHeader = "X-Scope-OrgID"

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
type TLSConfig struct {
	CAFile             string // PEM bundle of CAs to trust instead of the system's
	CertFile, KeyFile  string // client certificate, for mutual TLS
	ServerName         string // overrides the name checked in the server's certificate
	InsecureSkipVerify bool   // never in production: trusts any certificate
}

func (c TLSConfig) enabled() bool {
	return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify
}

func (c TLSConfig) build() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // opt-in
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("pyroscope TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("pyroscope TLS CA: no PEM certificate in %s", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("pyroscope TLS: a client certificate needs both a cert file and a key file")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("pyroscope TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

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
	if cfg.BearerTokenFile != "" && (cfg.BasicAuthUser != "" || cfg.BasicAuthPasswordFile != "") {
		return nil, errors.New("pyroscope: configure basic auth or a bearer token, not both")
	}
	if (cfg.BasicAuthUser == "") != (cfg.BasicAuthPasswordFile == "") {
		return nil, errors.New("pyroscope: basic auth needs both a user and a password file")
	}
	rt := cfg.Transport
	if rt == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if u.Scheme == "https" || cfg.TLS.enabled() {
			tc, err := cfg.TLS.build()
			if err != nil {
				return nil, err
			}
			tr.TLSClientConfig = tc
		}
		rt = tr
	}
	h := &headers{next: rt, tenant: cfg.Tenant}
	if cfg.BasicAuthPasswordFile != "" {
		h.basicUser = cfg.BasicAuthUser
		h.secret = &secretFile{path: cfg.BasicAuthPasswordFile}
	} else if cfg.BearerTokenFile != "" {
		h.secret = &secretFile{path: cfg.BearerTokenFile}
	}
	if h.secret != nil {
		if _, err := h.secret.get(); err != nil {
			return nil, err
		}
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	base := strings.TrimSuffix(u.String(), "/")
	return &Client{
		push:    pushv1connect.NewPusherServiceClient(&http.Client{Transport: h}, base),
		timeout: timeout,
	}, nil
}

type statusKey struct{}

// Push sends req. A failure is a *PushError that says whether to retry.
func (c *Client) Push(ctx context.Context, req *pushv1.PushRequest) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	// The transport records the HTTP status here: connect's error codes
	// alone cannot tell a proxy's 400 from a server's 500.
	var status int
	ctx = context.WithValue(ctx, statusKey{}, &status)
	_, err := c.push.Push(ctx, connect.NewRequest(req))
	if err == nil {
		return nil
	}
	return classify(err, status)
}

// headers adds the tenant and credentials to every request and records the
// response status.
type headers struct {
	next      http.RoundTripper
	tenant    string
	basicUser string
	secret    *secretFile
}

func (h *headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.tenant != "" {
		r.Header.Set(TenantHeader, h.tenant)
	}
	if h.secret != nil {
		s, err := h.secret.get()
		if err != nil {
			return nil, err
		}
		if h.basicUser != "" {
			r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(h.basicUser+":"+s)))
		} else {
			r.Header.Set("Authorization", "Bearer "+s)
		}
	}
	resp, err := h.next.RoundTrip(r)
	if resp != nil {
		if p, ok := r.Context().Value(statusKey{}).(*int); ok {
			*p = resp.StatusCode
		}
	}
	return resp, err
}

// secretFile is a password or token kept in a file (a Kubernetes secret, a
// file only root reads). It is re-read when its modification time or size
// changes, which is cheap enough to check on every push.
type secretFile struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	value   string
}

func (f *secretFile) get() (string, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return "", fmt.Errorf("pyroscope credentials: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.value != "" && fi.ModTime().Equal(f.modTime) && fi.Size() == f.size {
		return f.value, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("pyroscope credentials: %w", err)
	}
	v := string(bytes.TrimRight(b, "\r\n"))
	if v == "" {
		return "", fmt.Errorf("pyroscope credentials: %s is empty", f.path)
	}
	f.value, f.modTime, f.size = v, fi.ModTime(), fi.Size()
	return v, nil
}
