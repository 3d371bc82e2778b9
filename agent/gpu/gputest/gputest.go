// Package gputest builds the NVML stand-in library (agent/gpu/nvmlstub) and
// writes its scenario files, for tests and benchmarks of the GPU collector.
// The stand-in is a test double for the NVIDIA driver's libnvidia-ml.so.1;
// it is never shipped.
package gputest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// Scenario is the stand-in's input; see nvmlstub/README.md.
type Scenario struct {
	DriverVersion string   `json:"driver_version,omitempty"`
	Devices       []Device `json:"devices"`
}

// Device is one physical GPU. Nil pointers are left out, which makes the
// stand-in answer NOT_SUPPORTED for that value.
type Device struct {
	UUID         string       `json:"uuid"`
	Name         string       `json:"name,omitempty"`
	PCIBusID     string       `json:"pci_bus_id,omitempty"`
	Minor        *int         `json:"minor,omitempty"`
	Lost         bool         `json:"lost,omitempty"`
	Utilization  *Utilization `json:"utilization,omitempty"`
	Memory       *Memory      `json:"memory,omitempty"`
	PowerMW      *int         `json:"power_mw,omitempty"`
	TemperatureC *int         `json:"temperature_c,omitempty"`
	SMClockMHz   *int         `json:"sm_clock_mhz,omitempty"`
	GPM          *GPM         `json:"gpm,omitempty"`
	// A non-empty MIG turns MIG mode on. (A scenario file turns it on with no
	// instances by an empty array, which this type cannot write.)
	MIG       []MIG     `json:"mig,omitempty"`
	Processes []Process `json:"processes,omitempty"`
}

type Utilization struct {
	GPU    int `json:"gpu"`
	Memory int `json:"memory"`
}

type Memory struct {
	Total uint64 `json:"total"`
	Used  uint64 `json:"used"`
}

// GPM values are percentages, as NVML reports them.
type GPM struct {
	SMActive     float64 `json:"sm_active"`
	SMOccupancy  float64 `json:"sm_occupancy"`
	TensorActive float64 `json:"tensor_active"`
}

type MIG struct {
	UUID              string  `json:"uuid"`
	Profile           string  `json:"profile"`
	GPUInstanceID     int     `json:"gpu_instance_id"`
	ComputeInstanceID int     `json:"compute_instance_id"`
	Memory            *Memory `json:"memory,omitempty"`
	GPM               *GPM    `json:"gpm,omitempty"`
}

type Process struct {
	PID               int    `json:"pid"`
	UsedMemory        uint64 `json:"used_memory"`
	GPUInstanceID     *int   `json:"gpu_instance_id,omitempty"`
	ComputeInstanceID *int   `json:"compute_instance_id,omitempty"`
	SMUtil            *int   `json:"sm_util,omitempty"`
	MemUtil           *int   `json:"mem_util,omitempty"`
}

// Int returns a pointer to v, for the optional fields.
func Int(v int) *int { return &v }

// EnvScenario is the variable that names the stand-in's scenario file.
const EnvScenario = "FAKE_NVML_SCENARIO"

// Write writes s to path atomically (a new file renamed over the old), so
// the stand-in never reads half a scenario and always notices the change.
func Write(tb testing.TB, path string, s Scenario) {
	tb.Helper()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	WriteRaw(tb, path, b)
}

// WriteRaw writes any bytes as the scenario, for tests of bad input.
func WriteRaw(tb testing.TB, path string, b []byte) {
	tb.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

var (
	buildMu  sync.Mutex
	built    string
	buildErr string
)

// Library builds the stand-in libnvidia-ml.so.1 (once per process) and
// returns its path. The result is cached under the user cache directory,
// keyed by the source and header, so tests after the first do not compile.
// One process must use one copy: code bound to the first copy loaded stays
// bound to it. Without a C compiler the test is skipped, or fails under
// SLURMSCOPE_INTEGRATION=1.
func Library(tb testing.TB) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if built != "" {
		return built
	}
	if buildErr != "" {
		testenv.Unmet(tb, buildErr)
	}
	path, err := build()
	if err != "" {
		buildErr = err
		testenv.Unmet(tb, err)
	}
	built = path
	return path
}

func build() (string, string) {
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "..", "nvmlstub", "nvmlstub.c")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", "no C compiler to build the NVML stand-in: " + err.Error()
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvml").Output()
	if err != nil {
		return "", "locating go-nvml's nvml.h: " + err.Error()
	}
	inc := filepath.Join(strings.TrimSpace(string(out)), "pkg", "nvml")
	h := sha256.New()
	for _, f := range []string{src, filepath.Join(inc, "nvml.h")} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err.Error()
		}
		h.Write(b)
	}
	h.Write([]byte(cc))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "slurmscope", "nvmlstub", hex.EncodeToString(h.Sum(nil))[:16])
	lib := filepath.Join(dir, "libnvidia-ml.so.1")
	if _, err := os.Stat(lib); err == nil {
		return lib, ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err.Error()
	}
	tmp, err := os.CreateTemp(dir, "build-*.so")
	if err != nil {
		return "", err.Error()
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command(cc, "-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-shared", "-fPIC",
		"-fvisibility=hidden", "-I", inc, "-o", tmp.Name(), src, "-lpthread", "-lm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", "building the NVML stand-in: " + err.Error() + "\n" + string(b)
	}
	if err := os.Rename(tmp.Name(), lib); err != nil {
		return "", err.Error()
	}
	return lib, ""
}

// Grants is a stand-in for what Slurm gave each job (the agent reads the
// real grant from the job's device cgroup or slurmctld: gpu.SlurmGrants):
// the device numbers of its GPUs and MIG instances, by job id. A job
// absent from the map has no known grant.
type Grants map[string][]gpu.DevNum

var _ gpu.Grants = Grants(nil)

// Grant implements gpu.Grants.
func (g Grants) Grant(_ context.Context, j *attribution.Job, _ []gpu.DevNum) (map[gpu.DevNum]bool, string, bool, error) {
	devs, ok := g[j.ID]
	if !ok {
		return nil, "", false, nil
	}
	out := map[gpu.DevNum]bool{}
	for _, d := range devs {
		out[d] = true
	}
	return out, "stand-in", true, nil
}

// The NVIDIA driver numbers /dev/nvidia<N> 195:N; the MIG capability files
// get a major of their own, which the stand-in fixes at capsMajor.
const (
	gpuMajor  = 195
	capsMajor = 237
)

// GPUDev is the device number of /dev/nvidia<minor>.
func GPUDev(minor int) gpu.DevNum { return gpu.DevNum{Major: gpuMajor, Minor: uint32(minor)} } // #nosec G115 -- tests pass small literal minors

// MIGDev is the device number of /dev/nvidia-caps/nvidia-cap<capMinor>.
func MIGDev(capMinor int) gpu.DevNum { return gpu.DevNum{Major: capsMajor, Minor: uint32(capMinor)} } // #nosec G115 -- tests pass small literal minors

// MIGAccess is one line of the driver's mig-minors table: the access
// capability minor of GPU instance GI of the GPU with minor GPU.
type MIGAccess struct{ GPU, GI, Minor int }

// Devices returns device files for a node without a driver: the
// mig-minors table written to dir, and a Lookup that numbers the paths
// under /dev as GPUDev and MIGDev do (tests cannot make device nodes).
func Devices(t testing.TB, dir string, mig ...MIGAccess) gpu.Devices {
	t.Helper()
	var b strings.Builder
	for _, m := range mig {
		fmt.Fprintf(&b, "gpu%d/gi%d/access %d\ngpu%d/gi%d/ci0/access %d\n", m.GPU, m.GI, m.Minor, m.GPU, m.GI, m.Minor+1)
	}
	b.WriteString("config 1\nmonitor 2\n")
	table := filepath.Join(dir, "mig-minors")
	if err := os.WriteFile(table, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return gpu.Devices{Root: "/dev", MIGMinors: table, Lookup: Lookup}
}

// Lookup numbers the stand-in device files: /dev/nvidia<N> as GPUDev(N),
// /dev/nvidia-caps/nvidia-cap<M> as MIGDev(M).
func Lookup(path string) (gpu.DevNum, error) {
	var n int
	if _, err := fmt.Sscanf(path, "/dev/nvidia-caps/nvidia-cap%d", &n); err == nil {
		return MIGDev(n), nil
	}
	if _, err := fmt.Sscanf(path, "/dev/nvidia%d", &n); err == nil {
		return GPUDev(n), nil
	}
	return gpu.DevNum{}, fmt.Errorf("no stand-in device %s", path)
}
