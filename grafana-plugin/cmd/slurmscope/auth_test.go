package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

// The credentials the secured stand-ins want.
const (
	pyroUser    = "alice"
	pyroPass    = "pyro-s3cret"
	promToken   = "prom-t0ken"
	configPass  = "hunter2-from-the-config-file" // never printed
	authJobTime = "2026-11-30T12:00:00Z"
)

// withHeader adds one header to every request: the tests' own pushes to a
// stand-in that wants credentials.
type withHeader struct {
	key, value string
	next       http.RoundTripper
}

func (h withHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.key, h.value)
	return h.next.RoundTrip(r)
}

// pushJob pushes a CPU profile of job 4242 on node-a, half an hour before
// authJobTime, through client.
func pushJob(t *testing.T, client *http.Client, url string) {
	t.Helper()
	end, _ := time.Parse(time.RFC3339, authJobTime)
	req := &pushv1.PushRequest{Series: []*pushv1.RawProfileSeries{pyrostandin.CPUSeries(end.Add(-30*time.Minute),
		map[string]int64{"python;train": 1e9}, schema.ServiceName, "train", schema.JobID.Label, "4242", schema.HostName.Label, "node-a")}}
	if _, err := pushv1connect.NewPusherServiceClient(client, url).Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
}

func standinClock() pyrostandin.Option {
	end, _ := time.Parse(time.RFC3339, authJobTime)
	return pyrostandin.WithClock(func() time.Time { return end })
}

// securedBackends starts a Pyroscope stand-in that wants basic auth and a
// fake Prometheus that wants a bearer token, both holding job 4242.
func securedBackends(t *testing.T) (pyro, prom string) {
	t.Helper()
	ps := httptest.NewServer(pyrostandin.New(standinClock(), pyrostandin.WithBasicAuth(pyroUser, pyroPass)).Handler())
	t.Cleanup(ps.Close)
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(pyroUser, pyroPass)
	pushJob(t, &http.Client{Transport: withHeader{"Authorization", req.Header.Get("Authorization"), http.DefaultTransport}}, ps.URL)
	api := promHandler(map[string][]string{"4242": {"node-a"}})
	pr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+promToken)) != 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"status":"error","errorType":"unauthorized","error":"authentication required"}`))
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(pr.Close)
	return ps.URL, pr.URL
}

// Without credentials the CLI fails with a hint that names its own flags,
// variables and config keys; with them, from flags, the environment or the
// config file, it reports; and a flag beats the environment, which beats
// the file.
func TestJobAuth(t *testing.T) {
	pyro, prom := securedBackends(t)
	passFile := writeFile(t, "pyro.password", pyroPass+"\n")
	wrongPass := writeFile(t, "wrong.password", "nope\n")
	tokenFile := writeFile(t, "prom.token", promToken+"\n")
	wrongToken := writeFile(t, "wrong.token", "nope\n")
	urls := []string{"--pyroscope-url", pyro, "--prometheus-url", prom}
	goodFlags := []string{"--pyroscope-basic-auth-user", pyroUser, "--pyroscope-basic-auth-password-file", passFile,
		"--prometheus-bearer-token-file", tokenFile}
	goodEnv := map[string]string{"SLURMSCOPE_PYROSCOPE_URL": pyro, "SLURMSCOPE_PROMETHEUS_URL": prom,
		"SLURMSCOPE_PYROSCOPE_BASIC_AUTH_USER": pyroUser, "SLURMSCOPE_PYROSCOPE_BASIC_AUTH_PASSWORD_FILE": passFile,
		"SLURMSCOPE_PROMETHEUS_BEARER_TOKEN_FILE": tokenFile}
	wrongEnv := map[string]string{"SLURMSCOPE_PYROSCOPE_BASIC_AUTH_USER": "mallory", "SLURMSCOPE_PYROSCOPE_BASIC_AUTH_PASSWORD_FILE": wrongPass,
		"SLURMSCOPE_PROMETHEUS_BEARER_TOKEN_FILE": wrongToken}
	goodConfig := "pyroscope:\n  url: " + pyro + "\n  basic_auth_user: " + pyroUser + "\n  basic_auth_password: " + pyroPass +
		"\nprometheus:\n  url: " + prom + "\n  bearer_token_file: " + tokenFile + "\n"
	wrongConfig := "pyroscope:\n  url: " + pyro + "\n  basic_auth_user: " + pyroUser + "\n  basic_auth_password: " + configPass +
		"\nprometheus:\n  url: " + prom + "\n  bearer_token: nope\n"
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		config string
		code   int
		want   []string // in stderr
	}{
		{name: "no credentials", args: urls, code: exitFail, want: []string{
			"slurmscope job: pyroscope: HTTP 401 Unauthorized: ",
			"slurmscope job: pyroscope: no credentials were given: set --pyroscope-basic-auth-user and --pyroscope-basic-auth-password-file, " +
				"or --pyroscope-bearer-token-file (or SLURMSCOPE_PYROSCOPE_* in the environment, or under pyroscope: in " + defaultConfigPath + "); and check --tenant\n",
			"slurmscope job: prometheus: HTTP 401 Unauthorized: ",
			"slurmscope job: prometheus: no credentials were given: set --prometheus-basic-auth-user"}},
		{name: "flags", args: append(urls, goodFlags...), code: exitOK},
		{name: "environment", env: goodEnv, code: exitOK},
		{name: "config file", config: goodConfig, code: exitOK},
		{name: "flag over environment", args: append(urls, goodFlags...), env: wrongEnv, code: exitOK},
		{name: "flag over environment, wrong flag", env: goodEnv, code: exitFail,
			args: []string{"--pyroscope-basic-auth-user", "mallory", "--pyroscope-basic-auth-password-file", wrongPass, "--prometheus-bearer-token-file", wrongToken},
			want: []string{"pyroscope: check the credentials from --pyroscope-basic-auth-user and --pyroscope-basic-auth-password-file, and --tenant\n",
				"prometheus: check the credentials from --prometheus-bearer-token-file, and --tenant\n"}},
		{name: "environment over config file", env: goodEnv, config: wrongConfig, code: exitOK},
		{name: "environment over config file, wrong environment", env: wrongEnv, config: goodConfig, code: exitFail,
			want: []string{"pyroscope: check the credentials from SLURMSCOPE_PYROSCOPE_BASIC_AUTH_USER and SLURMSCOPE_PYROSCOPE_BASIC_AUTH_PASSWORD_FILE, and --tenant\n"}},
		{name: "wrong config file", config: wrongConfig, code: exitFail,
			want: []string{"pyroscope: check the credentials from pyroscope.basic_auth_user and pyroscope.basic_auth_password in "}},
		{name: "URL from the environment over the config file's", config: strings.Replace(goodConfig, pyro, "http://127.0.0.1:1", 1),
			env: map[string]string{"SLURMSCOPE_PYROSCOPE_URL": pyro}, code: exitOK},
		// The user's own credentials replace the site's whole: a flag's
		// basic auth does not clash with the file's bearer token.
		{name: "credentials come whole from one source", config: strings.Replace(wrongConfig, "basic_auth_user: "+pyroUser+"\n  basic_auth_password: "+configPass, "bearer_token: site-token", 1),
			args: goodFlags, code: exitOK},
		// One backend refusing is a partial report, with the hint.
		{name: "Prometheus without credentials", args: append(urls, goodFlags[:4]...), code: exitPartial,
			want: []string{"partial report (exit status 4): prometheus failed", "prometheus: no credentials were given: set --prometheus-basic-auth-user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := append([]string{"job", "4242", "--to", authJobTime}, tc.args...)
			if tc.config != "" {
				args = append(args, "--config", writeFile(t, "cli.yaml", tc.config))
			}
			code, stdout, stderr := run(args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			if code == exitOK && (!strings.Contains(stdout, "nodes (1): node-a") || !strings.Contains(stdout, "train") || stderr != "") {
				t.Errorf("report:\n%s\nstderr:\n%s", stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "datasource settings") || strings.Contains(stdout+stderr, configPass) {
				t.Errorf("Grafana's advice, or the config file's password, in:\n%s%s", stdout, stderr)
			}
		})
	}
}

// The config file may hold a password inline; no error quotes it, whether
// the server refuses it or the file is wrong around it.
func TestJobConfigPasswordNeverPrinted(t *testing.T) {
	pyro, _ := securedBackends(t)
	tokenFile := writeFile(t, "token", "t\n")
	for _, config := range []string{
		"pyroscope:\n  url: " + pyro + "\n  basic_auth_user: u\n  basic_auth_password: " + configPass + "\n",
		"pyroscope:\n  url: " + pyro + "\n  basic_auth_password: " + configPass + "\n",
		"pyroscope:\n  url: " + pyro + "\n  basic_auth_user: u\n  basic_auth_password: " + configPass + "\n  bearer_token_file: " + tokenFile + "\n",
		"pyroscope:\n  url: " + pyro + "\n  basic_auth_user: u\n  basic_auth_password: " + configPass + "\n  basic_auth_password_file: " + tokenFile + "\n",
		"pyroscope:\n  url: " + pyro + "\n  bearer_token: \"" + configPass + "\\n\"\n",
		"pyroscope:\n  basic_auth_password: " + configPass + "\n  basic_auth_password: " + configPass + "\n",
		"pyroscope:\n  basic_auth_password: " + configPass + "\n  colour: blue\n",
		"pyroscope:\n  basic_auth_password: " + configPass + "\n  url: [\n",
	} {
		code, stdout, stderr := run("job", "4242", "--to", authJobTime, "--config", writeFile(t, "cli.yaml", config))
		if code == exitOK || strings.Contains(stdout+stderr, "hunter2") {
			t.Errorf("config:\n%s\nexit %d\nstdout:\n%s\nstderr:\n%s", config, code, stdout, stderr)
		}
	}
}

// selfSigned returns a certificate and key for a client of mutual TLS,
// PEM-encoded.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), cert
}

// tlsStandin serves a Pyroscope stand-in over TLS, its certificate from
// httptest's own CA, asking clients for a certificate as auth says, and
// holding job 4242 (pushed with client, a client certificate).
func tlsStandin(t *testing.T, auth tls.ClientAuthType, client tls.Certificate, clientCert *x509.Certificate) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(pyrostandin.New(standinClock()).Handler())
	pool := x509.NewCertPool()
	pool.AddCert(clientCert)
	srv.TLS = &tls.Config{ClientCAs: pool, ClientAuth: auth}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c := srv.Client()
	c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{client}
	pushJob(t, c, srv.URL)
	return srv
}

// A server whose certificate a site CA signed is verified with
// --pyroscope-ca-file (or its variable); a server that wants a client
// certificate gets --pyroscope-cert-file and --pyroscope-key-file.
func TestJobTLS(t *testing.T) {
	certPEM, keyPEM, clientCert := selfSigned(t)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := tlsStandin(t, tls.NoClientCert, pair, clientCert)
	ca := writeFile(t, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	certFile, keyFile := writeFile(t, "client.pem", string(certPEM)), writeFile(t, "client.key", string(keyPEM))
	base := []string{"job", "4242", "--to", authJobTime, "--pyroscope-url", srv.URL}

	if code, _, stderr := run(base...); code != exitFail || !strings.Contains(stderr, "certificate") {
		t.Errorf("no CA: exit %d\n%s", code, stderr)
	}
	if code, stdout, stderr := run(append(base, "--pyroscope-ca-file", ca)...); code != exitOK || !strings.Contains(stdout, "train") {
		t.Errorf("--pyroscope-ca-file: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Run("environment", func(t *testing.T) {
		t.Setenv("SLURMSCOPE_PYROSCOPE_CA_FILE", ca)
		if code, _, stderr := run(base...); code != exitOK {
			t.Errorf("SLURMSCOPE_PYROSCOPE_CA_FILE: exit %d\n%s", code, stderr)
		}
	})
	if code, _, stderr := run(append(base, "--pyroscope-ca-file", keyFile)...); code != exitUsage || !strings.Contains(stderr, "--pyroscope-ca-file: no PEM certificate in ") {
		t.Errorf("a CA file without a certificate: exit %d\n%s", code, stderr)
	}

	mtls := tlsStandin(t, tls.RequireAndVerifyClientCert, pair, clientCert)
	ca = writeFile(t, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: mtls.Certificate().Raw})))
	withCA := []string{"job", "4242", "--to", authJobTime, "--pyroscope-url", mtls.URL, "--pyroscope-ca-file", ca}
	if code, _, stderr := run(withCA...); code != exitFail {
		t.Errorf("no client certificate: exit %d\n%s", code, stderr)
	}
	if code, stdout, stderr := run(append(withCA, "--pyroscope-cert-file", certFile, "--pyroscope-key-file", keyFile)...); code != exitOK || !strings.Contains(stdout, "train") {
		t.Errorf("client certificate: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := run(append(withCA, "--pyroscope-cert-file", certFile)...); code != exitUsage || !strings.Contains(stderr, "--pyroscope-cert-file and --pyroscope-key-file go together") {
		t.Errorf("a certificate without its key: exit %d\n%s", code, stderr)
	}
}
