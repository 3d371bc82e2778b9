package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/agent/hostmetrics"
	"github.com/slurmscope/slurmscope/agent/jobinfo"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/remotewrite"
	"github.com/slurmscope/slurmscope/agent/service"
	"github.com/slurmscope/slurmscope/agent/slurm"
	"github.com/slurmscope/slurmscope/internal/units"
)

// serviceKinds are what runs beside the profiler, each behind
// agent/service, in the order they start; they stop in reverse, after the
// profiler, so that its last interval is in the metrics served and pushed.
// A new collector or metrics backend is one more line here.
// ready is what the metrics server's /-/ready answers.
func serviceKinds(attr *attrFlags, gpuMetrics *gpuMetrics, ready func() bool) []service.Kind {
	return []service.Kind{
		gpuMetrics,
		&hostMetrics{attr: attr},
		&remotewrite.Kind{},
		&metricsServer{ready: ready},
	}
}

// gpuMetrics reads GPU metrics through NVML, where there is a driver.
type gpuMetrics struct {
	attr      *attrFlags
	on        bool
	interval  time.Duration
	library   string
	devRoot   string
	migMinors string
	coll      *gpu.Collector // once open
}

var _ service.Kind = (*gpuMetrics)(nil)

func (k *gpuMetrics) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&k.on, "gpu-metrics", true, "read GPU metrics through NVML (skipped with one log line where there is no driver)")
	fs.Var(units.NewDuration(&k.interval, 10*time.Second), "gpu-interval", "how often GPUs are polled")
	fs.StringVar(&k.library, "nvml-library", "", "path of libnvidia-ml.so.1 (default: the dynamic linker's search)")
	fs.StringVar(&k.devRoot, "dev-root", "/dev", "directory of the GPU device files (nvidia<N>, nvidia-caps/), which name the GPUs in Slurm's grants")
	fs.StringVar(&k.migMinors, "nvidia-mig-minors", "/proc/driver/nvidia-caps/mig-minors", "the NVIDIA driver's table of MIG capability minors")
}

func (k *gpuMetrics) Check() error {
	if k.interval <= 0 {
		return fmt.Errorf("--gpu-interval %v: must be positive", k.interval)
	}
	return nil
}

// Open starts the NVML collector, or logs why there is none: a node
// without the driver runs without GPU metrics. Without GPU polls, job info
// comes from the attribution cache, which the profiler's rescans keep
// current.
func (k *gpuMetrics) Open(env service.Env) (service.Service, error) {
	if k.on {
		k.coll = k.open(env)
	}
	if k.coll == nil {
		env.Reg.MustRegister(jobinfo.New(env.Jobs, env.HostName))
		return nil, nil
	}
	env.Reg.MustRegister(k.coll)
	return k.coll, nil
}

func (k *gpuMetrics) open(env service.Env) *gpu.Collector {
	// Which GPUs a job holds: the device program slurmstepd attached to
	// its cgroup, or with --slurmctld slurmctld's record and slurmd -G.
	grants := &gpu.SlurmGrants{CgroupV2: k.attr.tree().V2Mount(), Node: k.attr.nodeName}
	if k.attr.slurmctld {
		grants.Config = &slurm.Commands{}
	}
	coll, err := gpu.New(gpu.Options{LibraryPath: k.library, HostName: env.HostName, Interval: k.interval,
		Jobs: env.Jobs, Proc: env.Proc, Grants: grants,
		Devices: gpu.Devices{Root: k.devRoot, MIGMinors: k.migMinors}, Log: env.Log})
	switch {
	case errors.Is(err, gpu.ErrNoDriver):
		env.Log.Info("no NVIDIA driver on this node; running without GPU metrics", "err", err)
		return nil
	case err != nil:
		env.Log.Error("GPU metrics disabled", "err", err)
		return nil
	}
	return coll
}

// cudaDevice names a process's CUDA device through NVML once the collector
// is open, from CUDA_VISIBLE_DEVICES otherwise.
func (k *gpuMetrics) cudaDevice(env map[string]string, ordinal uint32) []profiles.Label {
	if k.coll != nil {
		return k.coll.CUDADevice(env, ordinal)
	}
	return gpu.VisibleIndex(env, ordinal)
}

// hostMetrics reads each job's cgroups.
type hostMetrics struct {
	attr     *attrFlags
	on       bool
	interval time.Duration
}

var _ service.Kind = (*hostMetrics)(nil)

func (k *hostMetrics) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&k.on, "host-metrics", true, "read each job's CPU time, CPUs, memory, OOM kills and I/O from the cgroups Slurm made for it")
	fs.Var(units.NewDuration(&k.interval, hostmetrics.DefaultInterval), "host-metrics-interval", "how often the jobs' cgroups are read")
}

func (k *hostMetrics) Check() error {
	if k.interval < 100*time.Millisecond {
		return fmt.Errorf("--host-metrics-interval %v is shorter than 100ms", k.interval)
	}
	return nil
}

func (k *hostMetrics) Open(env service.Env) (service.Service, error) {
	if !k.on {
		return nil, nil
	}
	// The same tree attribution checks Slurm's directories in.
	coll := hostmetrics.New(hostmetrics.Options{Root: k.attr.cgroupRoot, HostName: env.HostName, Jobs: env.Jobs, Interval: k.interval, Log: env.Log})
	env.Reg.MustRegister(coll)
	return coll, nil
}

// DefaultMetricsAddr serves /metrics on this host only: its job series
// name every user's jobs, their names, accounts and partitions, which
// Slurm's PrivateData may hide from other users.
const DefaultMetricsAddr = "127.0.0.1:9810"

// metricsServer serves /metrics, /-/healthy and /-/ready. exporter-toolkit
// adds TLS and basic auth from --web.config.file, which an address beyond
// this host should have.
type metricsServer struct {
	addr      string
	webConfig string
	pprof     bool
	ready     func() bool // nil: never ready
}

var _ service.Kind = (*metricsServer)(nil)

func (k *metricsServer) Flags(fs *flag.FlagSet) {
	fs.StringVar(&k.addr, "metrics-addr", DefaultMetricsAddr,
		"address for /metrics; empty disables it. It names every user's jobs: serve it beyond this host (e.g. :9810) only behind --web.config.file's TLS and basic auth")
	fs.StringVar(&k.webConfig, "web.config.file", "", "exporter-toolkit web config (TLS, basic auth) for --metrics-addr")
	fs.BoolVar(&k.pprof, "debug.pprof", false, "also serve the agent's own Go profiles under /debug/pprof/ on --metrics-addr (to find where the agent's time goes)")
}

// Check validates --web.config.file and proves --metrics-addr can be
// bound (listening, then closing: Open listens again), so that a port in
// use or a bad address is a configuration error before anything loads.
func (k *metricsServer) Check() error {
	if k.webConfig != "" {
		if err := web.Validate(k.webConfig); err != nil {
			return fmt.Errorf("--web.config.file: %w", err)
		}
	}
	if k.addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", k.addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr %q: %w (want host:port, e.g. 127.0.0.1:9810 or :9810; empty disables it)", k.addr, err)
	}
	return ln.Close()
}

// Open checks the web config and listens; Run serves.
func (k *metricsServer) Open(env service.Env) (service.Service, error) {
	if k.webConfig != "" {
		if err := web.Validate(k.webConfig); err != nil {
			return nil, fmt.Errorf("--web.config.file: %w", err)
		}
	}
	if k.addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", k.addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	if k.webConfig == "" && !loopback(ln.Addr()) {
		env.Log.Warn("serving /metrics beyond this host without --web.config.file: anyone who reaches it sees every user's jobs", "addr", ln.Addr().String())
	}
	mux := metricsMux(env.Gatherer, env.Reg, k.ready)
	if k.pprof {
		servePprof(mux)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return &serving{env: env, ln: ln, srv: srv, webConfig: k.webConfig}, nil
}

// serving is /metrics on its listener.
type serving struct {
	env       service.Env
	ln        net.Listener
	srv       *http.Server
	webConfig string
}

func (s *serving) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := web.Serve(s.ln, s.srv, &web.FlagConfig{WebConfigFile: &s.webConfig}, s.env.Log); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.env.Log.Error("metrics server", "err", err)
		}
	}()
	s.env.Log.Info("serving metrics", "addr", s.ln.Addr().String())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.srv.Shutdown(sctx)
	<-done
	return nil
}

// Close closes the listener of a server that never ran.
func (s *serving) Close() error {
	if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// loopback reports whether a listener is reachable from this host only.
func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// servePprof adds the Go runtime's profiles: what a CPU profile of the
// agent on a real load needs, off unless asked for.
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// metricsMux serves g's metrics; reg takes the handler's own. /-/healthy
// answers 200 while the process serves; /-/ready 503 until ready reports
// true (nil: never), then 200, as Prometheus's own endpoints do. Any other
// path but "/" is 404.
func metricsMux(g prometheus.Gatherer, reg prometheus.Registerer, ready func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "OK")
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if ready == nil || !ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: profile sources loading or first interval not yet delivered")
			return
		}
		fmt.Fprintln(w, "OK")
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "slurmscope-agent: see /metrics")
	})
	return mux
}
