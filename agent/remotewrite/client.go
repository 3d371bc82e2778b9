package remotewrite

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TenantHeader carries the tenant to a multi-tenant receiver (Mimir, Cortex,
// a Grafana Cloud gateway).
const TenantHeader = "X-Scope-OrgID"

// TLSConfig configures TLS to the receiver.
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
			return nil, fmt.Errorf("remote write TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("remote write TLS CA: no PEM certificate in %s", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("remote write TLS: a client certificate needs both a cert file and a key file")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("remote write TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// SendError is a failed request, classified for the shipper.
type SendError struct {
	// Retryable says the same request may succeed later: the receiver is
	// down, overloaded or timed out, or the credentials are wrong and may be
	// fixed. Otherwise the request itself is at fault and is dropped.
	Retryable bool
	// Reason is a short, stable word for logs: "unavailable", "timeout",
	// "rate_limited", "auth", "rejected".
	Reason string
	// HTTPStatus is the response's status, 0 if none came back.
	HTTPStatus int
	// RetryAfter is the receiver's Retry-After, when it sent one.
	RetryAfter time.Duration
	Err        error
}

func (e *SendError) Error() string {
	kind := "permanent"
	if e.Retryable {
		kind = "retryable"
	}
	if e.HTTPStatus != 0 {
		return fmt.Sprintf("remote write failed (%s, %s, HTTP %d): %v", kind, e.Reason, e.HTTPStatus, e.Err)
	}
	return fmt.Sprintf("remote write failed (%s, %s): %v", kind, e.Reason, e.Err)
}

func (e *SendError) Unwrap() error { return e.Err }

// IsRetryable reports whether err is worth retrying. Unclassified errors are
// retryable: keeping data is the safe default.
func IsRetryable(err error) bool {
	var se *SendError
	if errors.As(err, &se) {
		return se.Retryable
	}
	return err != nil
}

// classifyStatus follows the remote-write spec (retry 5xx and 429, never
// other 4xx) with two exceptions shared with the Pyroscope shipper: 401/403
// are retried, since the credentials are re-read from their files and an
// operator's fix should let the backlog through rather than lose it, and
// 408 is a timeout, not a verdict on the request.
func classifyStatus(status int) (retryable bool, reason string) {
	switch {
	case status == http.StatusTooManyRequests:
		return true, "rate_limited"
	case status == http.StatusRequestTimeout:
		return true, "timeout"
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return true, "auth"
	case status >= 500:
		return true, "unavailable"
	default: // other 4xx, and 3xx since redirects are not followed
		return false, "rejected"
	}
}

func classifyErr(err error) *SendError {
	se := &SendError{Err: err, Retryable: true, Reason: "unavailable"}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		se.Reason = "timeout"
	}
	var ce *credentialsError
	if errors.As(err, &ce) {
		se.Reason = "auth"
	}
	return se
}

// client POSTs encoded requests to one receiver. Safe for concurrent use.
type client struct {
	url       string
	http      *http.Client
	timeout   time.Duration
	tenant    string
	basicUser string
	secret    *secretFile
	userAgent string
}

func newClient(cfg Config) (*client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("remote write URL %q: want http(s)://host[:port]/path, e.g. http://prometheus:9090/api/v1/write", cfg.URL)
	}
	if cfg.BearerTokenFile != "" && (cfg.BasicAuthUser != "" || cfg.BasicAuthPasswordFile != "") {
		return nil, errors.New("remote write: configure basic auth or a bearer token, not both")
	}
	if (cfg.BasicAuthUser == "") != (cfg.BasicAuthPasswordFile == "") {
		return nil, errors.New("remote write: basic auth needs both a user and a password file")
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
	c := &client{
		url:     u.String(),
		tenant:  cfg.Tenant,
		timeout: cfg.Timeout,
		http: &http.Client{
			Transport: rt,
			// A redirected POST may turn into a GET and lose its body; a
			// 3xx is reported instead, so the URL gets fixed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		userAgent: cfg.UserAgent,
	}
	if c.userAgent == "" {
		c.userAgent = "slurmscope-agent"
	}
	if cfg.BasicAuthPasswordFile != "" {
		c.basicUser = cfg.BasicAuthUser
		c.secret = &secretFile{path: cfg.BasicAuthPasswordFile}
	} else if cfg.BearerTokenFile != "" {
		c.secret = &secretFile{path: cfg.BearerTokenFile}
	}
	if c.secret != nil {
		// Read once now, so that a wrong path fails at start-up.
		if _, err := c.secret.get(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// send POSTs one snappy-compressed WriteRequest. A failure is a *SendError.
func (c *client) send(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return &SendError{Err: err, Reason: "rejected"}
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	req.Header.Set("User-Agent", c.userAgent)
	if c.tenant != "" {
		req.Header.Set(TenantHeader, c.tenant)
	}
	if c.secret != nil {
		s, err := c.secret.get()
		if err != nil {
			return classifyErr(err)
		}
		if c.basicUser != "" {
			req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(c.basicUser+":"+s)))
		} else {
			req.Header.Set("Authorization", "Bearer "+s)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return classifyErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		// Drain a little so the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil
	}
	// The receiver's reason (e.g. "out of order sample") is worth logging;
	// bound it, and keep one line.
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	text := strings.Join(strings.Fields(strings.ToValidUTF8(string(msg), "\uFFFD")), " ")
	if text == "" {
		text = http.StatusText(resp.StatusCode)
	}
	if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 && loc != "" {
		text = "redirected to " + loc + "; set the URL to the final address"
	}
	retry, reason := classifyStatus(resp.StatusCode)
	return &SendError{
		Retryable: retry, Reason: reason, HTTPStatus: resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After")),
		Err:        errors.New(text),
	}
}

// parseRetryAfter reads delay-seconds only; an HTTP date, or garbage, is
// ignored and the normal backoff applies.
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}

type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return "remote write credentials: " + e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }

// secretFile is a password or token kept in a file. It is re-read when its
// modification time or size changes, cheap enough to check on every request,
// so credentials rotate without a restart.
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
		return "", &credentialsError{err}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.value != "" && fi.ModTime().Equal(f.modTime) && fi.Size() == f.size {
		return f.value, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", &credentialsError{err}
	}
	v := string(bytes.TrimRight(b, "\r\n"))
	if v == "" {
		return "", &credentialsError{fmt.Errorf("%s is empty", f.path)}
	}
	if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
		// It would make an invalid header; say so instead of failing later.
		return "", &credentialsError{fmt.Errorf("%s holds control characters", f.path)}
	}
	f.value, f.modTime, f.size = v, fi.ModTime(), fi.Size()
	return v, nil
}
