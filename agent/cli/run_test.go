package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs/procfstest"
)

// TestRunServesMetricsWithoutProfiler: with every profile source off, run
// serves /metrics until stopped, and opens no delivery backend: the
// Pyroscope spool is not made. (--output-dir is made and probed by the
// flags' check, before run: an unwritable one is a configuration error.)
func TestRunServesMetricsWithoutProfiler(t *testing.T) {
	tmp := t.TempDir()
	spoolDir, outDir := filepath.Join(tmp, "spool"), filepath.Join(tmp, "out")
	fs, f := runFlagSet(t)
	if err := fs.Parse([]string{"--proc-root", procfstest.SyntheticNode(t, 4), "--cgroup-root", tmp,
		"--cpu-profiling=false", "--offcpu-profiling=false", "--gpu-metrics=false", "--host-metrics=false", "--unwind=fp", "--python-frames=false",
		"--metrics-addr=127.0.0.1:0", "--pyroscope-url=http://127.0.0.1:1", "--spool-dir=" + spoolDir, "--output-dir=" + outDir}); err != nil {
		t.Fatal(err)
	}
	if err := f.check(); err != nil {
		t.Fatal(err)
	}
	lines := make(logLines, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, *f, slog.New(slog.NewTextHandler(lines, nil))) }()
	addr := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)
	var log []string
	var m []string
	for m == nil {
		select {
		case err := <-done:
			t.Fatalf("run returned %v before serving:\n%s", err, strings.Join(log, ""))
		case l := <-lines:
			log = append(log, l)
			m = addr.FindStringSubmatch(l)
		}
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The handler's own counter is registered with the agent's metrics.
	if !strings.Contains(string(body), "promhttp_metric_handler_errors_total") || !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("/metrics:\n%s", body)
	}
	// With no profile source, serving metrics is all there is to be
	// ready for.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get("http://" + m[1] + "/-/ready")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/-/ready: %s", resp.Status)
		}
	}
	cancel()
	err = <-done
	for len(lines) > 0 {
		log = append(log, <-lines)
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, strings.Join(log, ""))
	}
	for _, dir := range []string{spoolDir} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s was made (%v) though nothing is profiled", dir, err)
		}
	}
	if !strings.Contains(strings.Join(log, ""), "serving metrics only") {
		t.Errorf("log does not say it serves metrics only:\n%s", strings.Join(log, ""))
	}
}

// logLines takes a log's records, one Write each.
type logLines chan string

func (l logLines) Write(p []byte) (int, error) {
	l <- string(p)
	return len(p), nil
}
