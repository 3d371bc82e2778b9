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
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/jobinfo"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
	"github.com/slurmscope/slurmscope/agent/remotewrite"
	"github.com/slurmscope/slurmscope/agent/sink"
	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

func init() {
	extraCommands["run"] = runCmd
	summaries["run"] = "profile this node: CPU stacks (eBPF), GPU metrics (NVML), GPU kernels; push or write per-job profiles"
}

type runFlags struct {
	attr           attrFlags
	sysRoot        string
	sampleRate     int
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
	cpuProfiling   bool
	gpuMetrics     bool
	gpuInterval    time.Duration
	nvmlLibrary    string
	gpuInjectLib   string
	rw             remotewrite.Config
	rwSpoolDir     string
	rwSpoolMax     int64
}

func (f *runFlags) register(fs *flag.FlagSet) {
	f.attr.register(fs)
	fs.StringVar(&f.sysRoot, "sys-root", "/sys", "root of the sysfs filesystem (online CPUs)")
	fs.IntVar(&f.sampleRate, "sample-rate", 97, "CPU samples per second on each CPU")
	fs.DurationVar(&f.interval, "upload-interval", 15*time.Second, "how often profiles are built and sent")
	fs.DurationVar(&f.rescanInterval, "rescan-interval", time.Second, "how often new processes are attributed (short-lived processes need it shorter)")
	fs.BoolVar(&f.allProcesses, "all-processes", false, "also profile processes that are in no job (labelled by executable)")
	fs.StringVar(&f.outputDir, "output-dir", "", "write profiles as DIR/<job id>/<type>-<unix>.pb.gz (default /var/lib/slurmscope/profiles when no --pyroscope-url)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", ":9810", "address for the agent's own /metrics; empty disables it")
	fs.StringVar(&f.spoolDir, "spool-dir", "/var/lib/slurmscope/spool", "on-disk queue of pushes waiting for Pyroscope")
	fs.Int64Var(&f.spoolMax, "spool-max-bytes", 256<<20, "bound of the spool; the oldest pushes are dropped (and counted) past it")
	httpclient.RegisterFlags(fs, "pyroscope", &f.pyro.Config, "Pyroscope", "Pyroscope base URL to push to (push.v1.PusherService/Push)")
	fs.DurationVar(&f.pyroWindow.OlderThan, "pyroscope-reject-older-than", pyroscope.DefaultWindow.OlderThan,
		"the server's -validation.reject-older-than: spooled profiles older than this are dropped before sending (counted as too_old); 0: no bound")
	fs.DurationVar(&f.pyroWindow.NewerThan, "pyroscope-reject-newer-than", pyroscope.DefaultWindow.NewerThan,
		"the server's -validation.reject-newer-than: profiles it refuses as ahead of its clock by more than this are held until it takes them; 0: no bound")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.webConfig, "web.config.file", "", "exporter-toolkit web config (TLS, basic auth) for --metrics-addr")
	fs.BoolVar(&f.cpuProfiling, "cpu-profiling", true, "profile CPU stacks with eBPF")
	fs.BoolVar(&f.gpuMetrics, "gpu-metrics", true, "read GPU metrics through NVML (skipped with one log line where there is no driver)")
	fs.DurationVar(&f.gpuInterval, "gpu-interval", 10*time.Second, "how often GPUs are polled")
	fs.StringVar(&f.nvmlLibrary, "nvml-library", "", "path of libnvidia-ml.so.1 (default: the dynamic linker's search)")
	fs.StringVar(&f.gpuInjectLib, "gpu-inject-lib", "", "the installed libslurmscope_inject.so (the path jobs get in CUDA_INJECTION64_PATH): trace the GPU kernels of jobs that load it and write gpu profiles")
	httpclient.RegisterFlags(fs, "prometheus-remote-write", &f.rw.Config, "the remote-write endpoint",
		"also push the agent's metrics with Prometheus remote-write 1.0 to this URL (e.g. http://prometheus:9090/api/v1/write)")
	fs.DurationVar(&f.rw.Interval, "prometheus-remote-write-interval", 15*time.Second, "how often metrics are remote-written")
	fs.StringVar(&f.rwSpoolDir, "remote-write-spool-dir", "/var/lib/slurmscope/remote-write", "on-disk queue of metric batches waiting for the remote-write endpoint")
	fs.Int64Var(&f.rwSpoolMax, "remote-write-spool-max-bytes", 64<<20, "bound of the remote-write spool; the oldest batches are dropped (and counted) past it")
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
	if f.sampleRate < 1 || f.sampleRate > 10000 {
		fmt.Fprintf(stderr, "run: --sample-rate %d out of range 1..10000\n", f.sampleRate)
		return 2
	}
	if f.interval < time.Second {
		fmt.Fprintf(stderr, "run: --upload-interval %v is shorter than 1s\n", f.interval)
		return 2
	}
	if f.pyroWindow.OlderThan < 0 || f.pyroWindow.NewerThan < 0 {
		fmt.Fprintln(stderr, "run: --pyroscope-reject-older-than and --pyroscope-reject-newer-than must not be negative")
		return 2
	}
	if f.gpuInjectLib != "" && !f.cpuProfiling {
		fmt.Fprintln(stderr, "run: --gpu-inject-lib needs --cpu-profiling (the profiling loop builds the GPU profiles too)")
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
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

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
	if f.rw.URL != "" {
		stop, err := startRemoteWrite(f, res, reg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	var prof *profiler
	if f.cpuProfiling {
		if prof, err = newProfiler(f, res, coll, reg, log); err != nil {
			return err
		}
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
		log.Info("CPU profiling off; serving metrics only", "node", res.HostName())
		<-ctx.Done()
		return nil
	}
	return prof.run(ctx, log)
}

// startGPU starts the NVML collector, or logs why there is none: a node
// without the driver runs without GPU metrics.
func startGPU(ctx context.Context, f runFlags, res *attribution.Resolver, reg *prometheus.Registry, log *slog.Logger) (stop func(), _ *gpu.Collector) {
	coll, err := gpu.New(gpu.Options{LibraryPath: f.nvmlLibrary, HostName: res.HostName(), Interval: f.gpuInterval,
		Jobs: res, Proc: procfs.New(f.attr.procRoot), Log: log})
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

// serveMetrics serves /metrics. exporter-toolkit adds TLS and basic auth
// from --web.config.file: the endpoint is reachable across the cluster.
func serveMetrics(f runFlags, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", f.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
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

// profiler is the CPU profiling pipeline: sampler, symbolizer, daemon and
// its sinks.
type profiler struct {
	d       *daemon.Daemon
	sampler *cpu.Sampler
	shipper *pyroscope.Shipper
	closers []func() error
	info    []any
}

func newProfiler(f runFlags, res *attribution.Resolver, coll *gpu.Collector, reg *prometheus.Registry, log *slog.Logger) (*profiler, error) {
	p := &profiler{}
	var sinks sink.Multi
	if f.pyro.URL != "" {
		client, err := pyroscope.NewClient(f.pyro)
		if err != nil {
			return nil, fmt.Errorf("--pyroscope-url: %w", err)
		}
		sp, err := spool.Open(f.spoolDir, f.spoolMax, spool.WithLogger(log))
		if err != nil {
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
	sampler, err := cpu.New(cpu.Options{SampleRate: f.sampleRate, SysRoot: f.sysRoot, ExcludePID: os.Getpid()})
	if err != nil {
		p.close()
		return nil, fmt.Errorf("starting the eBPF sampler (needs root, perf events and BTF): %w", err)
	}
	p.sampler = sampler
	p.closers = append(p.closers, sampler.Close)
	// Only meaningful while kernel.bpf_stats_enabled=1 (the kernel does not
	// time BPF programs otherwise); the bench command turns it on.
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "slurmscope_agent_bpf_run_seconds_total",
			Help: "Time the kernel spent in the sampling program (needs kernel.bpf_stats_enabled=1)."},
			func() float64 { ns, _, _ := sampler.ProgramStats(); return float64(ns) / 1e9 }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "slurmscope_agent_bpf_runs_total",
			Help: "Runs of the sampling program (needs kernel.bpf_stats_enabled=1)."},
			func() float64 { _, n, _ := sampler.ProgramStats(); return float64(n) }),
	)
	sym := symbolize.New(symbolize.Options{ProcRoot: f.attr.procRoot})
	cfg := daemon.Config{SampleRate: f.sampleRate, Interval: f.interval, RescanInterval: f.rescanInterval,
		AllProcesses: f.allProcesses, Log: log}
	if f.gpuInjectLib != "" {
		if err := p.startGPUTrace(f, coll, &cfg, log); err != nil {
			p.close()
			return nil, err
		}
	}
	p.d = daemon.New(cfg, sampler, sym, res, sinks)
	reg.MustRegister(p.d.Collectors()...)
	p.info = []any{"node", res.HostName(), "sample_rate_hz", f.sampleRate, "interval", f.interval,
		"output_dir", f.outputDir, "pyroscope", f.pyro.URL, "gpu_inject_lib", f.gpuInjectLib}
	return p, nil
}

// startGPUTrace loads the GPU kernel tracer and attaches it to the
// installed injection library, so that every job loading it is traced from
// its first kernel. GPUs are named through NVML when the collector runs,
// else by the index CUDA_VISIBLE_DEVICES gives, else not at all.
func (p *profiler) startGPUTrace(f runFlags, coll *gpu.Collector, cfg *daemon.Config, log *slog.Logger) error {
	if _, err := os.Stat(f.gpuInjectLib); err != nil {
		return fmt.Errorf("--gpu-inject-lib: %w", err)
	}
	tr, err := gputrace.New(gputrace.Options{ProcRoot: f.attr.procRoot, ExcludePID: os.Getpid()})
	if err != nil {
		return fmt.Errorf("starting the GPU kernel tracer (needs root, uprobes and BTF): %w", err)
	}
	p.closers = append(p.closers, tr.Close)
	if err := tr.AttachFile(f.gpuInjectLib); err != nil {
		return fmt.Errorf("--gpu-inject-lib: %w", err)
	}
	cfg.GPU = tr
	cfg.Environ = procfs.New(f.attr.procRoot).Environ
	cfg.GPUEnvKeys = gpu.EnvKeys
	cfg.GPUDevice = gpu.VisibleIndex
	if coll != nil {
		cfg.GPUDevice = coll.CUDADevice
	}
	log.Info("tracing GPU kernels", "library", f.gpuInjectLib, "nvml", coll != nil)
	return nil
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

func metricsMux(reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "slurmscope-agent: see /metrics")
	})
	return mux
}
