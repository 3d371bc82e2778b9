// Package gputest builds the NVML stand-in library (agent/gpu/nvmlstub) and
// writes its scenario files, for tests and benchmarks of the GPU collector.
// The stand-in is a test double for the NVIDIA driver's libnvidia-ml.so.1;
// it is never shipped.
package gputest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
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
		skipOrFail(tb, buildErr)
	}
	path, err := build()
	if err != "" {
		buildErr = err
		skipOrFail(tb, err)
	}
	built = path
	return path
}

func skipOrFail(tb testing.TB, msg string) {
	tb.Helper()
	if os.Getenv("SLURMSCOPE_INTEGRATION") == "1" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
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
