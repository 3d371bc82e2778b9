// Package promtest runs Debian's real Prometheus for tests: scraping
// whatever a config says (Start), or serving samples written beforehand,
// with their own timestamps, into its TSDB with promtool (WithSamples), so
// that a query's answer over a range is known exactly.
package promtest

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Require skips t unless SLURMSCOPE_INTEGRATION=1, and then fails it when
// prometheus or promtool is missing.
func Require(t testing.TB) {
	t.Helper()
	if os.Getenv("SLURMSCOPE_INTEGRATION") != "1" {
		t.Skip("set SLURMSCOPE_INTEGRATION=1 (with Debian's prometheus installed) to run against a real Prometheus")
	}
	for _, bin := range []string{"prometheus", "promtool"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is required (Debian: apt-get install prometheus): %v", bin, err)
		}
	}
}

// FreeAddr returns a 127.0.0.1 address nothing listened on a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Start runs prometheus with config (the YAML) and its TSDB in dir/tsdb,
// plus flags, waits until it is ready and returns its URL. It is killed at
// cleanup, and its log is logged if t failed.
func Start(t testing.TB, dir, config string, flags ...string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is required (Debian: apt-get install prometheus): %v", err)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddr(t)
	log := &lockedBuffer{}
	cmd := exec.Command(bin, append([]string{"--config.file=" + cfg, "--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
		"--web.listen-address=" + addr}, flags...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			t.Fatalf("prometheus exited at start:\n%s", log.String())
		default:
		}
		res, err := http.Get(base + "/-/ready")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 60s: %v\n%s", err, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WithSamples writes openMetrics (the OpenMetrics text format, samples
// with their timestamps, ending in "# EOF") into TSDB blocks with promtool
// and serves them with a prometheus that scrapes nothing.
func WithSamples(t testing.TB, openMetrics string) string {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "samples.om")
	if err := os.WriteFile(in, []byte(openMetrics), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("promtool", "tsdb", "create-blocks-from", "openmetrics", in, filepath.Join(dir, "tsdb")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool tsdb create-blocks-from openmetrics: %v\n%s", err, out)
	}
	return Start(t, dir, "global: {}\n")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
