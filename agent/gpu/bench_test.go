package gpu_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/cgroup/cgrouptest"
	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/agent/gpu/gputest"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/users"
)

// BenchmarkPoll is one poll of a full node through the stand-in library:
// 8 H100s, each split into 7 1g.10gb MIG instances, 50 processes per GPU,
// each MIG instance allocated to its own job. It measures the collector
// plus the stand-in (which stats its scenario file on every call).
func BenchmarkPoll(b *testing.B) {
	lib := gputest.Library(b)
	root := b.TempDir()
	var sc gputest.Scenario
	grants := gputest.Grants{}
	var mig []gputest.MIGAccess
	pid := 10000
	for g := range 8 {
		d := gputest.Device{
			UUID: fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", g, g), Name: "NVIDIA H100 80GB HBM3",
			Memory:  &gputest.Memory{Total: 80 << 30, Used: 40 << 30},
			PowerMW: gputest.Int(300000), TemperatureC: gputest.Int(50), SMClockMHz: gputest.Int(1980),
			GPM: &gputest.GPM{SMActive: 50, SMOccupancy: 25, TensorActive: 10},
			MIG: []gputest.MIG{},
		}
		for k := range 7 {
			d.MIG = append(d.MIG, gputest.MIG{UUID: fmt.Sprintf("MIG-%08x-%04x-5000-8000-000000000000", g, k), Profile: "1g.10gb",
				GPUInstanceID: 7 + k, Memory: &gputest.Memory{Total: 10 << 30, Used: 1 << 30},
				GPM: &gputest.GPM{SMActive: 40, SMOccupancy: 20, TensorActive: 5}})
			minor := 100 + g*10 + k
			mig = append(mig, gputest.MIGAccess{GPU: g, GI: 7 + k, Minor: minor})
			grants[fmt.Sprint(1000+g*7+k)] = []gpu.DevNum{gputest.GPUDev(g), gputest.MIGDev(minor)}
		}
		for p := range 50 {
			k := p % 7
			job := 1000 + g*7 + k
			proc(b, root, pid, job, map[string]string{gpu.EnvVisibleGPUs: d.MIG[k].UUID})
			d.Processes = append(d.Processes, gputest.Process{PID: pid, UsedMemory: 100 << 20,
				GPUInstanceID: gputest.Int(7 + k), ComputeInstanceID: gputest.Int(0)})
			pid++
		}
		sc.Devices = append(sc.Devices, d)
	}
	scen := filepath.Join(b.TempDir(), "scenario.json")
	gputest.Write(b, scen, sc)
	b.Setenv(gputest.EnvScenario, scen)
	fs := procfs.New(root)
	res := attribution.New(attribution.Options{Proc: fs, Users: users.Passwd{1001: "alice"}, HostName: "node1", Cgroups: cgrouptest.Mirror(b, root)})
	c, err := gpu.New(gpu.Options{LibraryPath: lib, HostName: "node1", Jobs: res, Proc: fs,
		Grants: grants, Devices: gputest.Devices(b, b.TempDir(), mig...)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Poll(ctx); err != nil { // warm the caches, as a running agent has
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := c.Poll(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
