package gpu_test

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/cgroup/cgrouptest"
	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/agent/gpu/gputest"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/users"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/schema"
)

const (
	uuid0 = "GPU-0b3f8b4e-6a1d-4c5e-9f2a-1d2c3b4a5f60"
	uuid1 = "GPU-7e1c2d3b-8f9a-4b5c-a6d7-e8f9a0b1c2d3"
	mig32 = "MIG-4f0e1d2c-3b4a-5968-7a6b-5c4d3e2f1a0b" // 3g.40gb, GPU instance 2
	mig41 = "MIG-9a8b7c6d-5e4f-5a3b-8c2d-1e0f9a8b7c6d" // 4g.40gb, GPU instance 1
	gib   = uint64(1) << 30
)

// proc writes one fake process: a task of job `job` (0: in no job) whose
// environment is env.
func proc(t testing.TB, root string, pid, job int, env map[string]string) {
	t.Helper()
	d := filepath.Join(root, fmt.Sprint(pid))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	cg := fmt.Sprintf("0::/system.slice/slurmstepd.scope/job_%d/step_0/user/task_0\n", job)
	if job == 0 {
		cg = "0::/user.slice/user-1001.slice/session-1.scope\n"
	}
	var e strings.Builder
	fmt.Fprintf(&e, "PATH=/usr/bin\x00SLURM_JOB_ID=%d\x00SLURM_JOB_NAME=train-%d\x00SLURM_JOB_ACCOUNT=physics\x00SLURM_JOB_PARTITION=gpu\x00", job, job)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&e, "%s=%s\x00", k, env[k])
	}
	for name, body := range map[string]string{
		"stat":    fmt.Sprintf("%d (python3) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, 5000+pid),
		"cgroup":  cg,
		"status":  "Name:\tpython3\nUid:\t1001\t1001\t1001\t1001\n",
		"environ": e.String(),
	} {
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func node(t *testing.T) string {
	root := t.TempDir()
	proc(t, root, 1001, 100, map[string]string{gpu.EnvJobGPUs: "0", gpu.EnvVisibleGPUs: uuid0})
	proc(t, root, 1002, 100, map[string]string{gpu.EnvJobGPUs: "0", gpu.EnvVisibleGPUs: uuid0})
	proc(t, root, 2001, 200, map[string]string{gpu.EnvVisibleGPUs: mig32})
	proc(t, root, 3001, 300, map[string]string{gpu.EnvVisibleGPUs: mig41}) // allocated, idle
	proc(t, root, 4001, 400, nil)                                          // no GPU
	proc(t, root, 5001, 500, map[string]string{gpu.EnvVisibleGPUs: "GPU-zz;rm -rf /"})
	proc(t, root, 6001, 0, nil) // on a GPU, in no job
	// 700 claims 300's instance and GPU 0 in its environment; Slurm gave
	// it nothing. 800 claims GPU 0, and no source knows what it holds.
	proc(t, root, 7001, 700, map[string]string{gpu.EnvVisibleGPUs: mig41 + "," + uuid0})
	proc(t, root, 8001, 800, map[string]string{gpu.EnvVisibleGPUs: uuid0})
	return root
}

// grants is what Slurm gave the jobs of node: job 100 GPU 0 and GPU 1's
// 3g.40gb instance (its tasks narrow it to GPU 0), 200 the 3g.40gb
// instance, 300 the 4g.40gb one, 700 nothing.
var grants = gputest.Grants{
	"100": {gputest.GPUDev(0), gputest.GPUDev(1), gputest.MIGDev(21)},
	"200": {gputest.GPUDev(1), gputest.MIGDev(21)},
	"300": {gputest.GPUDev(1), gputest.MIGDev(12)},
	"400": {}, "500": {}, "700": {},
}

// migAccess numbers GPU 1's instances' access capabilities as the driver
// would: 3g.40gb (GPU instance 2) 21, 4g.40gb (1) 12.
var migAccess = []gputest.MIGAccess{{GPU: 1, GI: 2, Minor: 21}, {GPU: 1, GI: 1, Minor: 12}}

func scenario() gputest.Scenario {
	h100 := "NVIDIA H100 80GB HBM3"
	return gputest.Scenario{Devices: []gputest.Device{
		{
			UUID: uuid0, Name: h100, PCIBusID: "00000000:18:00.0",
			Utilization: &gputest.Utilization{GPU: 87, Memory: 40},
			Memory:      &gputest.Memory{Total: 80 * gib, Used: 31 * gib},
			PowerMW:     gputest.Int(350500), TemperatureC: gputest.Int(54), SMClockMHz: gputest.Int(1980),
			GPM: &gputest.GPM{SMActive: 50, SMOccupancy: 30, TensorActive: 12.5},
			Processes: []gputest.Process{
				{PID: 1001, UsedMemory: 20 * gib, SMUtil: gputest.Int(60), MemUtil: gputest.Int(20)},
				{PID: 1002, UsedMemory: 10 * gib, SMUtil: gputest.Int(25), MemUtil: gputest.Int(10)},
				{PID: 6001, UsedMemory: 1 * gib, SMUtil: gputest.Int(2), MemUtil: gputest.Int(1)},
			},
		},
		{
			UUID: uuid1, Name: h100, PCIBusID: "00000000:2A:00.0",
			Memory:  &gputest.Memory{Total: 80 * gib, Used: 5 * gib},
			PowerMW: gputest.Int(120000), TemperatureC: gputest.Int(41), SMClockMHz: gputest.Int(1755),
			GPM: &gputest.GPM{SMActive: 10, SMOccupancy: 5, TensorActive: 0},
			MIG: []gputest.MIG{
				{UUID: mig32, Profile: "3g.40gb", GPUInstanceID: 2, Memory: &gputest.Memory{Total: 40 * gib, Used: 5 * gib},
					GPM: &gputest.GPM{SMActive: 70, SMOccupancy: 40, TensorActive: 35}},
				{UUID: mig41, Profile: "4g.40gb", GPUInstanceID: 1, Memory: &gputest.Memory{Total: 40 * gib, Used: 0}},
			},
			Processes: []gputest.Process{{PID: 2001, UsedMemory: 5 * gib, GPUInstanceID: gputest.Int(2), ComputeInstanceID: gputest.Int(0)}},
		},
		{UUID: "GPU-dead0000-0000-0000-0000-000000000000", Name: h100, Lost: true},
	}}
}

type series struct {
	fams map[string]*dto.MetricFamily
	text string
}

func gather(t *testing.T, c prometheus.Collector) series {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	s := series{fams: map[string]*dto.MetricFamily{}}
	for _, f := range fams {
		s.fams[f.GetName()] = f
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	s.text = buf.String()
	return s
}

// get returns the value of the series with exactly these labels (host_name
// is added). An empty label is no label, as Prometheus stores it.
func (s series) get(name string, labels map[string]string) (float64, bool) {
	f := s.fams[name]
	if f == nil {
		return 0, false
	}
	want := map[string]string{schema.HostName.Label: "node1"}
	for k, v := range labels {
		if v != "" {
			want[k] = v
		}
	}
next:
	for _, m := range f.GetMetric() {
		n := 0
		for _, lp := range m.GetLabel() {
			if lp.GetValue() == "" {
				continue
			}
			if v, ok := want[lp.GetName()]; !ok || v != lp.GetValue() {
				continue next
			}
			n++
		}
		if n != len(want) {
			continue
		}
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

func (s series) want(t *testing.T, name string, labels map[string]string, v float64) {
	t.Helper()
	got, ok := s.get(name, labels)
	if !ok {
		t.Errorf("missing %s%v", name, labels)
		return
	}
	if d := got - v; d > 1e-9 || d < -1e-9 {
		t.Errorf("%s%v = %v, want %v", name, labels, got, v)
	}
}

func (s series) absent(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	if _, ok := s.get(name, labels); ok {
		t.Errorf("unexpected %s%v", name, labels)
	}
}

func gpuL(uuid, idx string, extra ...string) map[string]string {
	m := map[string]string{schema.GPUUUID.Label: uuid, schema.GPUIndex.Label: idx, schema.GPUName.Label: "NVIDIA H100 80GB HBM3"}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func migL(uuid, idx, profile, gi string, extra ...string) map[string]string {
	return gpuL(uuid, idx, append([]string{schema.GPUMIGProfile.Label, profile, schema.GPUMIGInstance.Label, gi}, extra...)...)
}

func jobL(job string, l map[string]string) map[string]string {
	l[schema.JobID.Label] = job
	l[schema.JobUser.Label] = "alice"
	l[schema.JobName.Label] = "train-" + job
	return l
}

func newCollector(t *testing.T, lib, procRoot string) *gpu.Collector {
	t.Helper()
	fs := procfs.New(procRoot)
	res := attribution.New(attribution.Options{Proc: fs, Users: users.Passwd{1001: "alice"}, HostName: "node1", Cgroups: cgrouptest.Mirror(t, procRoot)})
	c, err := gpu.New(gpu.Options{LibraryPath: lib, HostName: "node1", Jobs: res, Proc: fs,
		Grants: grants, Devices: gputest.Devices(t, t.TempDir(), migAccess...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func TestIntegrationStub(t *testing.T) {
	lib := gputest.Library(t)
	scen := filepath.Join(t.TempDir(), "scenario.json")
	gputest.Write(t, scen, scenario())
	t.Setenv(gputest.EnvScenario, scen)
	root := node(t)
	c := newCollector(t, lib, root)
	ctx := context.Background()

	// Two polls: GPM reports activity between two samples.
	for range 2 {
		if err := c.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s := gather(t, c)
	t.Log("\n" + s.text)

	g0, g1 := gpuL(uuid0, "0"), gpuL(uuid1, "1")
	s.want(t, "slurmscope_gpu_info", gpuL(uuid0, "0", "pci_bus_id", "00000000:18:00.0"), 1)
	s.want(t, "slurmscope_gpu_utilization_ratio", g0, 0.87)
	s.want(t, "slurmscope_gpu_memory_utilization_ratio", g0, 0.40)
	s.want(t, "slurmscope_gpu_memory_used_bytes", g0, float64(31*gib))
	s.want(t, "slurmscope_gpu_memory_total_bytes", g0, float64(80*gib))
	s.want(t, "slurmscope_gpu_power_watts", g0, 350.5)
	s.want(t, "slurmscope_gpu_temperature_celsius", g0, 54)
	s.want(t, "slurmscope_gpu_sm_clock_hertz", g0, 1980e6)
	s.want(t, "slurmscope_gpu_sm_active_ratio", g0, 0.5)
	s.want(t, "slurmscope_gpu_sm_occupancy_ratio", g0, 0.3)
	s.want(t, "slurmscope_gpu_tensor_active_ratio", g0, 0.125)
	s.want(t, "slurmscope_gpu_healthy", g0, 1)
	s.want(t, "slurmscope_gpu_healthy", g1, 1)

	// MIG: memory and GPM per instance; utilisation is not made up.
	m32, m41 := migL(uuid1, "1", "3g.40gb", "2"), migL(uuid1, "1", "4g.40gb", "1")
	s.want(t, "slurmscope_gpu_memory_total_bytes", m32, float64(40*gib))
	s.want(t, "slurmscope_gpu_memory_used_bytes", m32, float64(5*gib))
	s.want(t, "slurmscope_gpu_memory_used_bytes", m41, 0)
	s.want(t, "slurmscope_gpu_sm_active_ratio", m32, 0.7)
	s.want(t, "slurmscope_gpu_tensor_active_ratio", m32, 0.35)
	s.absent(t, "slurmscope_gpu_sm_active_ratio", m41) // the scenario gives that instance no GPM
	s.absent(t, "slurmscope_gpu_utilization_ratio", m32)
	s.absent(t, "slurmscope_gpu_utilization_ratio", g1) // MIG-enabled GPU
	s.want(t, "slurmscope_gpu_unsupported_info", migL(uuid1, "1", "3g.40gb", "2", "metric", "slurmscope_gpu_utilization_ratio"), 1)
	s.want(t, "slurmscope_gpu_mig_info", migL(uuid1, "1", "3g.40gb", "2", "gpu_mig_compute_instance", "0", "gpu_mig_uuid", mig32), 1)

	// The lost GPU: health 0, no other series, and the poll went on.
	s.want(t, "slurmscope_gpu_healthy", map[string]string{schema.GPUUUID.Label: "", schema.GPUIndex.Label: "2", schema.GPUName.Label: ""}, 0)
	s.want(t, "slurmscope_gpu_nvml_errors_total", map[string]string{"function": "nvmlDeviceGetHandleByIndex_v2", "error": "ERROR_GPU_IS_LOST"}, 2)

	// Jobs: 100 uses GPU 0 through two processes.
	j100 := jobL("100", gpuL(uuid0, "0"))
	s.want(t, "slurmscope_job_gpu_allocated", j100, 1)
	s.want(t, "slurmscope_job_gpu_memory_used_bytes", j100, float64(30*gib))
	s.want(t, "slurmscope_job_gpu_utilization_ratio", j100, 0.85)
	s.want(t, "slurmscope_job_gpu_memory_utilization_ratio", j100, 0.30)
	// 200 on its 3g.40gb instance: memory, and no utilisation.
	j200 := jobL("200", migL(uuid1, "1", "3g.40gb", "2"))
	s.want(t, "slurmscope_job_gpu_allocated", j200, 1)
	s.want(t, "slurmscope_job_gpu_memory_used_bytes", j200, float64(5*gib))
	s.absent(t, "slurmscope_job_gpu_utilization_ratio", j200)
	// 300: allocated its 4g.40gb instance and idle.
	j300 := jobL("300", migL(uuid1, "1", "4g.40gb", "1"))
	s.want(t, "slurmscope_job_gpu_allocated", j300, 1)
	s.want(t, "slurmscope_job_gpu_memory_used_bytes", j300, 0)
	s.want(t, "slurmscope_job_info", map[string]string{schema.JobID.Label: "400", schema.JobName.Label: "train-400",
		schema.JobUser.Label: "alice", schema.JobAccount.Label: "physics", schema.JobPartition.Label: "gpu"}, 1)
	// Garbage in 500's CUDA_VISIBLE_DEVICES and the ordinals on a MIG node
	// are counted, not used; each task once.
	s.want(t, "slurmscope_gpu_allocation_errors_total", map[string]string{"reason": "malformed"}, 1)
	s.want(t, "slurmscope_gpu_allocation_errors_total", map[string]string{"reason": "ambiguous_ordinal"}, 2)
	// Job 100's tasks name GPU 0 only: the grant narrows to it.
	s.absent(t, "slurmscope_job_gpu_allocated", jobL("100", migL(uuid1, "1", "3g.40gb", "2")))
	// What 700's and 800's tasks claim is not theirs: counted, never
	// allocated.
	for _, job := range []string{"700", "800"} {
		for _, l := range []map[string]string{gpuL(uuid0, "0"), migL(uuid1, "1", "4g.40gb", "1")} {
			s.absent(t, "slurmscope_job_gpu_allocated", jobL(job, l))
		}
	}
	s.want(t, "slurmscope_gpu_allocation_errors_total", map[string]string{"reason": "outside_grant"}, 3)
	s.want(t, "slurmscope_gpu_allocation_errors_total", map[string]string{"reason": "grant_unknown"}, 1)

	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
	promtool(t, s.text)

	// A live change: GPU 0 gets busier, job 100's processes end (it stays
	// allocated, idle), job 400 ends, the lost GPU comes back.
	sc := scenario()
	sc.Devices[0].Utilization.GPU = 12
	sc.Devices[0].Processes = nil
	sc.Devices[2].Lost = false
	gputest.Write(t, scen, sc)
	if err := os.RemoveAll(filepath.Join(root, "4001")); err != nil {
		t.Fatal(err)
	}
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	s = gather(t, c)
	s.want(t, "slurmscope_gpu_utilization_ratio", g0, 0.12)
	s.want(t, "slurmscope_job_gpu_allocated", j100, 1)
	s.want(t, "slurmscope_job_gpu_utilization_ratio", j100, 0)
	s.want(t, "slurmscope_job_gpu_memory_used_bytes", j100, 0)
	s.absent(t, "slurmscope_job_info", map[string]string{schema.JobID.Label: "400", schema.JobName.Label: "train-400",
		schema.JobUser.Label: "alice", schema.JobAccount.Label: "physics", schema.JobPartition.Label: "gpu"})
	s.want(t, "slurmscope_gpu_healthy", gpuL("GPU-dead0000-0000-0000-0000-000000000000", "2"), 1)
	promtool(t, s.text)
}

func promtool(t *testing.T, text string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if testenv.Integration() {
			t.Fatal("promtool not found (Debian package prometheus)")
		}
		t.Log("promtool not found; skipping its check")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// Hostile scenarios make the stand-in fail calls (with a message on
// stderr), never crash; the collector reports the failed poll and recovers
// when the scenario is fixed.
func TestIntegrationBadScenarios(t *testing.T) {
	lib := gputest.Library(t)
	scen := filepath.Join(t.TempDir(), "scenario.json")
	gputest.Write(t, scen, scenario())
	t.Setenv(gputest.EnvScenario, scen)
	c := newCollector(t, lib, node(t))
	ctx := context.Background()
	for _, bad := range []string{
		``,
		`{"devices": [`,
		`{"devices": [{"uuid": "GPU-1"}]} trailing`,
		`{"devices": {}}`,
		`{"devices": [{"uuid": 5}]}`,
		`{"devices": [{"name": "no uuid"}]}`,
		`{"devices": [{"uuid": "GPU-1"}, {"uuid": "GPU-1"}]}`,
		`{"devices": [{"uuid": "GPU-1", "memory": {"total": 1, "used": 2}}]}`,
		`{"devices": [{"uuid": "GPU-1", "power_mw": 1e300}]}`,
		`{"devices": [{"uuid": "GPU-1", "utilization": {"gpu": -1}}]}`,
		`{"devices": [{"uuid": "GPU-1", "processes": [{"pid": 1, "gpu_instance_id": 3}]}]}`,
		`{"devices": [{"uuid": "GPU-1", "mig": [{"uuid": "MIG-1", "profile": "1g.10gb", "gpu_instance_id": 1}, {"uuid": "MIG-2", "profile": "1g.10gb", "gpu_instance_id": 1}]}]}`,
		`{"devices": [{"uuid": "` + strings.Repeat("a", 200) + `"}]}`,
		`{"devices": [{"uuid": "GPU-\u0000"}]}`,
		strings.Repeat("[", 100000),
		`{"devices": [{"uuid": "GPU-1", "name": "` + "\x01" + `"}]}`,
	} {
		gputest.WriteRaw(t, scen, []byte(bad))
		if err := c.Poll(ctx); err == nil {
			t.Errorf("scenario %.60q: poll succeeded", bad)
		}
	}
	gputest.Write(t, scen, scenario())
	if err := c.Poll(ctx); err != nil {
		t.Fatalf("after fixing the scenario: %v", err)
	}
}

// The stand-in exports every symbol the collector may call.
func TestStubExportsEverySymbol(t *testing.T) {
	f, err := elf.Open(gputest.Library(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			have[s.Name] = true
		}
	}
	for _, s := range gpu.Symbols() {
		if !have[s] {
			t.Errorf("stand-in lacks %s", s)
		}
	}
}

// The example in nvmlstub/README.md is a valid scenario.
func TestIntegrationREADMEScenario(t *testing.T) {
	lib := gputest.Library(t)
	t.Setenv(gputest.EnvScenario, filepath.Join("nvmlstub", "testdata", "h100-mig.json"))
	c := newCollector(t, lib, node(t))
	if err := c.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := gather(t, c)
	s.want(t, "slurmscope_gpu_memory_total_bytes", migL("GPU-0b3f8b4e-6a1d-4c5e-9f2a-1d2c3b4a5f60", "0", "3g.40gb", "2"), 40*(1<<30))
}
