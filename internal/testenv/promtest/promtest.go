// Package promtest runs Debian's real Prometheus for tests and the demo:
// scraping whatever a config says (Start), or serving samples written
// beforehand, with their own timestamps, into its TSDB with promtool
// (WithSamples), so that a query's answer over a range is known exactly.
package promtest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// Installed is what Start and WithSamples need: Debian's prometheus
// package (prometheus and promtool). Gate a test with
// testenv.RequireIntegration(t, promtest.Installed).
var Installed = testenv.Tools("prometheus", "promtool")

// FreeAddr returns a 127.0.0.1 address nothing listened on a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Server is a running prometheus.
type Server struct {
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
	log  *lockedBuffer
}

// Run starts prometheus with config (the YAML) and its TSDB in dir/tsdb,
// plus flags, and waits until it is ready. The demo uses it; tests use
// Start.
func Run(dir, config string, flags ...string) (*Server, error) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, fmt.Errorf("prometheus is required (Debian: apt-get install prometheus): %w", err)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + addr, log: &lockedBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"--config.file=" + cfg, "--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
		"--web.listen-address=" + addr}, flags...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("prometheus exited at start:\n%s", s.log.String())
		default:
		}
		res, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("prometheus not ready after 60s: %v\n%s", err, s.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop kills prometheus and waits for it.
func (s *Server) Stop() {
	s.cmd.Process.Kill()
	<-s.done
}

// Log is what prometheus wrote.
func (s *Server) Log() string { return s.log.String() }

// Start is Run for a test: it fails t, and kills prometheus at cleanup,
// logging its log if t failed.
func Start(t testing.TB, dir, config string, flags ...string) string {
	t.Helper()
	s, err := Run(dir, config, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", s.Log())
		}
	})
	return s.URL
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
