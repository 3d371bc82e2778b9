package httpclient

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slurmscope/slurmscope/internal/units"
)

// DefaultTimeout bounds one request when Config.Timeout is not set.
const DefaultTimeout = 30 * time.Second

// Config is how the agent reaches one backend over HTTP: what Pyroscope's
// and remote write's configurations share, so that both take the same
// settings (and flags, see RegisterFlags).
type Config struct {
	// URL is the backend's URL. A path prefix (a gateway's) is kept.
	URL string
	// Tenant is sent as X-Scope-OrgID when not empty.
	Tenant string

	// BasicAuthUser and BasicAuthPasswordFile enable basic auth. The file
	// is re-read when it changes, so credentials rotate without a restart.
	BasicAuthUser         string
	BasicAuthPasswordFile string
	// BearerTokenFile enables bearer auth; re-read when it changes.
	// Exclusive with basic auth.
	BearerTokenFile string

	TLS TLSConfig

	// Timeout bounds one request, connection included. Default 30 s.
	Timeout time.Duration
	// Transport replaces the HTTP transport (tests); TLS is then ignored.
	Transport http.RoundTripper
}

// Auth returns c's tenant and credentials.
func (c Config) Auth() Auth {
	return Auth{Tenant: c.Tenant, BasicAuthUser: c.BasicAuthUser,
		BasicAuthPasswordFile: c.BasicAuthPasswordFile, BearerTokenFile: c.BearerTokenFile}
}

// RequestTimeout is Timeout, or DefaultTimeout when it is not set.
func (c Config) RequestTimeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// Build checks c and returns the backend's URL and what to send through
// (see New). It reads the credential and TLS files once now, so that a wrong
// path fails at start-up. name starts every error; form says what a URL
// should look like ("http(s)://host[:port][/prefix]").
func (c Config) Build(name, form string) (*url.URL, http.RoundTripper, error) {
	u, err := url.Parse(c.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, nil, fmt.Errorf("%s URL %q: want %s", name, c.URL, form)
	}
	rt, err := New(name, u.Scheme, c.TLS, c.Auth(), c.Transport)
	if err != nil {
		return nil, nil, err
	}
	return u, rt, nil
}

// CheckFlags checks what RegisterFlags(fs, prefix, ...) set before
// anything starts, in one line that names the flag: a URL (when set) must
// be http(s)://host..., as example shows, and the timeout positive.
func (c Config) CheckFlags(prefix, example string) error {
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("--%s-url %q: want an http:// or https:// URL with a host, e.g. %s", prefix, c.URL, example)
		}
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("--%s-timeout %v: must be positive", prefix, c.Timeout)
	}
	return nil
}

// RegisterFlags registers the flags that set c, each named
// --<prefix>-<setting>: url, tenant, basic-auth-user,
// basic-auth-password-file, bearer-token-file, ca-file, cert-file, key-file,
// server-name, insecure-skip-verify and timeout. backend names the backend
// in the help texts; urlHelp is the help of the URL flag.
func RegisterFlags(fs *flag.FlagSet, prefix string, c *Config, backend, urlHelp string) {
	p := "--" + prefix + "-"
	fs.StringVar(&c.URL, prefix+"-url", "", urlHelp)
	fs.StringVar(&c.Tenant, prefix+"-tenant", "", "tenant id for "+backend+", sent as X-Scope-OrgID")
	fs.StringVar(&c.BasicAuthUser, prefix+"-basic-auth-user", "", "basic auth user for "+backend+" (with "+p+"basic-auth-password-file)")
	fs.StringVar(&c.BasicAuthPasswordFile, prefix+"-basic-auth-password-file", "", "file holding the basic auth password for "+backend+" (re-read when it changes)")
	fs.StringVar(&c.BearerTokenFile, prefix+"-bearer-token-file", "", "file holding a bearer token for "+backend+" (re-read when it changes)")
	fs.StringVar(&c.TLS.CAFile, prefix+"-ca-file", "", "PEM CA bundle to verify "+backend+" with")
	fs.StringVar(&c.TLS.CertFile, prefix+"-cert-file", "", "client certificate for mutual TLS with "+backend)
	fs.StringVar(&c.TLS.KeyFile, prefix+"-key-file", "", "client key for mutual TLS with "+backend)
	fs.StringVar(&c.TLS.ServerName, prefix+"-server-name", "", "server name to verify in "+backend+"'s certificate instead of the URL's host")
	fs.BoolVar(&c.TLS.InsecureSkipVerify, prefix+"-insecure-skip-verify", false, "INSECURE, testing only: do not verify "+backend+"'s certificate, so that anyone on the path can impersonate it")
	fs.Var(units.NewDuration(&c.Timeout, DefaultTimeout), prefix+"-timeout", "timeout of one request to "+backend)
}

// ClassifyStatus says whether a request answered with an error status may
// succeed later, and why it failed: "rate_limited" (429), "timeout" (408),
// "auth" (401, 403), "unavailable" (5xx) are worth retrying, anything else
// ("rejected": other 4xx, and 3xx where redirects are not followed) is a
// verdict on the request. 401 and 403 are retried because the credentials
// are re-read from their files: an operator's fix should let the backlog
// through rather than lose it.
func ClassifyStatus(status int) (retryable bool, reason string) {
	switch {
	case status == http.StatusTooManyRequests:
		return true, "rate_limited"
	case status == http.StatusRequestTimeout:
		return true, "timeout"
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return true, "auth"
	case status >= 500:
		return true, "unavailable"
	default:
		return false, "rejected"
	}
}

// ClassifyError names a request that got no response: "auth" for a secret
// file that cannot be used, "timeout", or "unavailable". All are worth
// retrying.
func ClassifyError(err error) (reason string) {
	var ce *CredentialsError
	var ne net.Error
	switch {
	case errors.As(err, &ce):
		return "auth"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	default:
		return "unavailable"
	}
}

// maxRetryAfter caps what a server may ask for: a typo must not park the
// spool for days.
const maxRetryAfter = time.Hour

// ParseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date
// (relative to now). Absent, past, zero or unreadable values give 0, and the
// caller's own backoff applies; values are capped at an hour.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		d = time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}
