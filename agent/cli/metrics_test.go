package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/cgroup/cgrouptest"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/elfcheck"
	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/agent/gpu/gputest"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/hostmetrics"
	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/jobinfo"
	"github.com/slurmscope/slurmscope/agent/nvtx"
	"github.com/slurmscope/slurmscope/agent/offcpu"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/procfs/procfstest"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
	"github.com/slurmscope/slurmscope/agent/remotewrite"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/agent/stackwalk"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/agent/users"
	"github.com/slurmscope/slurmscope/schema"
)

// family is what the agent serves of one metric: its help, its type when
// known, and each label set its series carry.
type family struct {
	help, typ string
	labels    map[string]bool // label names, sorted and joined by ","
}

// TestAgentExportsTheSchemasMetrics registers every collector run wires up
// (the GPU collector on the NVML stand-in, job info, the daemon's counters,
// the BPF counters and both shippers' collectors) and holds what they
// export to package schema: every metric they export is the schema's, with
// its help, type and labels, and every metric of the schema is exported.
func TestAgentExportsTheSchemasMetrics(t *testing.T) {
	got := map[string]*family{}
	add := func(name, help, typ string, labels []string) {
		f := got[name]
		if f == nil {
			f = &family{help: help, typ: typ, labels: map[string]bool{}}
			got[name] = f
		}
		if f.help != help || f.typ != typ && typ != "" && f.typ != "" {
			t.Errorf("%s is exported twice, with different help or types", name)
		}
		slices.Sort(labels)
		f.labels[strings.Join(labels, ",")] = true
	}

	// Collectors that describe their metrics up front: every family, even
	// a vector that has no series yet.
	var described []prometheus.Collector
	cpuSrc := cpu.NewSource(nil, 97, nil)
	gpuSrc := gputrace.NewSource(nil, procfs.FS{}, nil, nil)
	offSrc := offcpu.NewSource(nil, nil, nil, "", "")
	d := daemon.New(daemon.Config{}, []source.Source{cpuSrc, gpuSrc, offSrc}, nil, nil, nil)
	described = append(described, d.Collectors()...)
	described = append(described, cpuSrc.Collectors()...)
	described = append(described, gpuSrc.Collectors()...)
	described = append(described, offSrc.Collectors()...)
	described = append(described, offcpu.ProgramMetrics(func() (uint64, uint64, bool) { return 1, 1, true })...)
	described = append(described, cpu.ProgramMetrics(func() (uint64, uint64, bool) { return 1, 1, true })...)
	described = append(described, budget.NewCollector(budget.New(budget.Options{}), budget.NewWork(budget.WorkOptions{})))
	described = append(described, symbolize.New(symbolize.Options{}).Collector(), elfcheck.Collector())
	// The stack capture with neither tables nor interpreters loads
	// nothing, and describes the same metrics.
	walker, err := stackwalk.New(stackwalk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer walker.Close()
	described = append(described, walker.Collectors()...)
	// The NVTX capture's, as the stack capture registers them with it.
	described = append(described, nvtx.Collectors(nvtx.NewNames(nvtx.NamesOptions{}), nil)...)
	// Each interpreter's metrics, as the stack capture registers them.
	for _, in := range interpreters {
		inst, err := in.Open(interp.Env{})
		if err != nil {
			t.Fatal(err)
		}
		described = append(described, inst.Collectors()...)
	}
	describe := func(c prometheus.Collector) {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for desc := range ch {
			name, help, labels := parseDesc(t, desc)
			add(name, help, "", labels)
		}
	}
	for _, c := range described {
		describe(c)
	}

	// Collectors whose series depend on what they see: gathered.
	reg := prometheus.NewPedanticRegistry()
	res, fs := gpuNode(t)
	coll, err := gpu.New(gpu.Options{LibraryPath: gputest.Library(t), HostName: "node1", Jobs: res, Proc: fs,
		Grants: gputest.Grants{"62": {gputest.GPUDev(0)}}, Devices: gputest.Devices(t, t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	for range 2 { // GPM reports activity between two samples
		if err := coll.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	reg.MustRegister(coll, attribution.NewCollector(res), newHeartbeat("node1", time.Now))
	// A node without GPUs serves job info from the attribution cache
	// instead (never both: run registers one or the other).
	noGPU := prometheus.NewPedanticRegistry()
	noGPU.MustRegister(jobinfo.New(res, "node1"))
	sp := func(name string) *spool.Spool {
		s, err := spool.Open(filepath.Join(t.TempDir(), name), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	// The clock skew gauge is only gathered once Pyroscope answered:
	// describe the collector too.
	pc := pyroscope.NewCollector(pyroscope.NewShipper(sp("pyroscope"), nil))
	reg.MustRegister(pc)
	describe(pc)
	w, err := remotewrite.New(remotewrite.Config{Config: httpclient.Config{URL: "http://127.0.0.1:1/api/v1/write"}}, sp("rw"), reg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(remotewrite.NewCollector(w))
	// The cgroup collector over its fixture tree: a job with every
	// controller, one with none (unsupported) and one with bad files.
	hm := hostmetrics.New(hostmetrics.Options{Root: "../hostmetrics/testdata/v2", HostName: "node1", Jobs: cgroupJobs{},
		Log: slog.New(slog.DiscardHandler)})
	hm.Poll(context.Background())
	reg.MustRegister(hm)
	var fams []*dto.MetricFamily
	for _, g := range []prometheus.Gatherer{reg, noGPU} {
		fs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		fams = append(fams, fs...)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
			add(f.GetName(), f.GetHelp(), strings.ToLower(f.GetType().String()), labels)
		}
	}

	for name, f := range got {
		m, ok := schema.MetricByName(name)
		if !ok {
			t.Errorf("the agent exports %s, which is not a metric of the schema", name)
			continue
		}
		if f.help != m.Help || f.typ != "" && f.typ != m.Type.String() {
			t.Errorf("%s: help %q, type %s; the schema says %q, %s", name, f.help, f.typ, m.Help, m.Type)
		}
		want := map[string]bool{}
		for _, mig := range []bool{false, true} {
			l := m.LabelNames(mig)
			slices.Sort(l)
			want[strings.Join(l, ",")] = true
		}
		for ls := range f.labels {
			if !want[ls] {
				t.Errorf("%s: series with labels {%s}; the schema says %v", name, ls, want)
			}
		}
	}
	for _, m := range schema.Metrics {
		if got[m.Name] == nil {
			t.Errorf("%s is in the schema, but the agent does not export it", m.Name)
		}
	}
}

// cgroupJobs are three jobs of the host-metrics fixture tree.
type cgroupJobs struct{}

func (cgroupJobs) Refresh() ([]attribution.Process, error) { return nil, nil }
func (cgroupJobs) JobCgroups() []attribution.JobCgroup {
	var out []attribution.JobCgroup
	for _, id := range []string{"101", "102", "103"} {
		out = append(out, attribution.JobCgroup{Job: &attribution.Job{ID: id, Host: "node1"}, Version: 2,
			Dir: "/system.slice/slurmstepd.scope/job_" + id})
	}
	return out
}

// gpuNode is a node whose process 1001 (job 62) runs on GPU 0, which Slurm
// gave its job (and CUDA_VISIBLE_DEVICES names), with the stand-in's
// scenario: GPU 0 whole, with GPM and that process; GPU 1 in MIG mode;
// GPU 2 lost.
func gpuNode(t *testing.T) (*attribution.Resolver, procfs.FS) {
	t.Helper()
	root := procfstest.SyntheticNode(t, 16)
	env := filepath.Join(root, "1001", "environ")
	b, err := os.ReadFile(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(env, append(b, gpu.EnvVisibleGPUs+"=GPU-0\x00"...), 0o644); err != nil {
		t.Fatal(err)
	}
	gib := uint64(1) << 30
	scen := filepath.Join(t.TempDir(), "scenario.json")
	gputest.Write(t, scen, gputest.Scenario{Devices: []gputest.Device{
		{UUID: "GPU-0", Name: "NVIDIA H100 80GB HBM3", PCIBusID: "00000000:18:00.0",
			Utilization: &gputest.Utilization{GPU: 80, Memory: 30}, Memory: &gputest.Memory{Total: 80 * gib, Used: 20 * gib},
			PowerMW: gputest.Int(300000), TemperatureC: gputest.Int(50), SMClockMHz: gputest.Int(1980),
			GPM:       &gputest.GPM{SMActive: 50, SMOccupancy: 30, TensorActive: 10},
			Processes: []gputest.Process{{PID: 1001, UsedMemory: 20 * gib, SMUtil: gputest.Int(60), MemUtil: gputest.Int(20)}}},
		{UUID: "GPU-1", Name: "NVIDIA H100 80GB HBM3", Memory: &gputest.Memory{Total: 80 * gib},
			MIG: []gputest.MIG{{UUID: "MIG-1", Profile: "3g.40gb", GPUInstanceID: 2, Memory: &gputest.Memory{Total: 40 * gib}}}},
		{UUID: "GPU-2", Lost: true},
	}})
	t.Setenv(gputest.EnvScenario, scen)
	fs := procfs.New(root)
	res := attribution.New(attribution.Options{Proc: fs, Users: users.Passwd{1001: "alice"}, HostName: "node1", Cgroups: cgrouptest.Mirror(t, root)})
	if _, err := res.Scan(); err != nil {
		t.Fatal(err)
	}
	return res, fs
}

// descRE reads a descriptor as client_golang prints it; a Desc has no
// other way to tell its name, help and labels.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), (?:unit: "[^"]*", )?constLabels: \{(.*?)\}, variableLabels: \{(.*?)\}\}$`)

func parseDesc(t *testing.T, d *prometheus.Desc) (name, help string, labels []string) {
	t.Helper()
	m := descRE.FindStringSubmatch(d.String())
	if m == nil {
		t.Fatalf("cannot read %s", d)
	}
	name, _ = strconv.Unquote(m[1])
	help, _ = strconv.Unquote(m[2])
	for _, c := range regexp.MustCompile(`(\w+)=`).FindAllStringSubmatch(m[3], -1) {
		labels = append(labels, c[1])
	}
	if m[4] != "" {
		labels = append(labels, strings.Split(m[4], ",")...)
	}
	return name, help, labels
}
