package httpclient_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/httpclient"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// recorder is a server that keeps the headers of every request and answers
// with status (200 when 0).
type recorder struct {
	*httptest.Server
	mu         sync.Mutex
	headers    []http.Header
	status     int
	retryAfter string
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.headers = append(r.headers, req.Header.Clone())
		status, retryAfter := r.status, r.retryAfter
		r.mu.Unlock()
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		if status != 0 {
			w.WriteHeader(status)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) all() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

// get sends one GET through rt and returns the request's error.
func get(t *testing.T, rt http.RoundTripper, url string) error {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func newTransport(t *testing.T, a httpclient.Auth) http.RoundTripper {
	t.Helper()
	rt, err := httpclient.NewTransport("test", http.DefaultTransport, a)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func TestTransportAddsTenantAndCredentials(t *testing.T) {
	srv := newRecorder(t)
	dir := t.TempDir()
	pw := writeFile(t, dir, "pw", "s3cret\n")
	tok := writeFile(t, dir, "token", "tok\r\n")
	for name, tc := range map[string]struct {
		auth                httpclient.Auth
		tenant, authz, user string
	}{
		"nothing":      {},
		"tenant":       {auth: httpclient.Auth{Tenant: "hpc"}, tenant: "hpc"},
		"basic auth":   {auth: httpclient.Auth{Tenant: "hpc", BasicAuthUser: "agent", BasicAuthPasswordFile: pw}, tenant: "hpc", user: "agent"},
		"bearer token": {auth: httpclient.Auth{BearerTokenFile: tok}, authz: "Bearer tok"},
	} {
		srv.mu.Lock()
		srv.headers = nil
		srv.mu.Unlock()
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		resp, err := (&http.Client{Transport: newTransport(t, tc.auth)}).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if len(req.Header) != 0 {
			t.Errorf("%s: the caller's request was modified: %v", name, req.Header)
		}
		h := srv.all()[0]
		if got := h.Get(httpclient.TenantHeader); got != tc.tenant {
			t.Errorf("%s: tenant %q, want %q", name, got, tc.tenant)
		}
		if tc.user != "" {
			if u, p, ok := (&http.Request{Header: h}).BasicAuth(); !ok || u != tc.user || p != "s3cret" {
				t.Errorf("%s: basic auth %q, %q, %v", name, u, p, ok)
			}
		} else if got := h.Get("Authorization"); got != tc.authz {
			t.Errorf("%s: Authorization %q, want %q", name, got, tc.authz)
		}
	}
}

func TestSecretFileIsReReadWhenItChanges(t *testing.T) {
	srv := newRecorder(t)
	dir := t.TempDir()
	tok := writeFile(t, dir, "token", "one")
	rt := newTransport(t, httpclient.Auth{BearerTokenFile: tok})
	send := func() {
		t.Helper()
		if err := get(t, rt, srv.URL); err != nil {
			t.Fatal(err)
		}
	}
	send()
	writeFile(t, dir, "token", "second\n") // another size
	send()
	writeFile(t, dir, "token", "third!\n") // the same size, a later time
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(tok, later, later); err != nil {
		t.Fatal(err)
	}
	send()
	var got []string
	for _, h := range srv.all() {
		got = append(got, h.Get("Authorization"))
	}
	if strings.Join(got, ",") != "Bearer one,Bearer second,Bearer third!" {
		t.Errorf("Authorization headers: %q", got)
	}
}

func TestBadSecretFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	for name, tc := range map[string]struct {
		content, want string
	}{
		"missing":            {"", "no such file"},
		"empty":              {"\n", "is empty"},
		"control characters": {"bad\ntoken", "holds control characters"},
	} {
		path := missing
		if name != "missing" {
			path = writeFile(t, dir, name, tc.content)
		}
		// Read at construction, so that a wrong path fails at start-up.
		_, err := httpclient.NewTransport("remote write", http.DefaultTransport, httpclient.Auth{BearerTokenFile: path})
		var ce *httpclient.CredentialsError
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "remote write credentials: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", name, err)
		}
	}

	// A file that goes bad later fails the request before it is sent.
	srv := newRecorder(t)
	tok := writeFile(t, dir, "token", "good")
	rt := newTransport(t, httpclient.Auth{BasicAuthUser: "u", BasicAuthPasswordFile: tok})
	if err := os.Remove(tok); err != nil {
		t.Fatal(err)
	}
	err := get(t, rt, srv.URL)
	var ce *httpclient.CredentialsError
	if !errors.As(err, &ce) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed password file: %v", err)
	}
	if n := len(srv.all()); n != 0 {
		t.Errorf("%d requests reached the server without credentials", n)
	}
}

func TestAuthValidate(t *testing.T) {
	for _, tc := range []struct {
		auth httpclient.Auth
		ok   bool
	}{
		{httpclient.Auth{}, true},
		{httpclient.Auth{Tenant: "t"}, true},
		{httpclient.Auth{BasicAuthUser: "u", BasicAuthPasswordFile: "/p"}, true},
		{httpclient.Auth{BearerTokenFile: "/t"}, true},
		{httpclient.Auth{BasicAuthUser: "u"}, false},
		{httpclient.Auth{BasicAuthPasswordFile: "/p"}, false},
		{httpclient.Auth{BasicAuthUser: "u", BasicAuthPasswordFile: "/p", BearerTokenFile: "/t"}, false},
		{httpclient.Auth{BasicAuthPasswordFile: "/p", BearerTokenFile: "/t"}, false},
	} {
		if err := tc.auth.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.auth, err)
		}
		// New checks before touching any file, and names the backend.
		_, err := httpclient.New("pyroscope", "http", httpclient.TLSConfig{}, tc.auth, http.DefaultTransport)
		if !tc.ok && (err == nil || !strings.HasPrefix(err.Error(), "pyroscope: ")) {
			t.Errorf("New(%+v): %v", tc.auth, err)
		}
	}
}

func TestRecordResponse(t *testing.T) {
	srv := newRecorder(t)
	srv.status = http.StatusTeapot
	srv.retryAfter = "7"
	rt := newTransport(t, httpclient.Auth{})
	var got httpclient.Response
	req, _ := http.NewRequestWithContext(httpclient.RecordResponse(context.Background(), &got), http.MethodGet, srv.URL, nil)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Status != http.StatusTeapot || got.RetryAfter != 7*time.Second {
		t.Errorf("recorded %+v, want 418 and 7s", got)
	}
	// Without RecordResponse nothing is recorded, and nothing breaks.
	if err := get(t, rt, srv.URL); err != nil {
		t.Fatal(err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"7":     7 * time.Second,
		" 120 ": 2 * time.Minute,
		"86400": time.Hour, // capped
		// The HTTP-date forms (RFC 9110 section 10.2.3 names three).
		"Wed, 04 Mar 2026 05:06:37 GMT":     30 * time.Second,
		"Wednesday, 04-Mar-26 05:07:07 GMT": time.Minute,
		"Wed Mar  4 05:06:17 2026":          10 * time.Second,
		"Thu, 05 Mar 2026 05:06:07 GMT":     time.Hour, // a day: capped
		// Nothing usable: the caller's backoff applies.
		"": 0, "0": 0, "-1": 0, "soon": 0, "1.5": 0, "99999999999999999999": 0,
		"Wed, 21 Oct 2015 07:28:00 GMT": 0, // in the past
		"Wed, 04 Mar 2026 05:06:07 GMT": 0, // now
	} {
		if got := httpclient.ParseRetryAfter(v, now); got != want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestClassifyStatus(t *testing.T) {
	for status, want := range map[int]string{
		429: "rate_limited true", 408: "timeout true", 401: "auth true", 403: "auth true",
		500: "unavailable true", 502: "unavailable true", 503: "unavailable true",
		400: "rejected false", 404: "rejected false", 413: "rejected false", 301: "rejected false",
	} {
		retry, reason := httpclient.ClassifyStatus(status)
		if got := fmt.Sprint(reason, " ", retry); got != want {
			t.Errorf("%d: %s, want %s", status, got, want)
		}
	}
}

func TestRegisterFlags(t *testing.T) {
	dir := t.TempDir()
	for _, prefix := range []string{"pyroscope", "prometheus-remote-write"} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var c httpclient.Config
		httpclient.RegisterFlags(fs, prefix, &c, "the backend", "where to send")
		if c.Timeout != httpclient.DefaultTimeout {
			t.Errorf("%s: default timeout %v", prefix, c.Timeout)
		}
		pw := writeFile(t, dir, prefix+"-pw", "pw")
		args := []string{
			"--" + prefix + "-url=https://backend.test/x",
			"--" + prefix + "-tenant=hpc",
			"--" + prefix + "-basic-auth-user=agent",
			"--" + prefix + "-basic-auth-password-file=" + pw,
			"--" + prefix + "-bearer-token-file=/tok",
			"--" + prefix + "-ca-file=/ca.pem",
			"--" + prefix + "-cert-file=/cert.pem",
			"--" + prefix + "-key-file=/key.pem",
			"--" + prefix + "-server-name=other.test",
			"--" + prefix + "-insecure-skip-verify",
			"--" + prefix + "-timeout=7s",
		}
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%s: %v", prefix, err)
		}
		want := httpclient.Config{URL: "https://backend.test/x", Tenant: "hpc",
			BasicAuthUser: "agent", BasicAuthPasswordFile: pw, BearerTokenFile: "/tok",
			TLS:     httpclient.TLSConfig{CAFile: "/ca.pem", CertFile: "/cert.pem", KeyFile: "/key.pem", ServerName: "other.test", InsecureSkipVerify: true},
			Timeout: 7 * time.Second}
		if fmt.Sprintf("%+v", c) != fmt.Sprintf("%+v", want) {
			t.Errorf("%s: parsed %+v\nwant %+v", prefix, c, want)
		}
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			n++
			if !strings.HasPrefix(f.Name, prefix+"-") || f.Usage == "" {
				t.Errorf("%s: flag %q (%q)", prefix, f.Name, f.Usage)
			}
		})
		if n != len(args) {
			t.Errorf("%s: %d flags, want %d", prefix, n, len(args))
		}
		// The settings reach Build: both auths set is the first error.
		if _, _, err := c.Build("backend", "a URL"); err == nil || !strings.Contains(err.Error(), "not both") {
			t.Errorf("%s: Build: %v", prefix, err)
		}
	}
}

func TestBuildChecksTheURL(t *testing.T) {
	for _, u := range []string{"", "backend:4040", "ftp://x/y", "http:///path"} {
		_, _, err := httpclient.Config{URL: u}.Build("backend", "http(s)://host")
		if err == nil || !strings.HasPrefix(err.Error(), "backend URL ") || !strings.HasSuffix(err.Error(), "want http(s)://host") {
			t.Errorf("%q: %v", u, err)
		}
	}
	u, rt, err := httpclient.Config{URL: "http://host:1/prefix/"}.Build("backend", "")
	if err != nil || rt == nil || u.Host != "host:1" || u.Path != "/prefix/" {
		t.Errorf("good URL: %v %v %v", u, rt, err)
	}
}

// testPKI writes a CA, a server certificate for 127.0.0.1 and backend.test,
// and a client certificate, all signed by the CA.
type testPKI struct {
	caFile, clientCert, clientKey string
	caPool                        *x509.CertPool
	server                        tls.Certificate
}

func newPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage, server bool) (certPEM, keyPEM []byte) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
		if server {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
			tmpl.DNSNames = []string{"backend.test"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	}
	var p testPKI
	p.caFile = writeFile(t, dir, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})))
	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(ca)
	sc, sk := issue(2, x509.ExtKeyUsageServerAuth, true)
	if p.server, err = tls.X509KeyPair(sc, sk); err != nil {
		t.Fatal(err)
	}
	cc, ck := issue(3, x509.ExtKeyUsageClientAuth, false)
	p.clientCert = writeFile(t, dir, "client.pem", string(cc))
	p.clientKey = writeFile(t, dir, "client-key.pem", string(ck))
	return p
}

func TestMutualTLS(t *testing.T) {
	pki := newPKI(t)
	var served atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{pki.server},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: pki.caPool,
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are expected
	srv.StartTLS()
	defer srv.Close()
	client := httpclient.TLSConfig{CertFile: pki.clientCert, KeyFile: pki.clientKey}
	for _, tc := range []struct {
		name string
		tls  httpclient.TLSConfig
		want string // "" for success, else a part of the error
	}{
		{"trusted CA", httpclient.TLSConfig{CAFile: pki.caFile, CertFile: pki.clientCert, KeyFile: pki.clientKey}, ""},
		{"server name", httpclient.TLSConfig{CAFile: pki.caFile, CertFile: pki.clientCert, KeyFile: pki.clientKey, ServerName: "backend.test"}, ""},
		{"wrong server name", httpclient.TLSConfig{CAFile: pki.caFile, CertFile: pki.clientCert, KeyFile: pki.clientKey, ServerName: "other.test"}, "certificate"},
		// The system roots do not know the test CA.
		{"untrusted server", client, "certificate"},
		{"insecure", httpclient.TLSConfig{CertFile: pki.clientCert, KeyFile: pki.clientKey, InsecureSkipVerify: true}, ""},
		// No client certificate: the server refuses the handshake.
		{"anonymous", httpclient.TLSConfig{CAFile: pki.caFile}, "tls"},
	} {
		tr, err := httpclient.BaseTransport("https", tc.tls)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err = get(t, tr, srv.URL)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if n := served.Load(); n != 3 {
		t.Errorf("served %d requests, want 3", n)
	}
}

func TestBaseTransport(t *testing.T) {
	tr, err := httpclient.BaseTransport("http", httpclient.TLSConfig{})
	if err != nil || tr.TLSClientConfig != nil && tr.TLSClientConfig.MinVersion != 0 {
		t.Errorf("plain http: %v, %+v", err, tr.TLSClientConfig)
	}
	// https gets TLS 1.2 at least, even with no setting.
	tr, err = httpclient.BaseTransport("https", httpclient.TLSConfig{})
	if err != nil || tr.TLSClientConfig == nil || tr.TLSClientConfig.MinVersion != tls.VersionTLS12 {
		t.Errorf("https: %v, %+v", err, tr.TLSClientConfig)
	}
	// A setting turns TLS on whatever the scheme (an https proxy's, say).
	tr, err = httpclient.BaseTransport("http", httpclient.TLSConfig{ServerName: "backend.test"})
	if err != nil || tr.TLSClientConfig == nil || tr.TLSClientConfig.ServerName != "backend.test" {
		t.Errorf("http with a server name: %v, %+v", err, tr.TLSClientConfig)
	}
	if tr == http.DefaultTransport {
		t.Error("the default transport must not be changed")
	}
}

func TestTLSConfigErrors(t *testing.T) {
	pki := newPKI(t)
	dir := t.TempDir()
	notPEM := writeFile(t, dir, "not.pem", "hello")
	for _, tc := range []struct {
		tls  httpclient.TLSConfig
		want string
	}{
		{httpclient.TLSConfig{CAFile: filepath.Join(dir, "missing")}, "pyroscope TLS CA: "},
		{httpclient.TLSConfig{CAFile: notPEM}, "pyroscope TLS CA: no PEM certificate in " + notPEM},
		{httpclient.TLSConfig{CertFile: pki.clientCert}, "pyroscope TLS: a client certificate needs both"},
		{httpclient.TLSConfig{KeyFile: pki.clientKey}, "pyroscope TLS: a client certificate needs both"},
		{httpclient.TLSConfig{CertFile: pki.clientCert, KeyFile: notPEM}, "pyroscope TLS client certificate: "},
	} {
		if !tc.tls.Enabled() {
			t.Errorf("%+v: not enabled", tc.tls)
		}
		_, err := httpclient.New("pyroscope", "https", tc.tls, httpclient.Auth{}, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q...", tc.tls, err, tc.want)
		}
	}
	if (httpclient.TLSConfig{}).Enabled() {
		t.Error("the zero TLSConfig is enabled")
	}
	// A transport given by the caller is used as it is: TLS is not read.
	if _, err := httpclient.New("pyroscope", "https", httpclient.TLSConfig{CAFile: notPEM}, httpclient.Auth{}, http.DefaultTransport); err != nil {
		t.Errorf("with a transport given: %v", err)
	}
}
