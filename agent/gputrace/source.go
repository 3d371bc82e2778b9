package gputrace

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// tracer is the Tracer as the source uses it; tests fake it.
type tracer interface {
	Attach(p procfs.ID) error
	Drain() ([]Sample, Stats, error)
}

// Devices names the GPU a CUDA device ordinal stands for in a process
// whose environment is env (the EnvKeys read from it), as sample labels;
// nil when it cannot say for sure.
type Devices func(env map[string]string, ordinal uint32) []profiles.Label

// Source is the GPU kernel tracer as a profile source: one gpu sample per
// (process, kernel, device, launching stack), its leaf the kernel, labelled
// with the GPU it ran on. Processes are attached as the daemon finds them.
type Source struct {
	t       tracer
	proc    procfs.FS
	envKeys []string
	devices Devices
	m       metrics
	last    Stats

	// jobOf names a process's job ("" in none) for the per-job metrics.
	jobOf func(procfs.ID) string

	mu  sync.Mutex
	env map[procfs.ID]map[string]string // of attached processes, read while they live
	// Processes not injected whose CUDA_INJECTION64_PATH was read: each is
	// counted once.
	injectionChecked map[procfs.ID]bool
}

var (
	_ source.Source          = (*Source)(nil)
	_ source.ProcessAttacher = (*Source)(nil)
	_ tracer                 = (*Tracer)(nil)
)

// NewSource makes a source of a tracer. The GPU variables envKeys of each
// attached process are read through proc and handed to devices, which may
// be nil (no GPU labels).
func NewSource(t tracer, proc procfs.FS, envKeys []string, devices Devices) *Source {
	return &Source{t: t, proc: proc, envKeys: envKeys, devices: devices, m: newMetrics(),
		env: map[procfs.ID]map[string]string{}, injectionChecked: map[procfs.ID]bool{}}
}

// WithJobs names each process's job (jobOf: its job id, "" for none) in
// the per-job metrics: time stepped aside, other injections.
func (g *Source) WithJobs(jobOf func(procfs.ID) string) *Source { g.jobOf = jobOf; return g }

func (g *Source) job(p procfs.ID) string {
	if g.jobOf == nil {
		return ""
	}
	return g.jobOf(p)
}

// injectionEnv is the variable through which CUDA loads an injection
// library: ours, or a tool's of the job's own.
const injectionEnv = "CUDA_INJECTION64_PATH"

// checkOtherInjection counts, once, a process without the library whose
// CUDA_INJECTION64_PATH names another one (Nsight Systems and Compute set
// it for the processes they profile): CUDA loads that one, and nothing of
// ours, so that the job's missing GPU profile has a reason. The path is
// compared by name only: it lies in the job's mount namespace, where a
// stat could meet a FUSE mount that never answers.
func (g *Source) checkOtherInjection(p procfs.ID) {
	g.mu.Lock()
	checked := g.injectionChecked[p]
	g.injectionChecked[p] = true
	g.mu.Unlock()
	if checked {
		return
	}
	env, _ := g.proc.Environ(p.PID, injectionEnv)
	if v := env[injectionEnv]; v != "" && !isLibraryName(filepath.Base(v)) {
		g.m.otherInjection.WithLabelValues(g.job(p)).Inc()
	}
}

// Info describes the source to the daemon.
func (g *Source) Info() source.Info {
	return source.Info{Name: profiles.GPU.Name, Type: profiles.GPU, Period: 1, Counted: 2,
		Drained: g.m.gpuTime, Unattributed: g.m.unattributed}
}

// AttachProcess traces a profiled process once it maps the injection
// library. One that has not loaded it yet is retried (the library is
// loaded at CUDA initialisation, after the process was first seen); one
// that is gone is not; other errors are retried and reported.
func (g *Source) AttachProcess(p procfs.ID) (source.Attach, error) {
	err := g.t.Attach(p)
	switch {
	case err == nil:
	case errors.Is(err, ErrNotInjected):
		g.checkOtherInjection(p)
		return source.AttachRetry, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ESRCH):
		return source.AttachDone, nil
	default:
		return source.AttachRetry, err
	}
	if len(g.envKeys) > 0 {
		// Read now: the process maps the library, so it has exec'd its
		// CUDA program, and this is the environment its kernels see.
		if env, _ := g.proc.Environ(p.PID, g.envKeys...); env != nil {
			g.mu.Lock()
			g.env[p] = env
			g.mu.Unlock()
		}
	}
	return source.AttachReload, nil
}

// ForgetProcess drops what was kept of an exited process.
func (g *Source) ForgetProcess(p procfs.ID) {
	g.mu.Lock()
	delete(g.env, p)
	delete(g.injectionChecked, p)
	g.mu.Unlock()
}

// Drain drains the tracer. Its samples come even when its counters could
// not be read; that only warns.
func (g *Source) Drain() (source.Batch, error) {
	samples, st, err := g.t.Drain()
	var b source.Batch
	if err != nil {
		if errors.Is(err, errClosed) {
			return b, err
		}
		b.Warn = err
	}
	g.m.observe(g.last, st)
	g.last = st
	b.Samples = make([]source.Sample, len(samples))
	for i, s := range samples {
		leaf := symbolize.Frame{Function: s.Kernel}
		if leaf.Function == "" {
			leaf.Function = s.KernelRaw
		}
		out := source.Sample{Proc: s.Proc, Frames: []symbolize.Frame{leaf}, User: s.User,
			Interp: s.Interp, Setup: source.Setup(s.Setup),
			Labels: g.labels(s.Proc, s.Device), Values: []int64{saturate(s.Launches), saturate(s.Untraced), saturate(s.GPUTime)}}
		if s.Untraced > 0 {
			g.m.steppedAside.WithLabelValues(g.job(s.Proc), "cupti_client").Add(float64(s.Untraced) / 1e9)
		}
		if s.Unsampled {
			out.Frames = append(out.Frames, symbolize.Frame{Function: UnsampledFrame})
			out.User, out.Interp = nil, interp.Stack{}
		}
		b.Samples[i] = out
	}
	return b, nil
}

// labels names the GPU of a sample, or nothing when that is not known for
// sure.
func (g *Source) labels(p procfs.ID, device uint32) []profiles.Label {
	if g.devices == nil || device == DeviceUnknown {
		return nil
	}
	g.mu.Lock()
	env := g.env[p]
	g.mu.Unlock()
	if env == nil {
		return nil
	}
	return g.devices(env, device)
}

// Collectors are the source's own metrics (the tracer's losses and files).
func (g *Source) Collectors() []prometheus.Collector { return g.m.own() }

// Kind runs the GPU kernel tracer when --gpu-inject-lib names the
// installed injection library.
type Kind struct {
	// EnvKeys are the GPU variables read from each traced process, and
	// Devices names its GPUs from them; set by the agent's wiring (NVML
	// where it runs, else CUDA_VISIBLE_DEVICES).
	EnvKeys []string
	Devices Devices
	lib     string
}

var _ source.Kind = (*Kind)(nil)

// Flags registers --gpu-inject-lib.
func (k *Kind) Flags(fs *flag.FlagSet) {
	fs.StringVar(&k.lib, "gpu-inject-lib", "", "the installed libslurmscope_inject.so (the path jobs get in CUDA_INJECTION64_PATH): trace the GPU kernels of jobs that load it and write gpu profiles")
}

// Check refuses a --gpu-inject-lib that is not a regular file (a typo in
// the path would otherwise trace nothing, said only in the log).
func (k *Kind) Check() error {
	if k.lib == "" {
		return nil
	}
	st, err := os.Stat(k.lib)
	switch {
	case err != nil:
		return fmt.Errorf("--gpu-inject-lib: %w", err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("--gpu-inject-lib %s: not a regular file", k.lib)
	}
	return nil
}

// Open loads the tracer and attaches it to the installed library, so that
// every job loading it is traced from its first kernel.
func (k *Kind) Open(env source.Env) (source.Source, error) {
	if k.lib == "" {
		return nil, nil
	}
	if _, err := os.Stat(k.lib); err != nil {
		return nil, fmt.Errorf("--gpu-inject-lib: %w", err)
	}
	tr, err := New(Options{Proc: env.Proc, ExcludePID: env.ExcludePID, Stacks: env.Stacks, Budget: env.Budget, Owner: env.Owner})
	if err != nil {
		return nil, fmt.Errorf("starting the GPU kernel tracer (needs root, uprobes, BTF and Linux 5.8 or later; slurmscope-agent check says what this node lacks): %w", err)
	}
	if err := tr.AttachFile(k.lib); err != nil {
		tr.Close()
		return nil, fmt.Errorf("--gpu-inject-lib: %w", err)
	}
	src := &closingSource{Source: NewSource(tr, env.Proc, k.EnvKeys, k.Devices).WithJobs(env.Job), t: tr}
	env.Reg.MustRegister(src.Collectors()...)
	env.Log.Info("tracing GPU kernels", "library", k.lib)
	return src, nil
}

// closingSource closes the tracer with the source.
type closingSource struct {
	*Source
	t *Tracer
}

func (c *closingSource) Close() error { return c.t.Close() }

// saturate converts a counter to pprof's int64. The GPU time comes from
// records a job can forge: past 2^63 it stays at the largest value
// rather than wrapping negative.
func saturate(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
