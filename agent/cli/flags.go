package cli

import (
	"flag"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/service"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/internal/units"
)

// runFlags are run's flags: its own, and those of every kind it runs.
type runFlags struct {
	attr attrFlags
	stackFlags
	sysRoot        string
	kinds          []source.Kind // the profile sources, each with its flags
	gpuKernels     *gputrace.Kind
	sinks          []service.Kind // where profiles go
	services       []service.Kind // what runs beside the profiler
	interval       time.Duration
	allProcesses   bool
	rankLabels     bool
	logLevel       string
	rescanInterval time.Duration
	budget         budget.Options
	work           budget.WorkOptions
	// ready is what /-/ready answers: set once the profile sources are
	// loaded and the first interval is delivered (firstInterval), or once
	// the services run where no profile source is on.
	ready *atomic.Bool
}

// flagged is what every kind has: flags and their check.
type flagged interface {
	Flags(fs *flag.FlagSet)
	Check() error
}

func (f *runFlags) register(fs *flag.FlagSet) {
	f.attr.register(fs)
	fs.StringVar(&f.sysRoot, "sys-root", "/sys", "root of the sysfs filesystem (online CPUs)")
	// GPUs are named by the index CUDA_VISIBLE_DEVICES gives, or through
	// NVML when the collector runs.
	gpuMetrics := &gpuMetrics{attr: &f.attr}
	f.gpuKernels = &gputrace.Kind{EnvKeys: gpu.EnvKeys, Devices: gpuMetrics.cudaDevice}
	f.kinds = profileKinds(f.gpuKernels)
	f.sinks = sinkKinds()
	f.ready = new(atomic.Bool)
	f.services = serviceKinds(&f.attr, gpuMetrics, f.ready.Load)
	for _, k := range f.all() {
		k.Flags(fs)
	}
	fs.Var(units.NewDuration(&f.interval, 15*time.Second), "upload-interval", "how often profiles are built and sent")
	fs.Var(units.NewDuration(&f.rescanInterval, time.Second), "rescan-interval", "how often new processes are attributed (short-lived processes need it shorter)")
	fs.BoolVar(&f.allProcesses, "all-processes", false, "also profile processes that are in no job (labelled by executable)")
	fs.BoolVar(&f.rankLabels, "rank-labels", true,
		"label profile samples with each job process's global rank, local task id and node index (read once from its environment and cgroup); they split each job's profile series by rank, never metric series")
	f.stackFlags.register(fs)
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Var(units.NewBytes(&f.budget.Total, 0), "memory-budget-bytes",
		"bytes the agent may hold for all jobs together (symbol tables, perf maps, mapping tables, GPU aggregation); 0: 384 MiB; at most 3/8 of the agent's cgroup memory limit (the unit's MemoryMax)")
	fs.Var(units.NewBytes(&f.budget.JobShare, 0), "memory-budget-job-bytes",
		"the most one job may make the agent hold; past it the job's own least recently used entries are evicted; 0: 128 MiB, or a third of the budget")
	fs.Var(units.NewBytes(&f.work.Burst, budget.DefaultWorkBurst), "job-read-burst-bytes",
		"bytes of a job's files (symbol tables, perf maps, mapping tables) the agent reads at once before --job-read-bytes-per-second applies")
	fs.Var(units.NewBytes(&f.work.Rate, budget.DefaultWorkRate), "job-read-bytes-per-second",
		"bytes of a job's files the agent reads a second past the burst; reads past it wait, counted")
}

// all are the kinds run runs: profile sources, sinks and services.
func (f *runFlags) all() []flagged {
	var out []flagged
	for _, k := range f.kinds {
		out = append(out, k)
	}
	for _, k := range f.sinks {
		out = append(out, k)
	}
	for _, k := range f.services {
		out = append(out, k)
	}
	return out
}

// check validates the parsed flags before anything starts.
func (f *runFlags) check() error {
	for _, k := range f.all() {
		if err := k.Check(); err != nil {
			return err
		}
	}
	if err := f.stackFlags.check(); err != nil {
		return err
	}
	if f.interval < time.Second {
		return fmt.Errorf("--upload-interval %v is shorter than 1s", f.interval)
	}
	if f.rescanInterval <= 0 {
		return fmt.Errorf("--rescan-interval %v: must be positive", f.rescanInterval)
	}
	for _, b := range []struct {
		name   string
		v      int64
		zeroOK bool // 0 is documented: the default
	}{
		{"memory-budget-bytes", f.budget.Total, true},
		{"memory-budget-job-bytes", f.budget.JobShare, true},
		{"job-read-burst-bytes", f.work.Burst, false},
		{"job-read-bytes-per-second", f.work.Rate, false},
	} {
		switch {
		case b.v < 0 && b.zeroOK:
			return fmt.Errorf("--%s %d: must not be negative (0: the default)", b.name, b.v)
		case b.v <= 0 && !b.zeroOK:
			return fmt.Errorf("--%s %d: must be positive", b.name, b.v)
		}
	}
	return nil
}
