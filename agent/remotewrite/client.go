package remotewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slurmscope/slurmscope/agent/httpclient"
)

// TenantHeader carries the tenant to a multi-tenant receiver (Mimir, Cortex,
// a Grafana Cloud gateway).
const TenantHeader = httpclient.TenantHeader

// TLSConfig configures TLS to the receiver.
type TLSConfig = httpclient.TLSConfig

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
	var ce *httpclient.CredentialsError
	if errors.As(err, &ce) {
		// The URL that *url.Error adds says nothing about a bad secret file.
		se.Reason, se.Err = "auth", ce
	}
	return se
}

// client POSTs encoded requests to one receiver. Safe for concurrent use.
type client struct {
	url       string
	http      *http.Client
	timeout   time.Duration
	userAgent string
}

func newClient(cfg Config) (*client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("remote write URL %q: want http(s)://host[:port]/path, e.g. http://prometheus:9090/api/v1/write", cfg.URL)
	}
	rt, err := httpclient.New("remote write", u.Scheme, cfg.TLS, httpclient.Auth{
		Tenant: cfg.Tenant, BasicAuthUser: cfg.BasicAuthUser,
		BasicAuthPasswordFile: cfg.BasicAuthPasswordFile, BearerTokenFile: cfg.BearerTokenFile,
	}, cfg.Transport)
	if err != nil {
		return nil, err
	}
	c := &client{
		url:     u.String(),
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
