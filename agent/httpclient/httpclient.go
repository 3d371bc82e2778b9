// Package httpclient is the HTTP plumbing shared by the agent's backend
// clients (Pyroscope push, Prometheus remote write): TLS from files, a
// tenant header, and basic or bearer credentials read from files that are
// re-read when they change, so that secrets rotate without a restart.
//
// Errors name the backend ("pyroscope ...", "remote write ...") because an
// agent talks to several and its operator must tell them apart.
package httpclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// TenantHeader carries the tenant to a multi-tenant backend (Pyroscope,
// Mimir, Cortex, a Grafana Enterprise / Cloud gateway).
const TenantHeader = "X-Scope-OrgID"

// TLSConfig configures TLS to the server.
type TLSConfig struct {
	CAFile             string // PEM bundle of CAs to trust instead of the system's
	CertFile, KeyFile  string // client certificate, for mutual TLS
	ServerName         string // overrides the name checked in the server's certificate
	InsecureSkipVerify bool   // never in production: trusts any certificate
}

// Enabled reports whether any TLS setting is made.
func (c TLSConfig) Enabled() bool {
	return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify
}

// Build reads the files and returns the client's TLS configuration. Its
// errors start with "TLS"; callers put the backend's name in front.
func (c TLSConfig) Build() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify} // #nosec G402 -- an explicit opt-in (-<backend>-insecure-skip-verify, whose help says INSECURE, testing only); off by default
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA: no PEM certificate in %s", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("TLS: a client certificate needs both a cert file and a key file")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// BaseTransport returns a clone of http.DefaultTransport, with TLS from tc
// when scheme is "https" or tc sets anything.
func BaseTransport(scheme string, tc TLSConfig) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if scheme == "https" || tc.Enabled() {
		c, err := tc.Build()
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = c
	}
	return tr, nil
}

// Auth is what identifies the agent to the backend.
type Auth struct {
	// Tenant is sent as X-Scope-OrgID when not empty.
	Tenant string
	// BasicAuthUser and BasicAuthPasswordFile enable basic auth.
	BasicAuthUser         string
	BasicAuthPasswordFile string
	// BearerTokenFile enables bearer auth. Exclusive with basic auth.
	BearerTokenFile string
}

// Validate checks that a asks for one kind of credentials, completely. It
// reads no file.
func (a Auth) Validate() error {
	if a.BearerTokenFile != "" && (a.BasicAuthUser != "" || a.BasicAuthPasswordFile != "") {
		return errors.New("configure basic auth or a bearer token, not both")
	}
	if (a.BasicAuthUser == "") != (a.BasicAuthPasswordFile == "") {
		return errors.New("basic auth needs both a user and a password file")
	}
	return nil
}

// New is what a backend client sends through: base, or when base is nil
// BaseTransport(scheme, tc), wrapped by NewTransport. It checks a before
// reading any TLS file, so that the plainer mistake is reported first.
func New(name, scheme string, tc TLSConfig, a Auth, base http.RoundTripper) (http.RoundTripper, error) {
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if base == nil {
		tr, err := BaseTransport(scheme, tc)
		if err != nil {
			return nil, fmt.Errorf("%s %w", name, err)
		}
		base = tr
	}
	return NewTransport(name, base, a)
}

// NewTransport wraps base so that every request carries a's tenant and
// credentials. It reads the secret file once now, so that a wrong path fails
// at start-up; name starts its errors ("pyroscope" gives "pyroscope
// credentials: ..."). Requests whose context comes from RecordResponse get
// the response's status recorded.
func NewTransport(name string, base http.RoundTripper, a Auth) (http.RoundTripper, error) {
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	t := &transport{next: base, tenant: a.Tenant}
	if a.BasicAuthPasswordFile != "" {
		t.basicUser = a.BasicAuthUser
		t.secret = &secretFile{name: name, path: a.BasicAuthPasswordFile}
	} else if a.BearerTokenFile != "" {
		t.secret = &secretFile{name: name, path: a.BearerTokenFile}
	}
	if t.secret != nil {
		if _, err := t.secret.get(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

type responseKey struct{}

// Response is what the transport records of a response for RecordResponse.
type Response struct {
	Status     int           // the HTTP status
	RetryAfter time.Duration // the Retry-After header, 0 when absent or unusable
}

// RecordResponse returns a context that makes the transport store the
// status and Retry-After of the response in *r (left alone when none came
// back). Some protocols' errors (connect's) cannot tell a proxy's 400 from a
// server's 500, and carry no headers.
func RecordResponse(ctx context.Context, r *Response) context.Context {
	return context.WithValue(ctx, responseKey{}, r)
}

// transport adds the tenant and credentials to every request and records
// the response status.
type transport struct {
	next      http.RoundTripper
	tenant    string
	basicUser string
	secret    *secretFile
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	// A RoundTripper must not modify the caller's request.
	r = r.Clone(r.Context())
	if t.tenant != "" {
		r.Header.Set(TenantHeader, t.tenant)
	}
	if t.secret != nil {
		s, err := t.secret.get()
		if err != nil {
			return nil, err
		}
		if t.basicUser != "" {
			r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(t.basicUser+":"+s)))
		} else {
			r.Header.Set("Authorization", "Bearer "+s)
		}
	}
	resp, err := t.next.RoundTrip(r)
	if resp != nil {
		if p, ok := r.Context().Value(responseKey{}).(*Response); ok {
			*p = Response{Status: resp.StatusCode, RetryAfter: ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
		}
	}
	return resp, err
}

// CredentialsError is a secret file that cannot be used: missing,
// unreadable, empty, or holding what cannot go in a header. Callers classify
// it as an authentication problem, which an operator's fix resolves.
type CredentialsError struct {
	Name string // the backend, e.g. "remote write"
	Err  error
}

func (e *CredentialsError) Error() string { return e.Name + " credentials: " + e.Err.Error() }
func (e *CredentialsError) Unwrap() error { return e.Err }

// secretFile is a password or token kept in a file (a Kubernetes secret, a
// file only root reads). It is re-read when its modification time or size
// changes, which is cheap enough to check on every request.
type secretFile struct {
	name, path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	value   string
}

func (f *secretFile) get() (string, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return "", f.fail(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.value != "" && fi.ModTime().Equal(f.modTime) && fi.Size() == f.size {
		return f.value, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", f.fail(err)
	}
	v := string(bytes.TrimRight(b, "\r\n"))
	if v == "" {
		return "", f.fail(fmt.Errorf("%s is empty", f.path))
	}
	if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
		// It would make an invalid header; say so instead of failing later.
		return "", f.fail(fmt.Errorf("%s holds control characters", f.path))
	}
	f.value, f.modTime, f.size = v, fi.ModTime(), fi.Size()
	return v, nil
}

func (f *secretFile) fail(err error) error { return &CredentialsError{Name: f.name, Err: err} }
