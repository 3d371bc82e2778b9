package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/httpclient"
)

func runFlagSet(t *testing.T) (*flag.FlagSet, *runFlags) {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &runFlags{}
	f.register(fs)
	return fs, f
}

// TestRunBackendFlags: Pyroscope and remote write take the same HTTP
// settings under their own prefixes, and each lands in its own config.
func TestRunBackendFlags(t *testing.T) {
	fs, f := runFlagSet(t)
	if f.pyro.Timeout != 30*time.Second || f.rw.Timeout != 30*time.Second || f.rw.Interval != 15*time.Second {
		t.Errorf("defaults: pyroscope timeout %v, remote write timeout %v, interval %v", f.pyro.Timeout, f.rw.Timeout, f.rw.Interval)
	}
	var args []string
	for prefix, v := range map[string]string{"pyroscope": "p", "prometheus-remote-write": "rw"} {
		for _, s := range []string{"url=https://" + v + ".test/x", "tenant=" + v + "-tenant", "basic-auth-user=" + v + "-user",
			"basic-auth-password-file=/" + v + "-pw", "bearer-token-file=/" + v + "-token", "ca-file=/" + v + "-ca",
			"cert-file=/" + v + "-cert", "key-file=/" + v + "-key", "server-name=" + v + ".name", "insecure-skip-verify",
			"timeout=" + map[string]string{"p": "3s", "rw": "4s"}[v]} {
			args = append(args, "--"+prefix+"-"+s)
		}
	}
	args = append(args, "--prometheus-remote-write-interval=5s")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	want := func(v string, timeout time.Duration) string {
		return fmt.Sprintf("%+v", httpclient.Config{URL: "https://" + v + ".test/x", Tenant: v + "-tenant",
			BasicAuthUser: v + "-user", BasicAuthPasswordFile: "/" + v + "-pw", BearerTokenFile: "/" + v + "-token",
			TLS: httpclient.TLSConfig{CAFile: "/" + v + "-ca", CertFile: "/" + v + "-cert", KeyFile: "/" + v + "-key",
				ServerName: v + ".name", InsecureSkipVerify: true},
			Timeout: timeout})
	}
	if got := fmt.Sprintf("%+v", f.pyro.Config); got != want("p", 3*time.Second) {
		t.Errorf("pyroscope: %s\nwant %s", got, want("p", 3*time.Second))
	}
	if got := fmt.Sprintf("%+v", f.rw.Config); got != want("rw", 4*time.Second) {
		t.Errorf("remote write: %s\nwant %s", got, want("rw", 4*time.Second))
	}
	if f.rw.Interval != 5*time.Second {
		t.Errorf("remote write interval %v", f.rw.Interval)
	}
}

// TestDocumentedFlagsExist: every backend and spool flag the README and
// deploy/ show is one that run accepts.
func TestDocumentedFlagsExist(t *testing.T) {
	fs, _ := runFlagSet(t)
	re := regexp.MustCompile(`--((?:pyroscope|prometheus-remote-write|remote-write|spool)-[a-z-]*[a-z])`)
	seen := map[string]bool{}
	for _, path := range []string{"../../README.md", "../../deploy/slurmscope-agent.env", "../../deploy/docker-compose.yaml", "../../deploy/prometheus.yml"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			seen[m[1]] = true
		}
	}
	if len(seen) < 10 {
		t.Fatalf("found only %v: the pattern no longer matches the docs", seen)
	}
	for name := range seen {
		if fs.Lookup(name) == nil {
			t.Errorf("--%s is documented but run does not accept it", name)
		}
	}
	t.Logf("documented: %s", strings.Join(slices.Sorted(maps.Keys(seen)), " "))
}

// TestRunIngestionWindowFlags: the window defaults to Pyroscope's, takes
// the server's values, and a negative bound is refused before anything
// starts.
func TestRunIngestionWindowFlags(t *testing.T) {
	fs, f := runFlagSet(t)
	if f.pyroWindow.OlderThan != time.Hour || f.pyroWindow.NewerThan != 10*time.Minute {
		t.Errorf("defaults %+v, want Pyroscope's 1h and 10m", f.pyroWindow)
	}
	if err := fs.Parse([]string{"--pyroscope-reject-older-than=72h", "--pyroscope-reject-newer-than=0"}); err != nil {
		t.Fatal(err)
	}
	if f.pyroWindow.OlderThan != 72*time.Hour || f.pyroWindow.NewerThan != 0 {
		t.Errorf("parsed %+v", f.pyroWindow)
	}
	var stderr strings.Builder
	if rc := runCmd([]string{"--pyroscope-reject-older-than=-1h"}, io.Discard, &stderr); rc != 2 || !strings.Contains(stderr.String(), "must not be negative") {
		t.Errorf("negative bound: rc %d, %q", rc, stderr.String())
	}
}

// TestMetricsAddrDefaultsToLoopback: /metrics names every user's jobs, so
// unless told otherwise it is served on this host only; a wider address
// without TLS and basic auth is served, with a warning in the log.
func TestMetricsAddrDefaultsToLoopback(t *testing.T) {
	fs, f := runFlagSet(t)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(f.metricsAddr)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Fatalf("--metrics-addr defaults to %q, want a loopback address", f.metricsAddr)
	}
	for addr, warn := range map[string]bool{"127.0.0.1:0": false, "[::1]:0": false, "0.0.0.0:0": true, ":0": true} {
		var log strings.Builder
		stop, err := serveMetrics(runFlags{metricsAddr: addr}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&log, nil)))
		if err != nil {
			if addr == "[::1]:0" {
				continue // a host without IPv6
			}
			t.Fatal(err)
		}
		stop()
		if got := strings.Contains(log.String(), "without --web.config.file"); got != warn {
			t.Errorf("%s: warned %v, want %v:\n%s", addr, got, warn, log.String())
		}
	}
}
