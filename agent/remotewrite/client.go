package remotewrite

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/ship"
)

// TenantHeader carries the tenant to a multi-tenant receiver (Mimir, Cortex,
// a Grafana Cloud gateway).
const TenantHeader = httpclient.TenantHeader

// TLSConfig configures TLS to the receiver.
type TLSConfig = httpclient.TLSConfig

// SendError is a failed request, classified for the shipper: Retryable, a
// Reason ("unavailable", "timeout", "rate_limited", "auth", "rejected"), the
// HTTP status and the receiver's Retry-After.
type SendError = ship.Error

// IsRetryable reports whether err is worth retrying. Unclassified errors are
// retryable: keeping data is the safe default.
func IsRetryable(err error) bool { return ship.IsRetryable(err) }

const op = "remote write"

// client POSTs encoded requests to one receiver. Safe for concurrent use.
type client struct {
	url       string
	http      *http.Client
	timeout   time.Duration
	userAgent string
}

func newClient(cfg Config) (*client, error) {
	u, rt, err := cfg.Build(op, "http(s)://host[:port]/path, e.g. http://prometheus:9090/api/v1/write")
	if err != nil {
		return nil, err
	}
	c := &client{
		url:     u.String(),
		timeout: cfg.RequestTimeout(),
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
// The status classification follows the remote-write spec (retry 5xx and
// 429, never other 4xx) with the exceptions of httpclient.ClassifyStatus:
// 401/403 and 408 are retried.
func (c *client) send(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return &SendError{Op: op, Err: err, Reason: ship.DropRejected}
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	req.Header.Set("User-Agent", c.userAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		se := &SendError{Op: op, Err: err, Retryable: true, Reason: httpclient.ClassifyError(err)}
		var ce *httpclient.CredentialsError
		if errors.As(err, &ce) {
			// The URL that *url.Error adds says nothing about a bad secret file.
			se.Err = ce
		}
		return se
	}
	defer resp.Body.Close()
	serr := httpclient.ResponseError(resp)
	if serr == nil {
		// Drain a little so the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil
	}
	// The receiver's reason (e.g. "out of order sample") is worth logging;
	// ResponseError keeps it to one short line, and a proxy's HTML page out.
	retry, reason := httpclient.ClassifyStatus(resp.StatusCode)
	return &SendError{
		Op: op, Retryable: retry, Reason: reason, HTTPStatus: resp.StatusCode,
		RetryAfter: httpclient.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		Err:        serr,
	}
}
