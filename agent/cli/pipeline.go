package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/elfcheck"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/offcpu"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
	"github.com/slurmscope/slurmscope/agent/service"
	"github.com/slurmscope/slurmscope/agent/sink"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// profileKinds are the profile types the agent runs, each its own package
// behind agent/source; a new one is one more line here.
func profileKinds(gpuKernels *gputrace.Kind) []source.Kind {
	return []source.Kind{
		&cpu.Kind{},
		gpuKernels,
		&offcpu.Kind{},
	}
}

// sinkKinds are the delivery backends of profiles, each its own package
// behind agent/service whose services implement daemon.Sink; a new one is
// one more line here. Where none is set, the output directory's fallback
// takes the profiles.
func sinkKinds() []service.Kind {
	return []service.Kind{
		&pyroscope.Kind{},
		&sink.Kind{},
	}
}

// daemonConfig is the daemon's part of run's flags.
func (f *runFlags) daemonConfig(log *slog.Logger, now func() time.Time) daemon.Config {
	return daemon.Config{Interval: f.interval, RescanInterval: f.rescanInterval, AllProcesses: f.allProcesses,
		RankLabels: f.rankLabels, Log: log, Now: now}
}

// profiler is the profiling pipeline: the sources, symbolizer, daemon and
// its sinks.
type profiler struct {
	d       *daemon.Daemon
	sinks   *service.Group
	closers []func() error
	info    []any
}

// newProfiler starts every profile source the flags turn on, and the
// pipeline behind them; nil when no source is on.
func newProfiler(f runFlags, senv service.Env) (*profiler, error) {
	res, reg, log := senv.Jobs, senv.Reg, senv.Log
	p := &profiler{}
	proc := senv.Proc
	bud, work := memoryBudget(f, proc, log)
	reg.MustRegister(budget.NewCollector(bud, work))
	owner, job := owners(res)
	// The stack capture asks on its readers and under its interpreters'
	// locks: from the cache only, never reading /proc.
	cachedOwner := func(id procfs.ID) string {
		p, ok := res.Cached(id)
		switch {
		case !ok || p.ID != id:
			return budget.Unknown
		case p.InJob():
			return budget.JobOwner(p.Job.ID)
		}
		return budget.UserOwner(p.UID)
	}
	var d atomic.Pointer[daemon.Daemon]
	// Said once, at start: the profiles would only show "[kernel]".
	if hidden, err := symbolize.KallsymsHidden(proc); err != nil {
		log.Warn("kernel symbols are unreadable: kernel frames will be [kernel]", "err", err)
	} else if hidden {
		log.Warn("kernel symbols are hidden: /proc/kallsyms reads as zeros (kptr_restrict or perf_event_paranoid, without CAP_SYSLOG); kernel frames will be [kernel]")
	}
	sym := symbolize.New(symbolize.Options{Proc: proc, Budget: bud, Work: work, Owner: owner})
	reg.MustRegister(sym.Collector(), elfcheck.Collector())
	stacks, err := newStacks(f, proc, sym, res, &d, bud, work, cachedOwner, log)
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, stacks.Close)
	env := source.Env{Proc: proc, SysRoot: f.sysRoot, ExcludePID: os.Getpid(), Interval: f.interval,
		Budget: bud, Owner: owner, Job: job, Reg: reg, Log: log, CgroupRoot: f.attr.cgroupRoot,
		TaskCgroup: func(id procfs.ID) (int, string, string, bool) {
			task, job, ok := res.TaskCgroupOf(id)
			return job.Version, task, job.Dir, ok
		}}
	stacks.forSources(&env)
	var sources []source.Source
	var names []string
	for _, k := range f.kinds {
		s, err := k.Open(env)
		if err != nil {
			p.close()
			return nil, err
		}
		if s == nil {
			continue
		}
		if c, ok := s.(io.Closer); ok {
			p.closers = append(p.closers, c.Close)
		}
		sources = append(sources, s)
		names = append(names, s.Info().Name)
	}
	if len(sources) == 0 {
		p.close()
		return nil, nil
	}
	stacks.started(reg, log)
	// What loading the programs took (their specs, the kernel's types:
	// tens of MiB) goes back to the system now, not when the scavenger
	// gets to it.
	debug.FreeOSMemory()
	sinks, sinkNames, err := p.openSinks(f, senv)
	if err != nil {
		p.close()
		return nil, err
	}
	// The sources are loaded: the agent is ready once the daemon has
	// delivered its first interval.
	first := &firstInterval{ready: f.ready, clock: time.Now}
	cfg := f.daemonConfig(log, first.now)
	stacks.forDaemon(&cfg)
	p.d = daemon.New(cfg, sources, sym, res, first.sink(sinks))
	d.Store(p.d)
	reg.MustRegister(p.d.Collectors()...)
	p.info = []any{"node", res.HostName(), "sources", names, "interval", f.interval, "sinks", sinkNames}
	return p, nil
}

// openSinks opens the delivery backends the flags set, or the fallback.
func (p *profiler) openSinks(f runFlags, env service.Env) (sink.Multi, []string, error) {
	g, err := service.Open(f.sinks, env)
	if err != nil {
		return nil, nil, err
	}
	p.sinks = g
	var sinks sink.Multi
	var names []string
	for _, s := range g.Services() {
		ds, ok := s.(daemon.Sink)
		if !ok {
			return nil, nil, fmt.Errorf("%T is listed as a sink but takes no profiles", s)
		}
		sinks = append(sinks, ds)
		names = append(names, fmt.Sprint(s))
	}
	return sinks, names, nil
}

// memoryBudget makes the agent's memory budget and job read allowance.
// Under a cgroup memory limit (the unit's MemoryMax) the budget is fitted
// to it, and, unless GOMEMLIMIT is set, so is the Go runtime's soft limit,
// so that the collector works harder before the OOM killer acts.
func memoryBudget(f runFlags, proc procfs.FS, log *slog.Logger) (*budget.Budget, *budget.Work) {
	o := f.budget
	if cg, err := proc.Cgroup(os.Getpid()); err == nil {
		if limit, ok := budget.CgroupMemoryLimit(cg, filepath.Join(f.sysRoot, "fs", "cgroup")); ok {
			var goLimit int64
			o, goLimit = budget.ForLimit(o, limit)
			if os.Getenv("GOMEMLIMIT") == "" {
				debug.SetMemoryLimit(goLimit)
			}
			log.Info("memory limit", "cgroup_bytes", limit, "go_soft_limit_bytes", debug.SetMemoryLimit(-1))
		}
	}
	b := budget.New(o)
	st := b.Stats()
	log.Info("memory budget", "bytes", st.Total, "job_bytes", b.Share(budget.JobOwner("")))
	return b, budget.NewWork(f.work)
}

// owners names a process's owner in the memory budget (its job, or its
// user outside jobs) and its job, from the attribution cache: the daemon
// attributed it when it found it.
func owners(res *attribution.Resolver) (owner, job func(procfs.ID) string) {
	lookup := func(id procfs.ID) (attribution.Process, bool) {
		if p, ok := res.Cached(id); ok {
			return p, true
		}
		p, err := res.Resolve(id.PID)
		return p, err == nil && p.ID == id
	}
	owner = func(id procfs.ID) string {
		p, ok := lookup(id)
		switch {
		case !ok:
			return budget.Unknown
		case p.InJob():
			return budget.JobOwner(p.Job.ID)
		}
		return budget.UserOwner(p.UID)
	}
	job = func(id procfs.ID) string {
		if p, ok := res.Cached(id); ok && p.InJob() {
			return p.Job.ID
		}
		return ""
	}
	return owner, job
}

// run profiles until ctx is done. The sinks stop after the daemon's last
// interval is in them: each backend gets its bounded final flush, and what
// is left stays spooled for the next start.
func (p *profiler) run(ctx context.Context, log *slog.Logger) error {
	p.sinks.Start()
	log.Info("profiling", p.info...)
	err := p.d.Run(ctx)
	if serr := p.sinks.Stop(); serr != nil && err == nil {
		err = serr
	}
	log.Info("stopped")
	return err
}

func (p *profiler) close() {
	if p.sinks != nil {
		p.sinks.Stop()
	}
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}
