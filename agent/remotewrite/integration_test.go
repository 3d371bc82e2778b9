package remotewrite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/schema"
)

// prometheusBin is Debian's prometheus package, which CI installs.
const prometheusBin = "/usr/bin/prometheus"

// promServer is a real Prometheus with the remote-write receiver on.
type promServer struct {
	t       *testing.T
	addr    string // host:port, kept across restarts
	dataDir string
	cfgFile string
	logFile string
	cmd     *exec.Cmd
	exited  chan struct{}
}

func (p *promServer) base() string { return "http://" + p.addr }

func (p *promServer) start() {
	t := p.t
	t.Helper()
	logf, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prometheusBin,
		"--config.file="+p.cfgFile,
		"--storage.tsdb.path="+p.dataDir,
		"--web.listen-address="+p.addr,
		"--web.enable-remote-write-receiver",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", prometheusBin, err)
	}
	p.cmd = cmd
	p.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(p.exited) }()

	deadline := time.Now().Add(ceiling)
	for {
		select {
		case <-p.exited:
			t.Fatalf("prometheus exited during start-up:\n%s", p.logTail())
		default:
		}
		resp, err := http.Get(p.base() + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after %v:\n%s", ceiling, p.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *promServer) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(ceiling):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

func (p *promServer) logTail() string {
	b, _ := os.ReadFile(p.logFile)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// query runs an instant PromQL query at a given time and decodes the result.
func (p *promServer) query(q string, at time.Time, out any) error {
	v := url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}
	resp, err := http.Get(p.base() + "/api/v1/query?" + v.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%s: %w", body, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("query %q: %s", q, r.Error)
	}
	return json.Unmarshal(r.Data, out)
}

type vectorResult struct {
	Result []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	} `json:"result"`
}

type matrixResult struct {
	Result []struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	} `json:"result"`
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// phaseGatherer counts the gathers made in each phase of the test, so that
// the samples Prometheus ends up with can be checked one for one.
type phaseGatherer struct {
	g     prometheus.Gatherer
	gauge prometheus.Gauge

	mu     sync.Mutex
	phase  float64
	counts map[float64]int
}

func (p *phaseGatherer) Gather() ([]*dto.MetricFamily, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[p.phase]++
	return p.g.Gather()
}

func (p *phaseGatherer) set(phase float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase = phase
	p.gauge.Set(phase)
}

func (p *phaseGatherer) count(phase float64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[phase]
}

// TestIntegrationPrometheus remote-writes to a real Prometheus, then takes
// it down, restarts the agent during the outage, brings Prometheus back and
// checks that every spooled sample arrived, exactly and in order.
func TestIntegrationPrometheus(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Func("Debian's prometheus package", func() error {
		_, err := os.Stat(prometheusBin)
		return err
	}))
	tmp := t.TempDir()
	p := &promServer{
		t: t, addr: freeAddr(t),
		dataDir: filepath.Join(tmp, "tsdb"),
		cfgFile: filepath.Join(tmp, "prometheus.yml"),
		logFile: filepath.Join(tmp, "prometheus.log"),
	}
	if err := os.WriteFile(p.cfgFile, []byte("global:\n  scrape_interval: 1h\nscrape_configs: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	p.start()

	host, gpu, job := schema.HostName.Label, schema.GPUIndex.Label, schema.JobName.Label
	reg := prometheus.NewRegistry()
	util := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slurmscope_it_gpu_utilization_ratio", Help: "h"}, []string{host, gpu, job})
	util.WithLabelValues("n1", "0", hostile).Set(0.75)
	util.WithLabelValues("n1", "1", "plain").Set(0.25)
	events := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slurmscope_it_events_total", Help: "h"}, []string{"kind"})
	events.WithLabelValues(hostile).Add(7)
	phase := prometheus.NewGauge(prometheus.GaugeOpts{Name: "slurmscope_it_phase", Help: "h"})
	reg.MustRegister(util, events, phase)
	pg := &phaseGatherer{g: reg, gauge: phase, counts: map[float64]int{}}

	cfg := Config{
		Config:     httpclient.Config{URL: p.base() + "/api/v1/write", Timeout: 10 * time.Second},
		Interval:   100 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		FlushTimeout: 5 * time.Second,
	}
	spoolDir := filepath.Join(tmp, "spool")
	run := func() (*Writer, func()) {
		sp := openSpool(t, spoolDir, 64<<20)
		w, err := New(cfg, sp, pg, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		return w, func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(ceiling):
				t.Fatal("Run did not stop")
			}
			sp.Close()
		}
	}

	// Phase 1: Prometheus up.
	pg.set(1)
	w1, stop1 := run()
	var vec vectorResult
	waitFor(t, "the gauges in Prometheus", func() bool {
		vec = vectorResult{}
		err := p.query(`slurmscope_it_gpu_utilization_ratio`, time.Now(), &vec)
		return err == nil && len(vec.Result) == 2
	})
	want := map[string]map[string]string{
		"0.75": {"__name__": "slurmscope_it_gpu_utilization_ratio", host: "n1", gpu: "0", job: hostile},
		"0.25": {"__name__": "slurmscope_it_gpu_utilization_ratio", host: "n1", gpu: "1", job: "plain"},
	}
	for _, r := range vec.Result {
		val, _ := r.Value[1].(string)
		if !sameLabels(r.Metric, want[val]) {
			t.Errorf("value %s came with labels %q, want %q", val, r.Metric, want[val])
		}
	}
	vec = vectorResult{}
	if err := p.query(`slurmscope_it_events_total`, time.Now(), &vec); err != nil {
		t.Fatal(err)
	}
	if len(vec.Result) != 1 || vec.Result[0].Value[1] != "7" || vec.Result[0].Metric["kind"] != hostile {
		t.Errorf("counter: got %+v, want 7 with kind=%q", vec.Result, hostile)
	}

	// Phase 2: Prometheus down; the agent spools, retries, and restarts.
	p.stop()
	pg.set(2)
	waitFor(t, "retries and a few spooled requests", func() bool {
		s := w1.Stats()
		return s.Retries > 0 && s.SpoolRequests >= 3
	})
	stop1()
	pg.set(3)
	w2, stop2 := run()
	waitFor(t, "the new agent to spool behind the old backlog", func() bool { return pg.count(3) >= 2 })

	// Prometheus returns on the same data directory and address.
	p.start()
	waitFor(t, "the backlog to drain", func() bool {
		s := w2.Stats()
		return s.SpoolRequests == 0 && s.RequestsSent > 0
	})
	stop2() // its last gather is flushed to a live Prometheus

	var mat matrixResult
	if err := p.query(`slurmscope_it_phase[1h]`, time.Now().Add(time.Second), &mat); err != nil {
		t.Fatal(err)
	}
	if len(mat.Result) != 1 {
		t.Fatalf("phase series: %+v", mat.Result)
	}
	got := map[string]int{}
	var last float64
	for _, v := range mat.Result[0].Values {
		ts, _ := v[0].(float64)
		if ts <= last {
			t.Errorf("samples out of order: %v after %v", ts, last)
		}
		last = ts
		s, _ := v[1].(string)
		got[s]++
	}
	t.Logf("gathers per phase 1/2/3: %d/%d/%d; samples in Prometheus: %v", pg.count(1), pg.count(2), pg.count(3), got)
	for _, ph := range []float64{1, 2, 3} {
		key := strconv.FormatFloat(ph, 'f', -1, 64)
		if got[key] != pg.count(ph) {
			t.Errorf("phase %s: Prometheus holds %d samples, the agent gathered %d", key, got[key], pg.count(ph))
		}
	}
	for i, w := range []*Writer{w1, w2} {
		for reason, n := range w.Stats().Dropped {
			if n != 0 {
				t.Errorf("agent run %d dropped %d requests (%s)", i+1, n, reason)
			}
		}
	}
	if t.Failed() {
		t.Logf("prometheus log:\n%s", p.logTail())
	}
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
