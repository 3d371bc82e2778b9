package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/hostmetrics"
	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/jobinfo"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
	"github.com/slurmscope/slurmscope/agent/remotewrite"
	"github.com/slurmscope/slurmscope/agent/sink"
	"github.com/slurmscope/slurmscope/agent/slurm"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/agent/stackwalk"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/agent/unwind"
	"github.com/slurmscope/slurmscope/schema"
)

func init() {
	extraCommands["run"] = runCmd
	summaries["run"] = "profile this node: CPU stacks (eBPF), GPU metrics (NVML), GPU kernels, jobs' cgroups; push or write per-job profiles"
}

type runFlags struct {
	attr           attrFlags
	sysRoot        string
	kinds          []source.Kind // the profile sources, each with its flags
	gpuKernels     *gputrace.Kind
	interval       time.Duration
	allProcesses   bool
	outputDir      string
	metricsAddr    string
	spoolDir       string
	spoolMax       int64
	pyro           pyroscope.Config
	pyroWindow     pyroscope.Window
	logLevel       string
	rescanInterval time.Duration
	webConfig      string
	gpuMetrics     bool
	gpuInterval    time.Duration
	nvmlLibrary    string
	hostMetrics    bool
	hostInterval   time.Duration
	devRoot        string
	migMinors      string
	rw             remotewrite.Config
	rwSpoolDir     string
	rwSpoolMax     int64
	budget         budget.Options
	work           budget.WorkOptions
	unwind         string
	interps        interpFlags
	labelSetup     bool
	unwindBudget   int64
}

// profileKinds are the profile types the agent runs, each its own package
// behind agent/source; a new one (off-CPU time, say) is one more line here.
func profileKinds(gpuKernels *gputrace.Kind) []source.Kind {
	return []source.Kind{
		&cpu.Kind{},
		gpuKernels,
	}
}

func (f *runFlags) register(fs *flag.FlagSet) {
	f.attr.register(fs)
	fs.StringVar(&f.sysRoot, "sys-root", "/sys", "root of the sysfs filesystem (online CPUs)")
	// GPUs are named by the index CUDA_VISIBLE_DEVICES gives, or through
	// NVML when the collector runs (newProfiler).
	f.gpuKernels = &gputrace.Kind{EnvKeys: gpu.EnvKeys, Devices: gpu.VisibleIndex}
	f.kinds = profileKinds(f.gpuKernels)
	for _, k := range f.kinds {
		k.Flags(fs)
	}
	fs.DurationVar(&f.interval, "upload-interval", 15*time.Second, "how often profiles are built and sent")
	fs.DurationVar(&f.rescanInterval, "rescan-interval", time.Second, "how often new processes are attributed (short-lived processes need it shorter)")
	fs.BoolVar(&f.allProcesses, "all-processes", false, "also profile processes that are in no job (labelled by executable)")
	fs.StringVar(&f.unwind, "unwind", "auto", "user stacks: auto (from the .eh_frame unwind tables of each mapped file, frame pointers where a file has none; x86-64) or fp (frame pointers only)")
	f.interps = interpFlags{}
	f.interps.register(fs)
	fs.BoolVar(&f.labelSetup, "label-stack-setup", false, "label each sample with what of the stack capture was set up for its process (stack_setup): a diagnostic for checking unwinding, which splits series")
	fs.Int64Var(&f.unwindBudget, "unwind-table-bytes", unwind.DefaultMaxTableBytes, "bound of the unwind tables in kernel memory; the least recently used are evicted past it (their frames fall back to frame pointers)")
	fs.StringVar(&f.outputDir, "output-dir", "", "write profiles as DIR/<job id>/<type>-<unix>.pb.gz (default /var/lib/slurmscope/profiles when no --pyroscope-url)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", DefaultMetricsAddr,
		"address for /metrics; empty disables it. It names every user's jobs: serve it beyond this host (e.g. :9810) only behind --web.config.file's TLS and basic auth")
	fs.StringVar(&f.spoolDir, "spool-dir", "/var/lib/slurmscope/spool", "on-disk queue of pushes waiting for Pyroscope")
	fs.Int64Var(&f.spoolMax, "spool-max-bytes", 256<<20, "bound of the spool; the oldest pushes are dropped (and counted) past it")
	httpclient.RegisterFlags(fs, "pyroscope", &f.pyro.Config, "Pyroscope", "Pyroscope base URL to push to (push.v1.PusherService/Push)")
	fs.DurationVar(&f.pyroWindow.OlderThan, "pyroscope-reject-older-than", pyroscope.DefaultWindow.OlderThan,
		"the server's -validation.reject-older-than: spooled profiles older than this are dropped before sending (counted as too_old); 0: no bound")
	fs.DurationVar(&f.pyroWindow.NewerThan, "pyroscope-reject-newer-than", pyroscope.DefaultWindow.NewerThan,
		"the server's -validation.reject-newer-than: profiles it refuses as ahead of its clock by more than this are held until it takes them; 0: no bound")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.webConfig, "web.config.file", "", "exporter-toolkit web config (TLS, basic auth) for --metrics-addr")
	fs.BoolVar(&f.gpuMetrics, "gpu-metrics", true, "read GPU metrics through NVML (skipped with one log line where there is no driver)")
	fs.DurationVar(&f.gpuInterval, "gpu-interval", 10*time.Second, "how often GPUs are polled")
	fs.StringVar(&f.nvmlLibrary, "nvml-library", "", "path of libnvidia-ml.so.1 (default: the dynamic linker's search)")
	fs.BoolVar(&f.hostMetrics, "host-metrics", true, "read each job's CPU time, CPUs, memory, OOM kills and I/O from the cgroups Slurm made for it")
	fs.DurationVar(&f.hostInterval, "host-metrics-interval", hostmetrics.DefaultInterval, "how often the jobs' cgroups are read")
	fs.StringVar(&f.devRoot, "dev-root", "/dev", "directory of the GPU device files (nvidia<N>, nvidia-caps/), which name the GPUs in Slurm's grants")
	fs.StringVar(&f.migMinors, "nvidia-mig-minors", "/proc/driver/nvidia-caps/mig-minors", "the NVIDIA driver's table of MIG capability minors")
	httpclient.RegisterFlags(fs, "prometheus-remote-write", &f.rw.Config, "the remote-write endpoint",
		"also push the agent's metrics with Prometheus remote-write 1.0 to this URL (e.g. http://prometheus:9090/api/v1/write)")
	fs.DurationVar(&f.rw.Interval, "prometheus-remote-write-interval", 15*time.Second, "how often metrics are remote-written")
	fs.StringVar(&f.rwSpoolDir, "remote-write-spool-dir", "/var/lib/slurmscope/remote-write", "on-disk queue of metric batches waiting for the remote-write endpoint")
	fs.Int64Var(&f.rwSpoolMax, "remote-write-spool-max-bytes", 64<<20, "bound of the remote-write spool; the oldest batches are dropped (and counted) past it")
	fs.Int64Var(&f.budget.Total, "memory-budget-bytes", 0,
		"bytes the agent may hold for all jobs together (symbol tables, perf maps, mapping tables, GPU aggregation); 0: 384 MiB; at most 3/8 of the agent's cgroup memory limit (the unit's MemoryMax)")
	fs.Int64Var(&f.budget.JobShare, "memory-budget-job-bytes", 0,
		"the most one job may make the agent hold; past it the job's own least recently used entries are evicted; 0: 128 MiB, or a third of the budget")
	fs.Int64Var(&f.work.Burst, "job-read-burst-bytes", budget.DefaultWorkBurst,
		"bytes of a job's files (symbol tables, perf maps, mapping tables) the agent reads at once before --job-read-bytes-per-second applies")
	fs.Int64Var(&f.work.Rate, "job-read-bytes-per-second", budget.DefaultWorkRate,
		"bytes of a job's files the agent reads a second past the burst; reads past it wait, counted")
}

func runCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f runFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "run: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	for _, k := range f.kinds {
		if err := k.Check(); err != nil {
			fmt.Fprintf(stderr, "run: %v\n", err)
			return 2
		}
	}
	if f.unwind != "auto" && f.unwind != "fp" {
		fmt.Fprintf(stderr, "run: --unwind %q: want auto or fp\n", f.unwind)
		return 2
	}
	if f.unwindBudget <= 0 {
		fmt.Fprintln(stderr, "run: --unwind-table-bytes must be positive")
		return 2
	}
	if f.interval < time.Second {
		fmt.Fprintf(stderr, "run: --upload-interval %v is shorter than 1s\n", f.interval)
		return 2
	}
	if f.budget.Total < 0 || f.budget.JobShare < 0 || f.work.Burst <= 0 || f.work.Rate <= 0 {
		fmt.Fprintln(stderr, "run: --memory-budget-bytes and --memory-budget-job-bytes must not be negative, --job-read-burst-bytes and --job-read-bytes-per-second must be positive")
		return 2
	}
	if f.hostInterval < 100*time.Millisecond {
		fmt.Fprintf(stderr, "run: --host-metrics-interval %v is shorter than 100ms\n", f.hostInterval)
		return 2
	}
	if f.pyroWindow.OlderThan < 0 || f.pyroWindow.NewerThan < 0 {
		fmt.Fprintln(stderr, "run: --pyroscope-reject-older-than and --pyroscope-reject-newer-than must not be negative")
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "run: --log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f, log); err != nil {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, f runFlags, log *slog.Logger) error {
	f.attr.exitGrace = 2*f.interval + time.Minute
	res, err := f.attr.resolver()
	if err != nil {
		return err
	}
	if f.webConfig != "" {
		if err := web.Validate(f.webConfig); err != nil {
			return fmt.Errorf("--web.config.file: %w", err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		attribution.NewCollector(res))

	// Cleanups run in reverse: the profiler's last interval is written
	// before metrics stop being served and pushed.
	var coll *gpu.Collector
	if f.gpuMetrics {
		var stop func()
		stop, coll = startGPU(ctx, f, res, reg, log)
		defer stop()
	}
	if coll == nil {
		// Without GPU polls, job info comes from the attribution cache,
		// which the profiler's rescans keep current.
		reg.MustRegister(jobinfo.New(res, res.HostName()))
	}
	if f.hostMetrics {
		defer startHostMetrics(ctx, f, res, reg, log)()
	}
	if f.rw.URL != "" {
		stop, err := startRemoteWrite(f, res, reg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	prof, err := newProfiler(f, res, coll, reg, log)
	if err != nil {
		return err
	}
	if prof != nil {
		defer prof.close()
	}
	if f.metricsAddr != "" {
		stop, err := serveMetrics(f, reg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if prof == nil {
		log.Info("CPU profiling off and no other profile source on; serving metrics only", "node", res.HostName())
		<-ctx.Done()
		return nil
	}
	return prof.run(ctx, log)
}

// startGPU starts the NVML collector, or logs why there is none: a node
// without the driver runs without GPU metrics.
func startGPU(ctx context.Context, f runFlags, res *attribution.Resolver, reg *prometheus.Registry, log *slog.Logger) (stop func(), _ *gpu.Collector) {
	// Which GPUs a job holds: the device program slurmstepd attached to
	// its cgroup, or with --slurmctld slurmctld's record and slurmd -G.
	grants := &gpu.SlurmGrants{CgroupV2: f.attr.tree().V2Mount(), Node: f.attr.nodeName}
	if f.attr.slurmctld {
		grants.Config = &slurm.Commands{}
	}
	coll, err := gpu.New(gpu.Options{LibraryPath: f.nvmlLibrary, HostName: res.HostName(), Interval: f.gpuInterval,
		Jobs: res, Proc: procfs.New(f.attr.procRoot), Grants: grants,
		Devices: gpu.Devices{Root: f.devRoot, MIGMinors: f.migMinors}, Log: log})
	switch {
	case errors.Is(err, gpu.ErrNoDriver):
		log.Info("no NVIDIA driver on this node; running without GPU metrics", "err", err)
		return func() {}, nil
	case err != nil:
		log.Error("GPU metrics disabled", "err", err)
		return func() {}, nil
	}
	reg.MustRegister(coll)
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); coll.Run(gctx) }()
	return func() { cancel(); <-done; coll.Close() }, coll
}

// startHostMetrics starts the cgroup collector on its own goroutine.
func startHostMetrics(ctx context.Context, f runFlags, res *attribution.Resolver, reg *prometheus.Registry, log *slog.Logger) (stop func()) {
	// The same tree attribution checks Slurm's directories in.
	coll := hostmetrics.New(hostmetrics.Options{Root: f.attr.cgroupRoot, HostName: res.HostName(), Jobs: res, Interval: f.hostInterval, Log: log})
	reg.MustRegister(coll)
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); coll.Run(hctx) }()
	return func() { cancel(); <-done }
}

func startRemoteWrite(f runFlags, res *attribution.Resolver, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	if f.rwSpoolDir == f.spoolDir {
		return nil, errors.New("--remote-write-spool-dir must differ from --spool-dir: each spool has one reader")
	}
	sp, err := spool.Open(f.rwSpoolDir, f.rwSpoolMax, spool.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("--remote-write-spool-dir: %w", err)
	}
	// Self-metrics carry no node label of their own.
	f.rw.ExternalLabels = map[string]string{schema.HostName.Label: res.HostName()}
	w, err := remotewrite.New(f.rw, sp, reg, log)
	if err != nil {
		sp.Close()
		return nil, fmt.Errorf("--prometheus-remote-write-url: %w", err)
	}
	reg.MustRegister(remotewrite.NewCollector(w))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	return func() { cancel(); <-done; sp.Close() }, nil
}

// DefaultMetricsAddr serves /metrics on this host only: its job series
// name every user's jobs, their names, accounts and partitions, which
// Slurm's PrivateData may hide from other users.
const DefaultMetricsAddr = "127.0.0.1:9810"

// serveMetrics serves /metrics. exporter-toolkit adds TLS and basic auth
// from --web.config.file, which an address beyond this host should have.
func serveMetrics(f runFlags, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", f.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	if f.webConfig == "" && !loopback(ln.Addr()) {
		log.Warn("serving /metrics beyond this host without --web.config.file: anyone who reaches it sees every user's jobs", "addr", ln.Addr().String())
	}
	srv := &http.Server{Handler: metricsMux(reg), ReadHeaderTimeout: 10 * time.Second}
	webCfg := f.webConfig
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := web.Serve(ln, srv, &web.FlagConfig{WebConfigFile: &webCfg}, log); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}

// profiler is the profiling pipeline: the sources, symbolizer, daemon and
// its sinks.
type profiler struct {
	d       *daemon.Daemon
	shipper *pyroscope.Shipper
	closers []func() error
	info    []any
}

// newProfiler starts every profile source the flags turn on, and the
// pipeline behind them; nil when no source is on.
func newProfiler(f runFlags, res *attribution.Resolver, coll *gpu.Collector, reg *prometheus.Registry, log *slog.Logger) (*profiler, error) {
	p := &profiler{}
	if coll != nil {
		f.gpuKernels.Devices = coll.CUDADevice
	}
	proc := procfs.New(f.attr.procRoot)
	bud, work := memoryBudget(f, proc, log)
	reg.MustRegister(budget.NewCollector(bud, work))
	owner, job := owners(res)
	// One stack capture for every source's probe: the unwind tables and
	// the interpreter state of the processes the agent profiles.
	// A process the probes meet before a rescan is admitted at once, as a
	// rescan would (the daemon exists once the sources do).
	var d atomic.Pointer[daemon.Daemon]
	sym := symbolize.New(symbolize.Options{Proc: proc, Budget: bud, Work: work, Owner: owner})
	reg.MustRegister(sym.Collector())
	walker, err := stackwalk.New(stackwalk.Options{Proc: proc, Tables: f.unwind == "auto", Interpreters: f.interps.enabled(),
		Remapped:      sym.Refresh,
		MaxTableBytes: f.unwindBudget, ExitGrace: 2*f.interval + time.Minute, Log: log,
		Profiled: func(id procfs.ID) bool {
			if dm := d.Load(); dm != nil {
				return dm.Admit(id)
			}
			// Before the daemon starts: its first scan admits the process.
			p, ok := res.Cached(id)
			if !ok {
				var err error
				if p, err = res.Resolve(id.PID); err != nil {
					return false
				}
			}
			return p.ID == id && !p.Foreign && (p.InJob() || f.allProcesses)
		}})
	if err != nil {
		return nil, fmt.Errorf("starting the stack unwinder (needs root, BTF, Linux 5.17 or later): %w", err)
	}
	p.closers = append(p.closers, walker.Close)
	env := source.Env{Proc: proc, SysRoot: f.sysRoot, ExcludePID: os.Getpid(), Interval: f.interval,
		Budget: bud, Owner: owner, Job: job, Stacks: walker, Reg: reg, Log: log}
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
	reg.MustRegister(walker.Collectors()...)
	log.Info("capturing user stacks", "unwind", map[bool]string{true: "tables", false: "frame pointers"}[walker.Tables()],
		"frame_pointers_because", walker.FramePointerReason(), "interpreters", walker.Interpreters())
	var sinks sink.Multi
	if f.pyro.URL != "" {
		client, err := pyroscope.NewClient(f.pyro)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("--pyroscope-url: %w", err)
		}
		sp, err := spool.Open(f.spoolDir, f.spoolMax, spool.WithLogger(log))
		if err != nil {
			p.close()
			return nil, fmt.Errorf("--spool-dir: %w", err)
		}
		p.closers = append(p.closers, sp.Close)
		p.shipper = pyroscope.NewShipper(sp, client, pyroscope.WithLogger(log), pyroscope.WithIngestionWindow(f.pyroWindow))
		reg.MustRegister(pyroscope.NewCollector(p.shipper))
		sinks = append(sinks, &sink.Push{Shipper: p.shipper})
	}
	if f.outputDir == "" && f.pyro.URL == "" {
		f.outputDir = "/var/lib/slurmscope/profiles"
	}
	if f.outputDir != "" {
		if err := os.MkdirAll(f.outputDir, 0o755); err != nil {
			p.close()
			return nil, fmt.Errorf("--output-dir: %w", err)
		}
		sinks = append(sinks, &sink.Dir{Root: f.outputDir})
	}
	cfg := daemon.Config{Interval: f.interval, RescanInterval: f.rescanInterval, AllProcesses: f.allProcesses, Log: log,
		Watchers: []source.ProcessAttacher{walker}, LabelStackSetup: f.labelSetup}
	p.d = daemon.New(cfg, sources, sym, res, sinks)
	d.Store(p.d)
	reg.MustRegister(p.d.Collectors()...)
	p.info = []any{"node", res.HostName(), "sources", names, "interval", f.interval,
		"output_dir", f.outputDir, "pyroscope", f.pyro.URL}
	return p, nil
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

func (p *profiler) run(ctx context.Context, log *slog.Logger) error {
	shipCtx, stopShipper := context.WithCancel(context.Background())
	shipDone := make(chan error, 1)
	if p.shipper != nil {
		go func() { shipDone <- p.shipper.Run(shipCtx) }()
	} else {
		shipDone <- nil
	}
	log.Info("profiling", p.info...)
	err := p.d.Run(ctx)
	// The last interval is in the spool now; give the shipper its bounded
	// final flush, and leave the rest for the next start.
	stopShipper()
	if serr := <-shipDone; serr != nil && err == nil {
		err = serr
	}
	log.Info("stopped")
	return err
}

func (p *profiler) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// loopback reports whether a listener is reachable from this host only.
func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

func metricsMux(reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "slurmscope-agent: see /metrics")
	})
	return mux
}
