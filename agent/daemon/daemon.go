// Package daemon is the agent's main loop: every interval it drains the CPU
// sampler, attributes each process's samples to its SLURM job, symbolises
// the stacks and hands one pprof profile per job to a sink (files on disk,
// or the Pyroscope spool).
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

// Sampler is the CPU sampler (agent/cpu in production).
type Sampler interface {
	Drain() ([]cpu.Sample, cpu.Stats, error)
}

// Symbolizer turns raw addresses into frames (agent/symbolize).
type Symbolizer interface {
	User(p procfs.ID, addrs []uint64) []symbolize.Frame
	Kernel(addrs []uint64) []symbolize.Frame
	// Prepare loads a live process's symbols, so its samples can be
	// symbolised after it exits.
	Prepare(p procfs.ID)
	Forget(p procfs.ID)
}

// Resolver attributes processes (agent/attribution).
type Resolver interface {
	Cached(pid int, startTime uint64) (attribution.Process, bool)
	Resolve(pid int) (attribution.Process, error)
	Scan() ([]attribution.Process, error)
	Refresh() ([]attribution.Process, error)
}

// Output is one encoded profile: one job (or one executable outside any
// job), one profile type, one interval.
type Output struct {
	Type        profiles.Type
	JobID       string // "" outside a job
	ServiceName string
	Labels      []profiles.Label // series labels, service_name included
	Start, End  time.Time
	Data        []byte // gzipped pprof
}

// Sink receives each interval's profiles.
type Sink interface {
	Write(ctx context.Context, outs []Output) error
}

// Config configures the loop.
type Config struct {
	SampleRate int           // Hz; sets the pprof period
	Interval   time.Duration // drain and upload interval
	// RescanInterval is how often new processes are attributed, so that one
	// which runs for a second and exits is still labelled.
	RescanInterval time.Duration
	AllProcesses   bool // also profile processes in no job
	// GPU, when set, is the GPU kernel tracer: new processes are attached
	// to it in rescans and its samples become one gpu profile per job.
	GPU GPUTracer
	// GPUDevice names the GPU a CUDA device ordinal stands for in a
	// process with environment env (the GPUEnvKeys read through Environ),
	// as pprof sample labels; nil when it cannot say for sure.
	GPUDevice func(env map[string]string, ordinal uint32) []profiles.Label
	// Environ reads variables of a live process (procfs.FS.Environ).
	Environ    func(pid int, keys ...string) (map[string]string, error)
	GPUEnvKeys []string
	Log        *slog.Logger
	Now        func() time.Time
}

// Daemon is the main loop.
type Daemon struct {
	cfg     Config
	sampler Sampler
	sym     Symbolizer
	res     Resolver
	sink    Sink
	period  int64

	mu         sync.Mutex // serialises Collect
	start      time.Time
	lastStats  cpu.Stats
	knownMu    sync.Mutex // rescans run beside Collect
	known      map[procKey]bool
	lastLogged map[string]bool
	gpu        gpuState // guarded by knownMu
	lastGPU    gputrace.Stats

	m metrics
}

type procKey struct {
	pid   uint32
	start uint64
}

// New returns a Daemon.
func New(cfg Config, s Sampler, sym Symbolizer, res Resolver, sink Sink) *Daemon {
	if cfg.SampleRate <= 0 {
		cfg.SampleRate = 97
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 15 * time.Second
	}
	if cfg.RescanInterval <= 0 {
		cfg.RescanInterval = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Daemon{cfg: cfg, sampler: s, sym: sym, res: res, sink: sink,
		period: int64(time.Second) / int64(cfg.SampleRate), start: cfg.Now(),
		known: map[procKey]bool{}, lastLogged: map[string]bool{}, m: newMetrics(),
		gpu: gpuState{pending: map[procKey]bool{}, env: map[procKey]map[string]string{}}}
}

// Run collects every interval until ctx is done, then collects and writes
// the last, partial interval so a stop loses nothing.
func (d *Daemon) Run(ctx context.Context) error {
	tick := time.NewTicker(d.cfg.Interval)
	defer tick.Stop()
	d.rescan(true)
	// Rescans run beside Collect, which can take a while on a busy node:
	// a short process must be seen while it lives, whatever Collect does.
	rctx, stopRescans := context.WithCancel(ctx)
	rescansDone := make(chan struct{})
	go func() {
		defer close(rescansDone)
		t := time.NewTicker(d.cfg.RescanInterval)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				d.rescan(false)
			}
		}
	}()
	defer func() { stopRescans(); <-rescansDone }()
	for {
		select {
		case <-ctx.Done():
			// The final flush gets its own deadline: ctx is already done.
			fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return d.Collect(fctx)
		case <-tick.C:
			// A full pass once per interval re-checks known processes
			// (adoption into a job, metadata TTLs).
			d.rescan(true)
			if err := d.Collect(ctx); err != nil {
				d.logOnce("collect", "interval failed", err)
			}
		}
	}
}

// rescan attributes processes that appeared since the last pass, so that
// short-lived ones are known before they exit; full also re-reads the
// known ones whose cache entries expired.
func (d *Daemon) rescan(full bool) {
	var procs []attribution.Process
	var err error
	if full {
		procs, err = d.res.Scan()
	} else {
		procs, err = d.res.Refresh()
	}
	if err != nil {
		d.logOnce("scan", "listing processes failed", err)
	}
	for _, p := range procs {
		if p.Foreign || !(p.InJob() || d.cfg.AllProcesses) {
			continue
		}
		k := procKey{uint32(p.PID), p.StartTime}
		d.knownMu.Lock()
		seen := d.known[k]
		d.known[k] = true
		retry := full && d.gpu.pending[k]
		d.knownMu.Unlock()
		if seen {
			if retry {
				d.attachGPU(k)
			}
			continue
		}
		// Symbols are read while the process lives: by the time its
		// interval is drained, a short task may be gone.
		d.sym.Prepare(procfs.ID{PID: p.PID, Start: p.StartTime})
		d.attachGPU(k)
	}
}

// Collect drains the sampler and writes one profile per job.
func (d *Daemon) Collect(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	end := d.cfg.Now()
	samples, stats, err := d.sampler.Drain()
	if err != nil {
		// Keep the interval's start: the next drain covers this one too.
		return fmt.Errorf("draining the sampler: %w", err)
	}
	d.m.observeSampler(d.lastStats, stats)
	d.lastStats = stats

	builders := map[string]*jobProfile{}
	for _, s := range samples {
		d.m.samples.Add(float64(s.Count))
		jp := d.profileFor(builders, profiles.CPU, d.period, uint32(s.Proc.PID), s.Proc.Start, float64(s.Count), d.m.unattributed)
		if jp == nil {
			continue
		}
		stack := d.sym.Kernel(s.Kernel)
		stack = append(stack, d.sym.User(s.Proc, s.User)...)
		// The step is a sample label: one profile per job, while
		// Pyroscope still splits series by step.
		var sl []profiles.Label
		if st := jp.stepOf[procKey{uint32(s.Proc.PID), s.Proc.Start}]; st != "" {
			sl = []profiles.Label{{Name: schema.JobStep.Label, Value: st}}
		}
		jp.b.Add(stack, sl, int64(s.Count), int64(s.Count)*d.period)
	}

	// GPU samples after the CPU ones: their processes are attributed by
	// the same rules, before forgetExited drops the state of the exited.
	gpuBuilders := map[string]*jobProfile{}
	gpuSeen := d.collectGPU(gpuBuilders)

	outs := d.finish(nil, builders, end)
	outs = d.finish(outs, gpuBuilders, end)
	d.start = end
	d.forgetExited(samples, gpuSeen)
	if len(outs) == 0 {
		return nil
	}
	if err := d.sink.Write(ctx, outs); err != nil {
		d.m.profiles.WithLabelValues("error").Add(float64(len(outs)))
		return fmt.Errorf("writing profiles: %w", err)
	}
	d.m.profiles.WithLabelValues("ok").Add(float64(len(outs)))
	return nil
}

// finish encodes the builders' profiles, in job order, onto outs.
func (d *Daemon) finish(outs []Output, builders map[string]*jobProfile, end time.Time) []Output {
	keys := make([]string, 0, len(builders))
	for k := range builders {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		jp := builders[k]
		// A file on disk names its step too, when there is only one.
		labels := append([]profiles.Label(nil), jp.labels...)
		if len(jp.steps) == 1 {
			for st := range jp.steps {
				labels = append(labels, profiles.Label{Name: schema.JobStep.Label, Value: st})
			}
		}
		p := jp.b.Finish(end, labels)
		data, err := profiles.Encode(p)
		if err != nil {
			d.logOnce("encode", "encoding a profile failed", err)
			continue
		}
		outs = append(outs, Output{Type: jp.typ, JobID: jp.jobID, ServiceName: jp.service,
			Labels: jp.labels, Start: d.start, End: end, Data: data})
		d.m.payloadBytes.Add(float64(len(data)))
	}
	return outs
}

type jobProfile struct {
	typ     profiles.Type
	b       *profiles.Builder
	jobID   string
	service string
	labels  []profiles.Label
	steps   map[string]bool
	stepOf  map[procKey]string
}

// profileFor attributes a sample. A sample whose process cannot be
// attributed with certainty (it exited and its pid is gone or reused) is
// counted (count, in unattr) and dropped, never guessed. builders holds
// profiles of typ only.
func (d *Daemon) profileFor(builders map[string]*jobProfile, typ profiles.Type, period int64, pid uint32, start uint64,
	count float64, unattr *prometheus.CounterVec) *jobProfile {
	key := procKey{pid, start}
	p, ok := d.res.Cached(int(pid), start)
	if !ok {
		var err error
		p, err = d.res.Resolve(int(pid))
		if err != nil || p.StartTime != start {
			unattr.WithLabelValues("exited").Add(count)
			return nil
		}
	}
	d.knownMu.Lock()
	d.known[key] = true
	d.knownMu.Unlock()
	if p.Foreign {
		unattr.WithLabelValues("other_node").Add(count)
		return nil
	}
	var bk string
	if p.InJob() {
		bk = "job/" + p.Job.Host + "/" + p.Job.ID
	} else if d.cfg.AllProcesses {
		bk = "nojob/" + p.Comm
	} else {
		unattr.WithLabelValues("not_in_job").Add(count)
		return nil
	}
	jp := builders[bk]
	if jp == nil {
		jp = &jobProfile{typ: typ, b: profiles.NewBuilder(typ, period, d.start), steps: map[string]bool{}, stepOf: map[procKey]string{}}
		if p.InJob() {
			j := p.Job
			jp.jobID = j.ID
			jp.labels = profiles.JobLabels(j.Host, j.ID, j.Name, j.User, j.Account, j.Partition, p.Comm)
		} else {
			jp.labels = profiles.JobLabels(p.Host, "", "", "", "", "", p.Comm)
		}
		for _, l := range jp.labels {
			if l.Name == schema.ServiceName {
				jp.service = l.Value
			}
		}
		builders[bk] = jp
	}
	if p.InJob() && p.Step != "" {
		jp.steps[p.Step] = true
		jp.stepOf[key] = p.Step
	}
	return jp
}

// forgetExited drops symbolizer state of processes that no longer run.
func (d *Daemon) forgetExited(samples []cpu.Sample, seen map[procKey]bool) {
	if seen == nil {
		seen = make(map[procKey]bool, len(samples))
	}
	for _, s := range samples {
		seen[procKey{uint32(s.Proc.PID), s.Proc.Start}] = true
	}
	d.knownMu.Lock()
	defer d.knownMu.Unlock()
	for k := range d.known {
		if seen[k] {
			continue
		}
		if p, ok := d.res.Cached(int(k.pid), k.start); !ok || p.StartTime != k.start {
			d.sym.Forget(procfs.ID{PID: int(k.pid), Start: k.start})
			delete(d.known, k)
			delete(d.gpu.pending, k)
			delete(d.gpu.env, k)
		}
	}
}

func (d *Daemon) logOnce(key, msg string, err error) {
	d.m.errors.WithLabelValues(key).Inc()
	d.knownMu.Lock()
	logged := d.lastLogged[key]
	d.lastLogged[key] = true
	d.knownMu.Unlock()
	if logged {
		return
	}
	d.cfg.Log.Warn(msg+" (further errors of this kind are only counted)", "err", err)
}

// Collectors returns the daemon's Prometheus collectors.
func (d *Daemon) Collectors() []prometheus.Collector { return d.m.all() }
