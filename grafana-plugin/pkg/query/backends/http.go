// Package backends holds the HTTP clients of the query engine: Pyroscope's
// Connect querier API and Prometheus' HTTP API, with the tenant header,
// basic or bearer auth and TLS that a datasource's settings ask for.
//
// Every error says which backend failed and why in words a Grafana user can
// act on: refused, timed out, HTTP status with the server's message.
package backends

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// TenantHeader carries the tenant to multi-tenant Pyroscope and Mimir.
const TenantHeader = "X-Scope-OrgID"

// Config is how to reach one backend.
type Config struct {
	URL      string
	TenantID string
	// Basic auth when BasicUser is set, else bearer when BearerToken is.
	BasicUser, BasicPassword string
	BearerToken              string
	TLS                      TLS
	Timeout                  time.Duration // per call; 0 means 30 s
}

// TLS holds PEM contents, as Grafana's secureJsonData carries them.
type TLS struct {
	CACert                string
	ClientCert, ClientKey string
	ServerName            string
	InsecureSkipVerify    bool
}

// DefaultTimeout bounds a backend call when the settings do not.
const DefaultTimeout = 30 * time.Second

func (c Config) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// UserAgent names the datasource to the servers it calls.
const UserAgent = "slurmscope-datasource"

// client is what both backends share: the base URL, an HTTP client that
// adds the tenant, credentials and user agent to every request, the
// per-call timeout, and the backend's name on its errors.
type client struct {
	name    string
	base    *url.URL
	hc      *http.Client
	timeout time.Duration
}

// client builds the client for c; name ("pyroscope", "prometheus")
// prefixes its errors.
func (c Config) client(name string) (client, error) {
	u, err := url.Parse(strings.TrimRight(c.URL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return client{}, fmt.Errorf("%s: URL %q is not an http(s) URL", name, c.URL)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if u.Scheme == "https" || c.TLS != (TLS{}) {
		tc, err := c.TLS.build()
		if err != nil {
			return client{}, fmt.Errorf("%s: %w", name, err)
		}
		tr.TLSClientConfig = tc
	}
	return client{name: name, base: u, hc: &http.Client{Transport: &authTransport{cfg: c, next: tr}}, timeout: c.timeout()}, nil
}

// maxBody bounds a response: a flame graph of 8,192 nodes is a few
// hundred kB; anything past this is a misconfigured URL.
const maxBody = 256 << 20

// roundTrip sends one request to path (with its query string) under the
// timeout and reads the answer, at most maxBody of it. A failure that left
// no HTTP answer comes back worded (transportError); any status is the
// caller's to judge.
func (c *client) roundTrip(ctx context.Context, method, path string, body io.Reader, header http.Header) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return 0, nil, c.fail(0, err.Error(), err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, transportError(c.name, c.timeout, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		return 0, nil, transportError(c.name, c.timeout, err)
	}
	return res.StatusCode, b, nil
}

// fail is an error of this backend; status 0 when no answer came.
func (c *client) fail(status int, msg string, err error) *Error {
	return &Error{Backend: c.name, Status: status, Msg: msg, Err: err}
}

func (t TLS) build() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} // #nosec G402 -- an explicit opt-in ("Skip TLS verification", described as insecure, for testing only); off by default
	if t.CACert != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(t.CACert)) {
			return nil, errors.New("TLS CA certificate: no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if (t.ClientCert == "") != (t.ClientKey == "") {
		return nil, errors.New("TLS client authentication needs both a certificate and a key")
	}
	if t.ClientCert != "" {
		cert, err := tls.X509KeyPair([]byte(t.ClientCert), []byte(t.ClientKey))
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// authTransport adds the user agent, the tenant and the credentials to
// every request.
type authTransport struct {
	cfg  Config
	next http.RoundTripper
}

func (t *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("User-Agent", UserAgent)
	if t.cfg.TenantID != "" {
		r.Header.Set(TenantHeader, t.cfg.TenantID)
	}
	switch {
	case t.cfg.BasicUser != "":
		r.SetBasicAuth(t.cfg.BasicUser, t.cfg.BasicPassword)
	case t.cfg.BearerToken != "":
		r.Header.Set("Authorization", "Bearer "+t.cfg.BearerToken)
	}
	return t.next.RoundTrip(r)
}

// Error is a failed backend call.
type Error struct {
	Backend string // "pyroscope" or "prometheus"
	Status  int    // HTTP status, 0 if none came back
	Msg     string
	Err     error
}

func (e *Error) Error() string { return e.Backend + ": " + e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// transportError words a failure that left no HTTP answer.
func transportError(backend string, timeout time.Duration, err error) *Error {
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return &Error{Backend: backend, Msg: fmt.Sprintf("no answer within %s (timed out)", timeout), Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{Backend: backend, Msg: "request cancelled", Err: err}
	case errors.As(err, &oe) && oe.Op == "dial":
		return &Error{Backend: backend, Msg: fmt.Sprintf("cannot connect: %v", oe.Err), Err: err}
	}
	return &Error{Backend: backend, Msg: err.Error(), Err: err}
}

// statusError words an HTTP error answer.
func statusError(backend string, status int, msg string) *Error {
	msg = strings.TrimSpace(msg)
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	text := fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		text += " (check the credentials and tenant in the datasource settings)"
	case status >= 500:
		text += " (the server or a gateway in front of it is failing)"
	}
	if msg != "" {
		text += ": " + msg
	}
	return &Error{Backend: backend, Status: status, Msg: text}
}
