package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/data"
	"github.com/grafana/grafana-plugin-sdk-go/genproto/pluginv2"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
	"github.com/slurmscope/slurmscope/schema"
)

// The host-metrics jobs: burn holds 160 MiB and burns one core for 4 s of
// CPU time (then holds 3 s, so the last polls see the totals) in a job
// given 2 cores and 800 MB; oom touches 300 MiB under a 100 MB limit.
const (
	hostNode     = "node-a"
	burnSeconds  = 4
	burnMiB      = 160
	burnCores    = 2
	burnMemMB    = 800
	oomMiB       = 300
	oomMemMB     = 100
	hostTolerate = 0.10 // the "within 10% of the truth"
)

// TestHostMetrics checks the agent's host metrics and the findings made
// from them against real SLURM jobs: cgroup v1, where this host has the
// memory, cpuacct and cpuset controllers and Slurm constrains cores and
// memory; then cgroup v2, where this hybrid host delegates no controller,
// so only CPU time is reported and the rest is named unsupported. A real
// Prometheus scrapes the agent every second; the engine the datasource and
// `slurmscope job` use reads it.
func TestHostMetrics(t *testing.T) {
	lane(t, &slurmLane)
	testenv.RequireIntegration(t, slurmtest.Needs(slurmtest.V1, slurmtest.V2))
	agent := buildAgent(t)
	cli := buildCLI(t)
	ds := buildDatasource(t)
	t.Run("v1", func(t *testing.T) { testHostMetricsV1(t, agent, cli, ds) })
	t.Run("v2", func(t *testing.T) { testHostMetricsV2(t, agent) })
}

// hostRig is a cluster with the agent and Prometheus watching node-a.
type hostRig struct {
	c       *slurmtest.Cluster
	load    string // the hostload binary
	prom    *promServer
	engine  *query.Engine
	started time.Time
}

func startHostRig(t *testing.T, agent string, o slurmtest.Options) *hostRig {
	t.Helper()
	c := slurmtest.StartT(t, o)
	load := filepath.Join(c.JobDir(), "hostload")
	if out, err := exec.Command("gcc", "-O1", "-Wall", "-o", load, "../internal/testenv/workloads/hostload.c").CombinedOutput(); err != nil {
		t.Fatalf("building hostload: %v\n%s", err, out)
	}
	dir := t.TempDir()
	p := launchAgent(t, nil, agent, "run", "--cpu-profiling=false", "--offcpu-profiling=false", "--gpu-metrics=false", "--host-metrics-interval", "1s",
		"--node-name", hostNode, "--metrics-addr", "127.0.0.1:0", "--output-dir", filepath.Join(dir, "out"))
	p.waitLog(t, "did not log `serving metrics`", func(log string) bool { return metricsAddr.MatchString(log) })
	base := runPrometheus(t, dir, fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: host
    static_configs:
      - targets: [%q]
`, p.servingAddr(t)), "--log.level=warn")
	pc, err := backends.NewPrometheus(backends.Config{URL: base})
	if err != nil {
		t.Fatal(err)
	}
	// Prometheus applies new targets every 5 s: a job submitted before its
	// first scrape of the agent (oom lives 4 s) could end unseen.
	prom := &promServer{base: base}
	prom.waitQuery(t, `up{job="host"} == 1`, "a first scrape of the agent", func(r []promSample) bool { return len(r) == 1 })
	return &hostRig{c: c, load: load, prom: prom, engine: &query.Engine{Metrics: pc}, started: time.Now()}
}

// run submits script as ssalice on node-a and waits until the job ended.
func (h *hostRig) run(t *testing.T, args []string, script string) string {
	t.Helper()
	id, err := h.c.Sbatch(context.Background(), "ssalice", append([]string{"-w", hostNode}, args...), script)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// truth is what hostload says it used.
type truth struct{ cpu, alloc, maxrss float64 }

var hostloadRE = regexp.MustCompile(`hostload cpu_seconds=([0-9.]+) alloc_bytes=([0-9]+) maxrss_bytes=([0-9]+)`)

func (h *hostRig) truth(t *testing.T, id string) truth {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.c.JobDir(), "slurm-"+id+".out"))
	if err != nil {
		t.Fatal(err)
	}
	m := hostloadRE.FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("job %s printed no hostload line:\n%s", id, b)
	}
	var tr truth
	tr.cpu, _ = strconv.ParseFloat(m[1], 64)
	tr.alloc, _ = strconv.ParseFloat(m[2], 64)
	tr.maxrss, _ = strconv.ParseFloat(m[3], 64)
	return tr
}

// usage is the engine's view of job id, from its submission to now.
func (h *hostRig) usage(t *testing.T, id string) (query.Range, findings.Job) {
	t.Helper()
	r := query.Range{From: h.started.Add(-time.Minute), To: time.Now().Add(time.Second), Step: time.Second}
	jobs, err := h.engine.Usage(context.Background(), query.Scope{Filter: filter.Equal(schema.JobID, id)}, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || len(jobs[0].Nodes) != 1 || jobs[0].Nodes[0].Host != hostNode {
		t.Fatalf("job %s: usage %+v, want one node, %s", id, jobs, hostNode)
	}
	return r, jobs[0]
}

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

func testHostMetricsV1(t *testing.T, agent, cli, ds string) {
	h := startHostRig(t, agent, slurmtest.Options{Mode: slurmtest.V1, Constrain: true})
	burn := h.run(t, []string{"-J", "burn", "-c", strconv.Itoa(burnCores), fmt.Sprintf("--mem=%dM", burnMemMB)},
		fmt.Sprintf("%s %d %d 3\n", h.load, burnSeconds, burnMiB))
	oom := h.run(t, []string{"-J", "oom", "-c", "1", fmt.Sprintf("--mem=%dM", oomMemMB)},
		fmt.Sprintf("%s 1 %d 0; echo hostload exit $?; sleep 3\n", h.load, oomMiB))
	waitJobDone(t, h.c, burn, 2*time.Minute)
	waitJobDone(t, h.c, oom, 2*time.Minute)
	// The last scrape of each job's final poll is in.
	time.Sleep(2 * time.Second)

	t.Run("burn-accuracy", func(t *testing.T) {
		tr := h.truth(t, burn)
		_, j := h.usage(t, burn)
		n := j.Nodes[0]
		t.Logf("job %s: CPU time %.3f s (hostload's own %.3f s), peak memory %.1f MiB (allocated %.0f MiB, max RSS %.1f MiB), "+
			"%.0f CPUs, %.2f cores used over %.0f s, limit %.0f MiB",
			burn, n.CPUSeconds, tr.cpu, n.MemPeak/(1<<20), tr.alloc/(1<<20), tr.maxrss/(1<<20), n.Cores, n.UsedCores, n.Seconds, n.MemLimit/(1<<20))
		if !within(n.CPUSeconds, tr.cpu, hostTolerate) {
			t.Errorf("CPU time %.3f s, hostload used %.3f s: more than %.0f%% apart", n.CPUSeconds, tr.cpu, 100*hostTolerate)
		}
		if !within(n.MemPeak, tr.alloc, hostTolerate) {
			t.Errorf("peak memory %.0f B, hostload allocated %.0f B: more than %.0f%% apart", n.MemPeak, tr.alloc, 100*hostTolerate)
		}
		if n.Cores != burnCores || n.MemLimit != burnMemMB<<20 || n.OOMKills != 0 {
			t.Errorf("cores %v (want %d), limit %v (want %d), OOM kills %v", n.Cores, burnCores, n.MemLimit, burnMemMB<<20, n.OOMKills)
		}
		// One core busy of two, at most.
		if !n.HasCPU || n.UsedCores <= 0 || n.UsedCores > 1.05 {
			t.Errorf("cores used %v over %v s", n.UsedCores, n.Seconds)
		}
	})

	t.Run("burn-findings", func(t *testing.T) {
		r, j := h.usage(t, burn)
		fs := findings.Evaluate(j, findings.Thresholds{})
		got := map[findings.Kind]findings.Finding{}
		for _, f := range fs {
			got[f.Kind] = f
			t.Logf("%s %s: %s", f.Severity, f.Kind, f.Summary)
		}
		cpu, ok := got[findings.CPUUnderused]
		if !ok || !strings.Contains(cpu.Summary, fmt.Sprintf(" of %d cores", burnCores)) {
			t.Errorf("no finding names the unused cores: %+v", fs)
		}
		if _, ok := got[findings.MemoryOverRequested]; !ok {
			t.Errorf("%d MiB of %d MB requested is not over-requested: %+v", burnMiB, burnMemMB, fs)
		}
		// The engine's query gives the same.
		ef, err := h.engine.Findings(context.Background(), query.Scope{Filter: filter.Equal(schema.JobID, burn)}, r, findings.CPUUnderused)
		if err != nil || len(ef) != 1 || ef[0].Summary != cpu.Summary {
			t.Errorf("engine findings %+v, %v", ef, err)
		}
	})

	t.Run("oom-kill", func(t *testing.T) {
		out, _ := os.ReadFile(filepath.Join(h.c.JobDir(), "slurm-"+oom+".out"))
		if !strings.Contains(string(out), "hostload exit 137") {
			t.Fatalf("the job was not OOM-killed (SIGKILL); its output:\n%s", out)
		}
		_, j := h.usage(t, oom)
		if n := j.Nodes[0]; n.OOMKills < 1 || n.MemLimit != oomMemMB<<20 {
			t.Errorf("OOM kills %v, limit %v: %+v", n.OOMKills, n.MemLimit, n)
		}
		f, ok := firstOf(findings.Evaluate(j, findings.Thresholds{}), findings.OOMKilled)
		if !ok || f.Severity != findings.Critical {
			t.Errorf("no OOM finding: %+v", findings.Evaluate(j, findings.Thresholds{}))
		}
		t.Logf("job %s: %s", oom, f.Summary)
		// v1 counts the kill in the task's cgroup only: the batch step's
		// series has it summed from there.
		h.prom.waitQuery(t, fmt.Sprintf(`max_over_time(slurmscope_job_step_oom_kills_total{%s=%q,%s="batch"}[5m]) >= 1`,
			schema.JobID.Label, oom, schema.JobStep.Label), "the batch step's kill", func(r []promSample) bool { return len(r) == 1 })
	})

	t.Run("steps", func(t *testing.T) {
		// The batch step, whose directory Slurm's v1 plugin gives to the
		// job's user, has its series too.
		r := h.prom.waitQuery(t, fmt.Sprintf(`max_over_time(slurmscope_job_step_memory_peak_bytes{%s=%q,%s="batch"}[5m])`,
			schema.JobID.Label, burn, schema.JobStep.Label), "the batch step's peak", func(r []promSample) bool { return len(r) == 1 })
		if tr := h.truth(t, burn); !within(r[0].Value, tr.alloc, hostTolerate) {
			t.Errorf("batch step peak %.0f B, hostload allocated %.0f B", r[0].Value, tr.alloc)
		}
		if e := h.prom.query(t, `sum(slurmscope_cgroup_read_errors_total)`); len(e) != 0 && e[0].Value != 0 {
			t.Errorf("cgroup files left out: %v", h.prom.query(t, `slurmscope_cgroup_read_errors_total`))
		}
	})

	t.Run("unsupported", func(t *testing.T) {
		// v1 has no io.stat: unsupported, and no zero.
		h.prom.waitQuery(t, fmt.Sprintf(`max_over_time(slurmscope_job_cgroup_unsupported_info{%s=%q,metric="slurmscope_job_io_read_bytes_total"}[5m])`,
			schema.JobID.Label, burn), "I/O unsupported on v1", func(r []promSample) bool { return len(r) == 1 })
		if r := h.prom.query(t, fmt.Sprintf(`max_over_time(slurmscope_job_io_read_bytes_total{%s=%q}[5m])`, schema.JobID.Label, burn)); len(r) != 0 {
			t.Errorf("I/O reported on v1: %v", r)
		}
	})

	t.Run("datasource", func(t *testing.T) {
		// The plugin binary over Grafana's gRPC protocol: the table, and
		// the numbers an alert rule evaluates, labelled by job.
		p := launch(t, ds)
		settings := map[string]any{"prometheus": map[string]any{"url": h.prom.base}}
		admin := &pluginv2.User{Login: "admin", Role: "Admin"}
		from, to := h.started.Add(-time.Minute), time.Now().Add(time.Second)
		tab := p.query(t, settings, admin, map[string]any{"queryType": "findings", "filter": fmt.Sprintf("slurm.job.id in [%q, %q]", burn, oom)}, from, to)
		if len(tab) != 1 || tab[0].Rows() < 3 {
			t.Fatalf("findings table: %s", dump(tab))
		}
		nums := p.query(t, settings, admin, map[string]any{"queryType": "findings", "finding": "cpuUnderused", "format": "numeric"}, from, to)
		got := map[string]float64{}
		for _, f := range nums {
			if f.Meta == nil || f.Meta.Type != data.FrameTypeNumericMulti || len(f.Fields) != 1 || f.Fields[0].Len() != 1 {
				t.Fatalf("not a numeric-multi frame: %s", dump(nums))
			}
			v, _ := f.Fields[0].At(0).(float64)
			got[f.Fields[0].Labels[schema.JobID.Name]] = v
		}
		if v, ok := got[burn]; !ok || v <= 0 || v >= 0.5 {
			t.Errorf("cpuUnderused numbers %v: want job %s's CPU efficiency, under 0.5", got, burn)
		}
	})

	t.Run("cli", func(t *testing.T) {
		base := h.prom.base
		out, err := exec.Command(cli, "job", burn, "--prometheus-url", base, "--since", "10m").CombinedOutput()
		if err != nil {
			t.Fatalf("slurmscope job: %v\n%s", err, out)
		}
		text := string(out)
		i, j := strings.Index(text, "findings ("), strings.Index(text, "nodes (")
		if i < 0 || j < i || !strings.Contains(text[i:j], fmt.Sprintf("cpuUnderused: used ")) || !strings.Contains(text[i:j], fmt.Sprintf("of %d cores", burnCores)) {
			t.Errorf("the report does not lead with the unused cores:\n%s", text)
		}
		js, err := exec.Command(cli, "job", burn, "--prometheus-url", base, "--since", "10m", "--json").Output()
		if err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Findings []findings.Finding `json:"findings"`
			Host     []query.HostStats  `json:"host"`
		}
		if err := json.Unmarshal(js, &rep); err != nil || len(rep.Findings) == 0 || len(rep.Host) != 1 || rep.Host[0].AllocatedCores != burnCores {
			t.Errorf("--json: %v\n%s", err, js)
		}
	})
}

func testHostMetricsV2(t *testing.T, agent string) {
	h := startHostRig(t, agent, slurmtest.Options{Mode: slurmtest.V2})
	burn := h.run(t, []string{"-J", "burn-v2"}, fmt.Sprintf("%s 2 16 3\n", h.load))
	waitJobDone(t, h.c, burn, 2*time.Minute)
	time.Sleep(2 * time.Second)
	tr := h.truth(t, burn)
	_, j := h.usage(t, burn)
	n := j.Nodes[0]
	t.Logf("job %s (v2): CPU time %.3f s (hostload's own %.3f s)", burn, n.CPUSeconds, tr.cpu)
	if !within(n.CPUSeconds, tr.cpu, hostTolerate) {
		t.Errorf("CPU time %.3f s, hostload used %.3f s: more than %.0f%% apart", n.CPUSeconds, tr.cpu, 100*hostTolerate)
	}
	if n.Cores != 0 || n.MemPeak != 0 || n.MemLimit != 0 {
		t.Errorf("values from controllers this host does not delegate: %+v", n)
	}
	unsupported := map[string]bool{}
	for _, s := range h.prom.query(t, fmt.Sprintf(`max by (metric) (max_over_time(slurmscope_job_cgroup_unsupported_info{%s=%q}[5m]))`, schema.JobID.Label, burn)) {
		unsupported[s.Metric["metric"]] = true
	}
	for _, hm := range schema.HostMetrics {
		if want := hm.Job.Name != schema.HostCPUUsage.Job.Name; unsupported[hm.Job.Name] != want {
			t.Errorf("%s: unsupported %v, want %v", hm.Job.Name, unsupported[hm.Job.Name], want)
		}
	}
	// Steps have their CPU time too.
	h.prom.waitQuery(t, fmt.Sprintf(`max_over_time(slurmscope_job_step_cpu_usage_seconds_total{%s=%q,%s="batch"}[5m]) > 1`,
		schema.JobID.Label, burn, schema.JobStep.Label), "the batch step's CPU time", func(r []promSample) bool { return len(r) == 1 })
}

func firstOf(fs []findings.Finding, k findings.Kind) (findings.Finding, bool) {
	for _, f := range fs {
		if f.Kind == k {
			return f, true
		}
	}
	return findings.Finding{}, false
}

// buildCLI builds the slurmscope query command.
func buildCLI(t *testing.T) string {
	t.Helper()
	cli := filepath.Join(t.TempDir(), "slurmscope")
	if out, err := exec.Command("go", "build", "-o", cli, "../grafana-plugin/cmd/slurmscope").CombinedOutput(); err != nil {
		t.Fatalf("building slurmscope: %v\n%s", err, out)
	}
	return cli
}
