package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// fakeDevice is a whole GPU without MIG or GPM, as go-nvml's mock sees it.
func fakeDevice(uuid string, minor int) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:        func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc:        func() (string, nvml.Return) { return "NVIDIA A100-SXM4-80GB", nvml.SUCCESS },
		GetPciInfoFunc:     func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.SUCCESS },
		GetMinorNumberFunc: func() (int, nvml.Return) { return minor, nvml.SUCCESS },
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 50, Memory: 10}, nvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 80 << 30, Used: 1 << 30}, nvml.SUCCESS
		},
		GetPowerUsageFunc:              func() (uint32, nvml.Return) { return 100000, nvml.SUCCESS },
		GetTemperatureFunc:             func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 40, nvml.SUCCESS },
		GetClockInfoFunc:               func(nvml.ClockType) (uint32, nvml.Return) { return 1410, nvml.SUCCESS },
		GetMigModeFunc:                 func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetProcessUtilizationFunc: func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
}

// fakeLib is a library whose driver has no GPM symbols, so any GPM call
// panics in the mock.
func fakeLib(devs ...*mock.Device) *mock.Interface {
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			return devs[i], nvml.SUCCESS
		},
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
				if strings.HasPrefix(s, "nvmlGpm") {
					return errors.New("undefined symbol")
				}
				return nil
			}}
		},
	}
}

type fakeJobs []attribution.Process

func (f fakeJobs) Scan() ([]attribution.Process, error) { return f, nil }
func (f fakeJobs) Resolve(pid int) (attribution.Process, error) {
	return attribution.Process{}, procfs.ErrGone
}

func TestInitOnceAndScrapesDoNotCallNVML(t *testing.T) {
	d := fakeDevice("GPU-a", 0)
	lib := fakeLib(d)
	c, err := New(Options{NVML: lib, HostName: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	calls := len(d.GetUUIDCalls())
	for range 5 {
		testutil.CollectAndCount(c)
	}
	if len(d.GetUUIDCalls()) != calls {
		t.Error("a scrape called NVML")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n, m := len(lib.InitCalls()), len(lib.ShutdownCalls()); n != 1 || m != 1 {
		t.Errorf("Init %d times, Shutdown %d times; want once each", n, m)
	}
	if err := c.Poll(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Poll after Close: %v", err)
	}
}

func TestNoDriver(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
		if _, err := New(Options{NVML: lib}); !errors.Is(err, ErrNoDriver) {
			t.Errorf("%v: got %v, want ErrNoDriver", retName(ret), err)
		}
	}
	// The real loader, with no library at this path.
	if _, err := New(Options{LibraryPath: filepath.Join(t.TempDir(), "libnvidia-ml.so.1")}); !errors.Is(err, ErrNoDriver) {
		t.Errorf("missing library: got %v, want ErrNoDriver", err)
	}
}

func TestOldDriverIsRefused(t *testing.T) {
	lib := fakeLib()
	lib.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
			if s == "nvmlDeviceGetComputeRunningProcesses_v3" {
				return errors.New("undefined symbol")
			}
			return nil
		}}
	}
	_, err := New(Options{NVML: lib})
	if err == nil || !strings.Contains(err.Error(), "nvmlDeviceGetComputeRunningProcesses_v3") {
		t.Fatalf("got %v", err)
	}
	if len(lib.ShutdownCalls()) != 1 {
		t.Error("NVML left initialised")
	}
}

// A GPU lost part-way through its read keeps only its health series, under
// the labels it had.
func TestLostMidPoll(t *testing.T) {
	d0, d1 := fakeDevice("GPU-a", 0), fakeDevice("GPU-b", 1)
	c, err := New(Options{NVML: fakeLib(d0, d1), HostName: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Poll(context.Background())
	d1.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	if err := c.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP slurmscope_gpu_healthy 1 when the GPU answered NVML this poll; 0 when it is lost (fallen off the bus) or failed. Labels of a lost GPU are its last known ones.
# TYPE slurmscope_gpu_healthy gauge
slurmscope_gpu_healthy{gpu_index="0",gpu_name="NVIDIA A100-SXM4-80GB",gpu_uuid="GPU-a",host_name="n1"} 1
slurmscope_gpu_healthy{gpu_index="1",gpu_name="NVIDIA A100-SXM4-80GB",gpu_uuid="GPU-b",host_name="n1"} 0
# HELP slurmscope_gpu_memory_used_bytes Device memory in use (of the GPU, or of the MIG instance).
# TYPE slurmscope_gpu_memory_used_bytes gauge
slurmscope_gpu_memory_used_bytes{gpu_index="0",gpu_name="NVIDIA A100-SXM4-80GB",gpu_uuid="GPU-a",host_name="n1"} 1.073741824e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "slurmscope_gpu_healthy", "slurmscope_gpu_memory_used_bytes"); err != nil {
		t.Error(err)
	}
}

// fakeGrants is what Slurm gave each job, by job id: device numbers.
type fakeGrants map[string][]DevNum

func (g fakeGrants) Grant(_ context.Context, j *attribution.Job, _ []DevNum) (map[DevNum]bool, string, bool, error) {
	devs, ok := g[j.ID]
	out := map[DevNum]bool{}
	for _, d := range devs {
		out[d] = true
	}
	return out, "fake", ok, nil
}

// nvidiaDevs numbers /dev/nvidia<N> 195:N, as the driver does, without
// device nodes (which a test cannot make).
var nvidiaDevs = Devices{Root: "/dev", Lookup: func(path string) (DevNum, error) {
	var n uint32
	if _, err := fmt.Sscanf(path, "/dev/nvidia%d", &n); err != nil {
		return DevNum{}, err
	}
	return DevNum{195, n}, nil
}}

// Slurm grants device files, /dev/nvidia<minor>: the minor number, which
// need not be the NVML index, names the GPU. The tasks' environment only
// narrows the grant; what it names outside it is counted and ignored, and
// a job whose grant nobody knows holds nothing. An allocated GPU with no
// process shows zero use.
func TestGrantsNameGPUsByMinorNumber(t *testing.T) {
	root := t.TempDir()
	envs := map[int]string{
		42: "SLURM_JOB_GPUS=0\x00CUDA_VISIBLE_DEVICES=GPU-b\x00", // narrows job 7 to GPU-b
		43: "CUDA_VISIBLE_DEVICES=GPU-b\x00",                     // job 8 holds GPU-a only
		44: "CUDA_VISIBLE_DEVICES=GPU-a\x00",                     // job 9: nobody knows
	}
	var jobs fakeJobs
	for pid, env := range envs {
		if err := os.MkdirAll(filepath.Join(root, strconv.Itoa(pid)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, strconv.Itoa(pid), "environ"), []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
		id := strconv.Itoa(pid - 35)
		jobs = append(jobs, attribution.Process{ID: procfs.ID{PID: pid, Start: 1}, Job: &attribution.Job{ID: id, Name: "j", User: "bob"}})
	}
	d0, d1 := fakeDevice("GPU-a", 1), fakeDevice("GPU-b", 0) // swapped minors
	grants := fakeGrants{"7": {{195, 0}, {195, 1}}, "8": {{195, 1}}}
	c, err := New(Options{NVML: fakeLib(d0, d1), HostName: "n1", Jobs: jobs, Proc: procfs.New(root), Grants: grants, Devices: nvidiaDevs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP slurmscope_job_gpu_allocated 1 for each GPU or MIG instance Slurm allocated to the job (its device cgroup, or slurmctld's record), which its tasks' environment may narrow but never widen.
# TYPE slurmscope_job_gpu_allocated gauge
slurmscope_job_gpu_allocated{gpu_index="0",gpu_name="NVIDIA A100-SXM4-80GB",gpu_uuid="GPU-a",host_name="n1",slurm_job_id="8",slurm_job_name="j",slurm_job_user="bob"} 1
slurmscope_job_gpu_allocated{gpu_index="1",gpu_name="NVIDIA A100-SXM4-80GB",gpu_uuid="GPU-b",host_name="n1",slurm_job_id="7",slurm_job_name="j",slurm_job_user="bob"} 1
# HELP slurmscope_job_gpu_utilization_ratio Sum of the SM utilisation of the job's processes on the GPU since the last poll (NVML process utilisation); 0 for an allocated idle GPU.
# TYPE slurmscope_job_gpu_utilization_ratio gauge
slurmscope_job_gpu_utilization_ratio{gpu_index="0",gpu_name="NVIDIA A100-SXM4-80GB",gpu_uuid="GPU-a",host_name="n1",slurm_job_id="8",slurm_job_name="j",slurm_job_user="bob"} 0
slurmscope_job_gpu_utilization_ratio{gpu_index="1",gpu_name="NVIDIA A100-SXM4-80GB",gpu_uuid="GPU-b",host_name="n1",slurm_job_id="7",slurm_job_name="j",slurm_job_user="bob"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "slurmscope_job_gpu_allocated", "slurmscope_job_gpu_utilization_ratio"); err != nil {
		t.Error(err)
	}
	for reason, n := range map[string]uint64{reasonOutsideGrant: 2, reasonNoGrant: 1} {
		if got := c.allocErrs[reason]; got != n {
			t.Errorf("%s counted %d times, want %d", reason, got, n)
		}
	}
	// Counted once per task and job, not per poll.
	if err := c.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.allocErrs[reasonOutsideGrant] != 2 || c.allocErrs[reasonNoGrant] != 1 {
		t.Errorf("counted again: %v", c.allocErrs)
	}

	// A job whose first slurmctld lookup is still out holds nothing and is
	// not counted; once the lookup has failed, it is.
	if err := os.MkdirAll(filepath.Join(root, "45"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "45", "environ"), []byte("CUDA_VISIBLE_DEVICES=GPU-a\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	pending := &attribution.Job{ID: "10", Name: "j", User: "bob", GRESPending: true}
	c.o.Jobs = append(jobs, attribution.Process{ID: procfs.ID{PID: 45, Start: 1}, Job: pending})
	if err := c.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.allocErrs[reasonNoGrant] != 1 {
		t.Errorf("a job whose grant is pending was counted: %v", c.allocErrs)
	}
	done := *pending
	done.GRESPending = false
	c.o.Jobs = append(jobs, attribution.Process{ID: procfs.ID{PID: 45, Start: 1}, Job: &done})
	if err := c.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.allocErrs[reasonNoGrant] != 2 {
		t.Errorf("once its lookup failed, grant_unknown = %d, want 2", c.allocErrs[reasonNoGrant])
	}
}

func TestParseGPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // ordinals and uuids, space-separated; "error" for an error
	}{
		{"", ""},
		{"NoDevFiles", ""},
		{"0,1,3", "0 1 3"},
		{" 2 , 5 ", "2 5"},
		{"0-3", "0 1 2 3"},
		{"GPU-0b3f8b4e-6a1d-4c5e-9f2a-1d2c3b4a5f60", "GPU-0b3f8b4e-6a1d-4c5e-9f2a-1d2c3b4a5f60"},
		{"MIG-4f0e1d2c-3b4a-5968-7a6b-5c4d3e2f1a0b,1", "MIG-4f0e1d2c-3b4a-5968-7a6b-5c4d3e2f1a0b 1"},
		{"MIG-GPU-0b3f8b4e-6a1d-4c5e-9f2a-1d2c3b4a5f60/2/0", "GPU-0b3f8b4e-6a1d-4c5e-9f2a-1d2c3b4a5f60/2"},
		{"0,,1", "error"},
		{"-1", "error"},
		{"3-1", "error"},
		{"0-99999", "error"},
		{"00", "error"},
		{"GPU-", "error"},
		{"GPU-zz;rm -rf /", "error"},
		{"MIG-GPU-abc/x/0", "error"},
		{"gpu0", "error"},
		{strings.Repeat("0,", 300) + "0", "error"},
		{"0\x00GPU-1", "error"},
	} {
		refs, err := parseGPUList(tc.in)
		var got []string
		if err != nil {
			got = []string{"error"}
		}
		for _, r := range refs {
			switch {
			case r.ordinal >= 0:
				got = append(got, strconv.Itoa(r.ordinal))
			case r.gi >= 0:
				got = append(got, r.uuid+"/"+strconv.Itoa(r.gi))
			default:
				got = append(got, r.uuid)
			}
		}
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("parseGPUList(%q) = %q (%v), want %q", tc.in, s, err, tc.want)
		}
	}
}

func FuzzParseGPUList(f *testing.F) {
	for _, s := range []string{"0,1", "0-3", "GPU-abc", "MIG-GPU-abc/1/0", "NoDevFiles", ",", "9-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		refs, err := parseGPUList(s)
		if err == nil && len(refs) > maxRefs {
			t.Fatalf("%d refs", len(refs))
		}
		for _, r := range refs {
			if r.ordinal > maxOrdinal || len(r.uuid) > maxRefLen {
				t.Fatalf("out of bounds: %+v", r)
			}
		}
	})
}

func TestMIGProfile(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H100 80GB HBM3 MIG 3g.40gb":    "3g.40gb",
		"NVIDIA A100-SXM4-40GB MIG 1g.5gb+me":  "1g.5gb+me",
		"NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb": "3g.20gb",
		"NVIDIA H100 80GB HBM3":                "unknown",
		"NVIDIA H100 MIG ":                     "unknown",
		"x MIG \xff\xfe":                       "\uFFFD",
	} {
		if got := migProfile(in); got != want {
			t.Errorf("migProfile(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadMIGMinors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mig-minors")
	table := "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu2/gi14/access 150\ngpu1/gi2/access 21junk\ngpu-1/gi2/access 9\n"
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readMIGMinors(path)
	want := map[migAccess]uint32{{0, 1}: 12, {2, 14}: 150}
	if err != nil || len(got) != len(want) || got[migAccess{0, 1}] != 12 || got[migAccess{2, 14}] != 150 {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
}
