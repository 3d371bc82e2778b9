package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/slurmscope/slurmscope/agent/gpu/gputest"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
	"github.com/slurmscope/slurmscope/schema"
)

// The GPU test's hardware: four H100s behind the NVML stand-in (see
// agent/gpu/nvmlstub), the first three in slurmd's gres.conf (newMixedNode).
// GPU 0 runs job A's task, GPU 1 is allocated to job B and idle, GPU 2 has
// MIG on (3g.40gb and 4g.40gb), and GPU 3 has fallen off the bus from the
// start.
const (
	gpuNode = "node-a"

	gpu0UUID  = "GPU-5d2c0a4e-1111-4c5e-9f2a-000000000000"
	gpu1UUID  = "GPU-5d2c0a4e-2222-4c5e-9f2a-000000000001"
	gpu2UUID  = "GPU-5d2c0a4e-3333-4c5e-9f2a-000000000002"
	gpu3UUID  = "GPU-5d2c0a4e-4444-4c5e-9f2a-000000000003"
	mig3gUUID = "MIG-7a6b5c4d-3333-4e2f-9a0b-000000000032"
	mig4gUUID = "MIG-7a6b5c4d-3333-4e2f-9a0b-000000000041"
	mig3gGI   = 2
	mig4gGI   = 1
	gpuName   = "NVIDIA H100 80GB HBM3"

	gib = uint64(1) << 30
	// Job A's task on GPU 0: its SM utilisation (percent), before and
	// after the scenario is changed under the running agent.
	jobASMUtil      = 73
	jobASMUtilLater = 41
	jobAMemGPU0     = 20 * gib
	jobAMemMIG      = 5 * gib

	// gpuWait bounds every wait for the agent or Prometheus to catch up
	// (both poll every second).
	gpuWait = 90 * time.Second

	// Basic auth of the second agent (--web.config.file).
	authUser     = "scope"
	authPassword = "s3cret pass"
)

// TestGPUMetrics runs `slurmscope-agent run --cpu-profiling=false` against
// the NVML stand-in while real SLURM jobs hold GPUs, scrapes it with a real
// Prometheus and checks the job-level GPU series through PromQL: the
// utilisation of a job's task, an allocated idle GPU, MIG instances, a lost
// GPU, live changes and a cancelled job. A second agent behind basic auth
// (--web.config.file) checks that the endpoint is protected.
func TestGPUMetrics(t *testing.T) {
	lane(t, &slurmLane)
	testenv.RequireIntegration(t, slurmtest.Needs(slurmtest.V2), testenv.Tools("prometheus", "promtool", "cc"))
	agent := buildAgent(t)
	stub := gputest.Library(t)
	ctx := context.Background()
	mixed := newMixedNode(t, gpuNode)
	c := slurmtest.StartT(t, slurmtest.Options{Mode: slurmtest.V2, GRES: mixed.gres})

	// Job A holds a whole GPU and the 3g.40gb instance (slurmd gives the
	// first free one, GPU 0), and its task names them in the environment
	// too. SLURM_JOB_GPUS is an ordinal, which the collector must refuse on
	// a node with MIG on (counted as ambiguous); the UUIDs of
	// CUDA_VISIBLE_DEVICES are exact, and within what Slurm granted.
	scriptA := fmt.Sprintf("export CUDA_VISIBLE_DEVICES=%s,%s\nexport SLURM_JOB_GPUS=0\nexec sleep 600\n", gpu0UUID, mig3gUUID)
	// Job B: allocated GPU 1 and the 4g.40gb instance, uses neither.
	scriptB := "exec sleep 600\n"
	jobs := map[string]slurmtest.Job{}
	submit := func(user string, args []string, script string) string {
		id, err := c.Sbatch(ctx, user, append(args, "-w", gpuNode), script)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Cancel(context.Background(), id) })
		js, err := c.WaitState(ctx, id, "RUNNING", 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jobs[id] = js[0]
		return id
	}
	// One after the other, so that A gets GPU 0.
	idA := submit("ssalice", []string{"-J", jobName, "--gres=gpu:h100:1,gpu:3g.40gb:1"}, scriptA)
	idB := submit("ssbob", []string{"-J", "idle-alloc", "--gres=gpu:h100:1,gpu:4g.40gb:1"}, scriptB)
	// The agent reads a task's environment once: start it only when the
	// scripts have exec'd sleep, whose environment holds the exports.
	pidA := waitTaskPID(t, c, idA, "sleep")
	waitTaskPID(t, c, idB, "sleep")
	t.Logf("job A %s (%s as %s): task pid %d; job B %s (%s as %s)",
		idA, jobs[idA].Name, jobs[idA].User, pidA, idB, jobs[idB].Name, jobs[idB].User)

	dir := t.TempDir()
	scen := filepath.Join(dir, "scenario.json")
	gputest.Write(t, scen, gpuScenario(pidA, jobASMUtil))

	plain := startMetricsAgent(t, agent, stub, scen, filepath.Join(dir, "out-plain"), mixed.agentFlags()...)
	auth := startMetricsAgentAuth(t, agent, stub, scen, dir, mixed.agentFlags()...)

	t.Run("promtool", func(t *testing.T) {
		// Wait for a poll that has seen the jobs, so every family is there.
		body := waitMetrics(t, plain, func(body string) bool {
			return strings.Contains(body, "slurmscope_job_gpu_utilization_ratio{")
		})
		cmd := exec.Command("promtool", "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})

	t.Run("basic-auth", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			user, pass string
			want       int
		}{
			{"none", "", "", http.StatusUnauthorized},
			{"wrong-password", authUser, "wrong", http.StatusUnauthorized},
			{"right", authUser, authPassword, http.StatusOK},
		} {
			code, body := httpGet(t, "http://"+auth+"/metrics", tc.user, tc.pass)
			if code != tc.want {
				t.Errorf("%s: GET /metrics answered %d, want %d", tc.name, code, tc.want)
			}
			if code == http.StatusOK && !strings.Contains(body, "slurmscope_gpu_polls_total") {
				t.Errorf("%s: /metrics has no slurmscope_gpu_polls_total:\n%s", tc.name, clip(body))
			}
			if code != http.StatusOK && strings.Contains(body, "slurmscope_") {
				t.Errorf("%s: a %d answer leaks metrics", tc.name, code)
			}
		}
	})

	prom := startPrometheus(t, dir, plain, auth)

	job := func(id string) string { return fmt.Sprintf(`%s=%q`, schema.JobID.Label, id) }
	sel := func(matchers ...string) string {
		return "{" + strings.Join(append([]string{`job="gpu"`}, matchers...), ",") + "}"
	}

	t.Run("prometheus-scrapes", func(t *testing.T) {
		prom.waitQuery(t, `up == 1`, "both agents up (the one behind basic auth with its credentials)", func(r []promSample) bool {
			return len(r) == 2
		})
	})

	t.Run("job-utilisation-by-user", func(t *testing.T) {
		q := fmt.Sprintf(`avg by (%s) (slurmscope_job_gpu_utilization_ratio{job="gpu"})`, schema.JobUser.Label)
		want := map[string]float64{jobs[idA].User: jobASMUtil / 100.0, jobs[idB].User: 0}
		prom.waitQuery(t, q, fmt.Sprintf("%v", want), func(r []promSample) bool {
			got := map[string]float64{}
			for _, s := range r {
				got[s.Metric[schema.JobUser.Label]] = s.Value
			}
			return sameValues(got, want)
		})
	})

	t.Run("job-series-labels", func(t *testing.T) {
		r := prom.waitQuery(t, "slurmscope_job_gpu_utilization_ratio"+sel(job(idA)), "one series of job A, on GPU 0", func(r []promSample) bool {
			return len(r) == 1
		})
		want := map[string]string{
			schema.JobID.Label: idA, schema.JobUser.Label: jobs[idA].User, schema.JobName.Label: jobs[idA].Name,
			schema.HostName.Label: gpuNode, schema.GPUUUID.Label: gpu0UUID, schema.GPUIndex.Label: "0", schema.GPUName.Label: gpuName,
		}
		for k, v := range want {
			if got := r[0].Metric[k]; got != v {
				t.Errorf("%s = %q, want %q; series %v", k, got, v, r[0].Metric)
			}
		}
		if _, ok := r[0].Metric[schema.GPUMIGProfile.Label]; ok {
			t.Errorf("whole-GPU series has %s: %v", schema.GPUMIGProfile.Label, r[0].Metric)
		}
		prom.waitQuery(t, "slurmscope_job_gpu_memory_used_bytes"+sel(job(idA), schema.GPUIndex.Label+`="0"`),
			fmt.Sprint(jobAMemGPU0), func(r []promSample) bool { return len(r) == 1 && r[0].Value == float64(jobAMemGPU0) })
	})

	t.Run("mig", func(t *testing.T) {
		q := "slurmscope_gpu_memory_total_bytes" + sel(schema.GPUMIGProfile.Label+`!=""`)
		want := map[string]float64{"3g.40gb": float64(40 * gib), "4g.40gb": float64(40 * gib)}
		r := prom.waitQuery(t, q, fmt.Sprintf("%v", want), func(r []promSample) bool {
			got := map[string]float64{}
			for _, s := range r {
				got[s.Metric[schema.GPUMIGProfile.Label]] = s.Value
			}
			return sameValues(got, want)
		})
		for _, s := range r {
			if s.Metric[schema.GPUUUID.Label] != gpu2UUID || s.Metric[schema.GPUMIGInstance.Label] == "" {
				t.Errorf("MIG series without its parent GPU or instance id: %v", s.Metric)
			}
		}
		// Job A's process on the 3g.40gb instance, and its allocation.
		prom.waitQuery(t, "slurmscope_job_gpu_memory_used_bytes"+sel(job(idA), schema.GPUMIGProfile.Label+`="3g.40gb"`),
			fmt.Sprint(jobAMemMIG), func(r []promSample) bool {
				return len(r) == 1 && r[0].Value == float64(jobAMemMIG) && r[0].Metric[schema.GPUMIGInstance.Label] == strconv.Itoa(mig3gGI)
			})
		prom.waitQuery(t, "slurmscope_job_gpu_allocated"+sel(job(idA), schema.GPUMIGProfile.Label+`="3g.40gb"`), "1",
			func(r []promSample) bool { return len(r) == 1 && r[0].Value == 1 })
	})

	t.Run("idle-allocated", func(t *testing.T) {
		r := prom.waitQuery(t, "slurmscope_job_gpu_allocated"+sel(job(idB))+" == 1", "GPU 1 and the 4g.40gb instance",
			func(r []promSample) bool { return len(r) == 2 })
		got := map[string]bool{}
		for _, s := range r {
			got[s.Metric[schema.GPUIndex.Label]+"/"+s.Metric[schema.GPUMIGProfile.Label]] = true
			if s.Metric[schema.JobUser.Label] != jobs[idB].User {
				t.Errorf("%s = %q, want %q", schema.JobUser.Label, s.Metric[schema.JobUser.Label], jobs[idB].User)
			}
		}
		if !got["1/"] || !got["2/4g.40gb"] {
			t.Errorf("job B allocated %v, want GPU 1 and GPU 2's 4g.40gb", keys(got))
		}
		// Zero use of the whole GPU; NVML has no utilisation of a MIG
		// instance, so that one has no utilisation series at all.
		prom.waitQuery(t, "slurmscope_job_gpu_utilization_ratio"+sel(job(idB)), "one series, GPU 1, value 0",
			func(r []promSample) bool {
				return len(r) == 1 && r[0].Value == 0 && r[0].Metric[schema.GPUUUID.Label] == gpu1UUID
			})
		prom.waitQuery(t, "slurmscope_job_gpu_memory_used_bytes"+sel(job(idB)), "two series, both 0",
			func(r []promSample) bool { return len(r) == 2 && r[0].Value == 0 && r[1].Value == 0 })
	})

	t.Run("lost-gpu", func(t *testing.T) {
		r := prom.waitQuery(t, "slurmscope_gpu_healthy"+sel(), "GPUs 0-2 healthy, 3 not", func(r []promSample) bool {
			got := map[string]float64{}
			for _, s := range r {
				got[s.Metric[schema.GPUIndex.Label]] = s.Value
			}
			return sameValues(got, map[string]float64{"0": 1, "1": 1, "2": 1, "3": 0})
		})
		t.Logf("health: %v", r)
		// The healthy GPUs have their series; the lost one has none but
		// its health.
		prom.waitQuery(t, fmt.Sprintf("count by (%s) (slurmscope_gpu_memory_total_bytes%s)", schema.GPUIndex.Label, sel(schema.GPUMIGProfile.Label+`=""`)),
			"GPUs 0, 1, 2", func(r []promSample) bool {
				var idx []string
				for _, s := range r {
					idx = append(idx, s.Metric[schema.GPUIndex.Label])
				}
				sort.Strings(idx)
				return strings.Join(idx, ",") == "0,1,2"
			})
		prom.waitQuery(t, "slurmscope_gpu_utilization_ratio"+sel(), "GPUs 0 and 1 (GPU 2 has MIG on: unsupported)",
			func(r []promSample) bool { return len(r) == 2 })
		lost := prom.query(t, fmt.Sprintf(`{job="gpu",%s="3",__name__!="slurmscope_gpu_healthy"}`, schema.GPUIndex.Label))
		if len(lost) != 0 {
			t.Errorf("the lost GPU has series besides its health: %v", lost)
		}
		prom.waitQuery(t, `sum(slurmscope_gpu_nvml_errors_total{job="gpu",error="ERROR_GPU_IS_LOST"}) > 0`, "counted",
			func(r []promSample) bool { return len(r) == 1 })
	})

	t.Run("job-info", func(t *testing.T) {
		for _, id := range []string{idA, idB} {
			r := prom.waitQuery(t, "slurmscope_job_info"+sel(job(id)), "one series", func(r []promSample) bool { return len(r) == 1 })
			for k, v := range map[string]string{schema.JobName.Label: jobs[id].Name, schema.JobUser.Label: jobs[id].User} {
				if got := r[0].Metric[k]; got != v {
					t.Errorf("job %s: %s = %q, squeue says %q", id, k, got, v)
				}
			}
		}
	})

	t.Run("ambiguous-ordinal-counted", func(t *testing.T) {
		prom.waitQuery(t, `slurmscope_gpu_allocation_errors_total{job="gpu",reason="ambiguous_ordinal"} >= 1`,
			"job A's SLURM_JOB_GPUS=0 refused on a MIG node", func(r []promSample) bool { return len(r) == 1 })
	})

	t.Run("live-change", func(t *testing.T) {
		gputest.Write(t, scen, gpuScenario(pidA, jobASMUtilLater))
		q := "slurmscope_job_gpu_utilization_ratio" + sel(job(idA))
		prom.waitQuery(t, q, fmt.Sprint(jobASMUtilLater/100.0), func(r []promSample) bool {
			return len(r) == 1 && near(r[0].Value, jobASMUtilLater/100.0)
		})
	})

	t.Run("cancelled-job-vanishes", func(t *testing.T) {
		if err := c.Cancel(ctx, idB); err != nil {
			t.Fatal(err)
		}
		waitJobDone(t, c, idB, gpuWait)
		needle := fmt.Sprintf(`%s=%q`, schema.JobID.Label, idB)
		body := waitMetrics(t, plain, func(body string) bool { return !strings.Contains(body, needle) })
		if !strings.Contains(body, fmt.Sprintf(`%s=%q`, schema.JobID.Label, idA)) {
			t.Errorf("job A's series vanished too:\n%s", clip(grepLines(body, "slurmscope_job_")))
		}
	})
}

// gpuScenario is the stand-in's hardware with job A's task (pid) on GPU 0
// at smUtil percent and on the 3g.40gb instance of GPU 2.
func gpuScenario(pid, smUtil int) gputest.Scenario {
	dev := func(i int, uuid string) gputest.Device {
		return gputest.Device{
			UUID: uuid, Name: gpuName, Minor: gputest.Int(i),
			Memory:       &gputest.Memory{Total: 80 * gib, Used: 0},
			PowerMW:      gputest.Int(90000 + 1000*i),
			TemperatureC: gputest.Int(40 + i),
			SMClockMHz:   gputest.Int(1980),
			Utilization:  &gputest.Utilization{GPU: 0, Memory: 0},
			GPM:          &gputest.GPM{},
		}
	}
	g0 := dev(0, gpu0UUID)
	g0.Utilization = &gputest.Utilization{GPU: smUtil, Memory: 30}
	g0.Memory.Used = jobAMemGPU0
	g0.GPM = &gputest.GPM{SMActive: float64(smUtil), SMOccupancy: 30, TensorActive: 12.5}
	g0.Processes = []gputest.Process{{PID: pid, UsedMemory: jobAMemGPU0, SMUtil: gputest.Int(smUtil), MemUtil: gputest.Int(20)}}

	g1 := dev(1, gpu1UUID)

	g2 := dev(2, gpu2UUID)
	g2.Utilization = nil // NOT_SUPPORTED with MIG on, as the driver answers
	g2.Memory.Used = jobAMemMIG
	g2.MIG = []gputest.MIG{
		{UUID: mig3gUUID, Profile: "3g.40gb", GPUInstanceID: mig3gGI,
			Memory: &gputest.Memory{Total: 40 * gib, Used: jobAMemMIG}, GPM: &gputest.GPM{SMActive: 55, TensorActive: 20}},
		{UUID: mig4gUUID, Profile: "4g.40gb", GPUInstanceID: mig4gGI,
			Memory: &gputest.Memory{Total: 40 * gib, Used: 0}, GPM: &gputest.GPM{}},
	}
	g2.Processes = []gputest.Process{{PID: pid, UsedMemory: jobAMemMIG, GPUInstanceID: gputest.Int(mig3gGI), ComputeInstanceID: gputest.Int(0)}}

	g3 := dev(3, gpu3UUID)
	g3.Lost = true
	return gputest.Scenario{Devices: []gputest.Device{g0, g1, g2, g3}}
}

// waitTaskPID waits for job id's batch task to be comm (after the script
// exec'd it) and returns its pid.
func waitTaskPID(t *testing.T, c *slurmtest.Cluster, id, comm string) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		procs, err := c.JobProcs(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if !p.Stepd && p.Step == "batch" && p.Comm == comm && p.Node == gpuNode {
				return p.PID
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: no %s task on %s after 60s: %+v; logs in %s", id, comm, gpuNode, procs, c.LogDir())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startMetricsAgent starts `slurmscope-agent run` with metrics only and
// the NVML stand-in, and returns the address it serves /metrics on.
func startMetricsAgent(t *testing.T, agent, stub, scenario, outDir string, extra ...string) string {
	t.Helper()
	args := append([]string{"run", "--cpu-profiling=false", "--offcpu-profiling=false", "--gpu-interval", "1s", "--node-name", gpuNode,
		"--metrics-addr", "127.0.0.1:0", "--nvml-library", stub, "--output-dir", outDir}, extra...)
	p := launchAgent(t, []string{gputest.EnvScenario + "=" + scenario}, agent, args...)
	p.waitLog(t, "did not log `serving metrics` (with --cpu-profiling=false it must still serve /metrics)",
		func(log string) bool { return metricsAddr.MatchString(log) })
	return p.servingAddr(t)
}

// startMetricsAgentAuth starts a second agent whose /metrics needs basic
// auth (exporter-toolkit's web config, with a bcrypt hash), and writes the
// password file Prometheus scrapes it with.
func startMetricsAgentAuth(t *testing.T, agent, stub, scenario, dir string, extra ...string) string {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(authPassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web-config.yml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "basic_auth_users:\n  %s: %q\n", authUser, hash), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scrape-password"), []byte(authPassword), 0o600); err != nil {
		t.Fatal(err)
	}
	return startMetricsAgent(t, agent, stub, scenario, filepath.Join(dir, "out-auth"), append(extra, "--web.config.file", cfg)...)
}

func httpGet(t *testing.T, u, user, pass string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp.StatusCode, string(b)
}

// waitMetrics fetches the agent's /metrics until ok holds, and returns
// that body.
func waitMetrics(t *testing.T, addr string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(gpuWait)
	for {
		code, body := httpGet(t, "http://"+addr+"/metrics", "", "")
		if code == http.StatusOK && ok(body) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent /metrics (%d) not as wanted after %v; its slurmscope_ lines:\n%s", code, gpuWait, clip(grepLines(body, "slurmscope_")))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// promServer is a real Prometheus scraping the agents.
type promServer struct{ base string }

type promSample struct {
	Metric map[string]string
	Value  float64
}

// startPrometheus runs Debian's prometheus, scraping plain every second
// as job "gpu" and auth (with basic auth) as job "gpu-auth", and waits
// until it is ready.
func startPrometheus(t *testing.T, dir, plain, auth string) *promServer {
	t.Helper()
	yml := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: gpu
    static_configs:
      - targets: [%q]
  - job_name: gpu-auth
    basic_auth:
      username: %q
      password_file: %q
    static_configs:
      - targets: [%q]
`, plain, authUser, filepath.Join(dir, "scrape-password"), auth)
	return &promServer{base: runPrometheus(t, dir, yml, "--log.level=warn")}
}

// query runs an instant PromQL query and returns the vector.
func (p *promServer) query(t *testing.T, q string) []promSample {
	t.Helper()
	r, err := p.tryQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (p *promServer) tryQuery(q string) ([]promSample, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("query %s: %v: %s", q, err, clip(string(b)))
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query %s: %s: %s", q, out.ErrorType, out.Error)
	}
	if out.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %q, want vector", q, out.Data.ResultType)
	}
	var r []promSample
	for _, s := range out.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v: %v", q, s.Value, err)
		}
		r = append(r, promSample{Metric: s.Metric, Value: v})
	}
	sort.Slice(r, func(i, j int) bool { return fmt.Sprint(r[i].Metric) < fmt.Sprint(r[j].Metric) })
	return r, nil
}

// waitQuery repeats q until ok holds (the agents poll and Prometheus
// scrapes every second) and returns that answer; it fails t with the last
// answer after gpuWait.
func (p *promServer) waitQuery(t *testing.T, q, want string, ok func([]promSample) bool) []promSample {
	t.Helper()
	deadline := time.Now().Add(gpuWait)
	for {
		r, err := p.tryQuery(q)
		if err == nil && ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			t.Fatalf("%s\n  want: %s\n  got after %v: %v", q, want, gpuWait, r)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func sameValues(got, want map[string]float64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || !near(g, w) {
			return false
		}
	}
	return true
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func clip(s string) string {
	if len(s) > 8000 {
		return s[:8000] + "\n..."
	}
	return s
}
