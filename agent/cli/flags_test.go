package cli

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/service"
	"github.com/slurmscope/slurmscope/internal/units"
)

func runFlagSet(t *testing.T) (*flag.FlagSet, *runFlags) {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &runFlags{}
	f.register(fs)
	return fs, f
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

// TestRunChecksEveryKind: each kind's check runs before anything starts,
// whichever list the kind is in: a profile source's, a sink's, a
// service's and the stack capture's.
func TestRunChecksEveryKind(t *testing.T) {
	for args, want := range map[string]string{
		"--sample-rate=0":                   "--sample-rate 0 out of range",
		"--pyroscope-reject-older-than=-1h": "must not be negative",
		"--host-metrics-interval=1ms":       "--host-metrics-interval 1ms is shorter than 100ms",
		"--unwind=dwarf":                    `--unwind "dwarf": want auto or fp`,
		"--upload-interval=10ms":            "--upload-interval 10ms is shorter than 1s",
	} {
		var stderr strings.Builder
		if rc := runCmd([]string{args, "--metrics-addr=127.0.0.1:0"}, io.Discard, &stderr); rc != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: rc %d, %q; want 2 and %q", args, rc, stderr.String(), want)
		}
	}
}

// TestRunFlagsTakeUnits: run's size flags take a unit (256MiB, 10GB) and
// its duration flags days and weeks (7d), through package units; run
// --help shows the defaults in that form, which the flags read back.
func TestRunFlagsTakeUnits(t *testing.T) {
	fs, f := runFlagSet(t)
	if err := fs.Parse([]string{
		"--memory-budget-bytes", "512MiB", "--unwind-table-bytes", "64MiB", "--upload-interval", "1d",
		"--output-retention", "7d", "--spool-max-bytes", "1GiB", "--remote-write-spool-max-bytes=100MB",
		"--job-read-bytes-per-second=8MiB", "--gpu-interval=1m", "--pyroscope-reject-older-than=1w",
		"--pyroscope-timeout=1m30s",
	}); err != nil {
		t.Fatal(err)
	}
	const day = 24 * time.Hour
	if f.budget.Total != 512<<20 || f.unwindBudget != 64<<20 || f.interval != day || f.work.Rate != 8<<20 {
		t.Errorf("parsed --memory-budget-bytes %d, --unwind-table-bytes %d, --upload-interval %v, --job-read-bytes-per-second %d",
			f.budget.Total, f.unwindBudget, f.interval, f.work.Rate)
	}
	// The other kinds' settings are theirs: read them through the flags.
	for name, want := range map[string]any{
		"output-retention":             7 * day,
		"spool-max-bytes":              int64(1 << 30),
		"remote-write-spool-max-bytes": int64(100e6),
		"gpu-interval":                 time.Minute,
		"pyroscope-reject-older-than":  7 * day,
		"pyroscope-timeout":            90 * time.Second,
	} {
		if got := fs.Lookup(name).Value.(flag.Getter).Get(); got != want {
			t.Errorf("--%s = %v, want %v", name, got, want)
		}
	}
	if err := f.check(); err != nil {
		t.Errorf("check: %v", err)
	}

	var stderr strings.Builder
	if rc := runCmd([]string{"--help"}, io.Discard, &stderr); rc != 0 {
		t.Fatalf("run --help: exit %d", rc)
	}
	help := stderr.String()
	for name, def := range map[string]string{
		"unwind-table-bytes":           "256MiB",
		"spool-max-bytes":              "256MiB",
		"remote-write-spool-max-bytes": "64MiB",
		"job-read-burst-bytes":         "128MiB",
		"job-read-bytes-per-second":    "4MiB",
		"upload-interval":              "15s",
		"pyroscope-reject-older-than":  "1h0m0s",
	} {
		// A flag's entry: "  -name value\n    \tusage (default X)\n".
		_, entry, ok := strings.Cut(help, "\n  -"+name+" ")
		entry, _, _ = strings.Cut(entry, "\n  -")
		entry, _, _ = strings.Cut(entry, "\n\n") // the next group's title
		if !ok || !strings.HasSuffix(strings.TrimSpace(entry), "(default "+def+")") {
			t.Errorf("run --help shows --%s as %q, want its default %s", name, entry, def)
		}
	}
	// Every size and duration flag is one of package units, and the
	// default it shows is one it reads back.
	fs, _ = runFlagSet(t)
	n := 0
	fs.VisitAll(func(fl *flag.Flag) {
		switch fl.Value.(type) {
		case *units.Bytes, *units.Duration:
			n++
			if err := fl.Value.Set(fl.DefValue); err != nil || fl.Value.String() != fl.DefValue {
				t.Errorf("--%s: its default %q reads back as %q, %v", fl.Name, fl.DefValue, fl.Value.String(), err)
			}
			return
		}
		if kind, _ := flag.UnquoteUsage(fl); kind == "duration" || strings.Contains(fl.Name, "bytes") {
			t.Errorf("--%s (%s) does not take units: register it with units.NewDuration or units.NewBytes", fl.Name, kind)
		}
	})
	if n < 18 {
		t.Errorf("%d flags of package units, want the 18 sizes and durations at least", n)
	}
	// 0, the default of the memory budget and the output bounds, is not
	// shown, as for any flag.
	for _, name := range []string{"memory-budget-bytes", "output-max-bytes", "output-retention"} {
		_, entry, _ := strings.Cut(help, "\n  -"+name+" ")
		entry, _, _ = strings.Cut(entry, "\n  -")
		if strings.Contains(entry, "(default") {
			t.Errorf("run --help shows a default of 0 for --%s: %q", name, entry)
		}
	}
}

// TestMetricsAddrDefaultsToLoopback: /metrics names every user's jobs, so
// unless told otherwise it is served on this host only; a wider address
// without TLS and basic auth is served, with a warning in the log.
func TestMetricsAddrDefaultsToLoopback(t *testing.T) {
	fs, _ := runFlagSet(t)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	addr := fs.Lookup("metrics-addr").Value.String()
	host, _, err := net.SplitHostPort(addr)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Fatalf("--metrics-addr defaults to %q, want a loopback address", addr)
	}
	for addr, warn := range map[string]bool{"127.0.0.1:0": false, "[::1]:0": false, "0.0.0.0:0": true, ":0": true} {
		var log strings.Builder
		reg := prometheus.NewRegistry()
		k := &metricsServer{addr: addr}
		srv, err := k.Open(service.Env{Reg: reg, Gatherer: reg, Log: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			if addr == "[::1]:0" {
				continue // a host without IPv6
			}
			t.Fatal(err)
		}
		srv.(io.Closer).Close()
		if got := strings.Contains(log.String(), "without --web.config.file"); got != warn {
			t.Errorf("%s: warned %v, want %v:\n%s", addr, got, warn, log.String())
		}
	}
}

// TestMetricsServerServesAndStops: /metrics serves the registry once Run
// runs, and Run returns once its context is done.
func TestMetricsServerServesAndStops(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_gauge", Help: "a test gauge"})
	g.Set(42)
	reg.MustRegister(g)
	k := &metricsServer{addr: "127.0.0.1:0"}
	srv, err := k.Open(service.Env{Reg: reg, Gatherer: reg, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	resp, err := http.Get("http://" + srv.(*serving).ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "test_gauge 42") {
		t.Errorf("/metrics:\n%s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
