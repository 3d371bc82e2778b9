package cpu

import (
	"errors"
	"flag"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/source"
)

// drainer is the Sampler as the source uses it; tests fake it.
type drainer interface {
	Drain() ([]Sample, Stats, error)
}

// Source is the CPU sampler as a profile source: each drained (process,
// kernel stack, user stack) becomes one process_cpu sample of its count
// and the CPU time it stands for.
type Source struct {
	s      drainer
	period int64         // ns of CPU per sample
	stacks source.Stacks // names interpreter frames; nil: none
	m      metrics
	last   Stats
	// jobOf names a process's job ("" in none) for the maps-full metric;
	// nil: every process is in none.
	jobOf func(procfs.ID) string
}

var (
	_ source.Source = (*Source)(nil)
	_ drainer       = (*Sampler)(nil)
)

// NewSource makes a source of a sampler running at sampleRate Hz. stacks
// names the samples' interpreter frames (nil: none).
func NewSource(s drainer, sampleRate int, stacks source.Stacks) *Source {
	return &Source{s: s, period: 1e9 / int64(sampleRate), stacks: stacks, m: newMetrics()}
}

// WithJobs makes the source name, when the kernel maps were full, the job
// that filled them: jobOf gives a process's job id, "" for none.
func (c *Source) WithJobs(jobOf func(procfs.ID) string) *Source { c.jobOf = jobOf; return c }

// Info describes the source to the daemon.
func (c *Source) Info() source.Info {
	return source.Info{Name: "cpu", Type: profiles.CPU, Period: c.period, Counted: 0,
		Drained: c.m.samples, Unattributed: c.m.unattributed}
}

// Drain drains the sampler. A hotplug failure only warns: its samples are
// good.
func (c *Source) Drain() (source.Batch, error) {
	samples, st, err := c.s.Drain()
	var b source.Batch
	if err != nil {
		if !errors.Is(err, ErrHotplug) {
			return b, err
		}
		b.Warn = err
	}
	c.m.observe(c.last, st)
	c.noteFull(samples, c.last, st)
	c.last = st
	b.Samples = make([]source.Sample, len(samples))
	// Right after the drain, while the processes (most of them) live;
	// samples share interpreter stacks, each is resolved once.
	resolved := map[*bpf.InterpStack]interp.Stack{}
	for i, s := range samples {
		n := int64(s.Count) // #nosec G115 -- samples of one interval, counted by the kernel
		out := source.Sample{Proc: s.Proc, Kernel: s.Kernel, User: s.User, Setup: source.Setup(s.Setup), Values: []int64{n, n * c.period}}
		if s.Interp != nil && c.stacks != nil {
			r, ok := resolved[s.Interp]
			if !ok {
				r = c.stacks.Resolve(uint32(s.Proc.PID), s.StartNs, s.Interp) // #nosec G115 -- a pid is below pid_max (at most 2^22)
				resolved[s.Interp] = r
			}
			out.Interp = r
		}
		b.Samples[i] = out
	}
	return b, nil
}

// noteFull says which job filled the maps of a generation that was full:
// the one whose processes hold the most distinct keys (each sample is
// one) in it.
func (c *Source) noteFull(samples []Sample, prev, cur Stats) {
	countsFull := cur.LostMapFull > prev.LostMapFull
	stacksFull := cur.KernelStackMapFull+cur.UserStackMapFull > prev.KernelStackMapFull+prev.UserStackMapFull
	interpFull := cur.InterpStackMapFull > prev.InterpStackMapFull
	if !countsFull && !stacksFull && !interpFull {
		return
	}
	keys := map[string]int{}
	for _, s := range samples {
		job := ""
		if c.jobOf != nil {
			job = c.jobOf(s.Proc)
		}
		keys[job]++
	}
	top, most := "", -1
	for job, n := range keys {
		if n > most || n == most && job < top {
			top, most = job, n
		}
	}
	if countsFull {
		c.m.mapsFull.WithLabelValues(top, "counts").Inc()
	}
	if stacksFull {
		c.m.mapsFull.WithLabelValues(top, "stacks").Inc()
	}
	if interpFull {
		c.m.mapsFull.WithLabelValues(top, "interpreter_stacks").Inc()
	}
}

// Collectors are the source's own metrics (the sampler's losses and CPUs).
func (c *Source) Collectors() []prometheus.Collector { return c.m.own() }

// Kind runs the eBPF CPU sampler (--cpu-profiling, on by default).
type Kind struct {
	on   bool
	rate int
}

var _ source.Kind = (*Kind)(nil)

// Flags registers --cpu-profiling and --sample-rate.
func (k *Kind) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&k.on, "cpu-profiling", true, "profile CPU stacks with eBPF")
	fs.IntVar(&k.rate, "sample-rate", defaultSampleRate, "CPU samples per second on each CPU")
}

// Check validates the sample rate.
func (k *Kind) Check() error {
	if k.on && (k.rate < 1 || k.rate > 10000) {
		return fmt.Errorf("--sample-rate %d out of range 1..10000", k.rate)
	}
	return nil
}

// Open loads and attaches the sampler.
func (k *Kind) Open(env source.Env) (source.Source, error) {
	if !k.on {
		return nil, nil
	}
	opts := Options{SampleRate: k.rate, SysRoot: env.SysRoot, ExcludePID: env.ExcludePID, Interval: env.Interval}
	if env.Stacks != nil {
		opts.Stacks = env.Stacks
		// Read what each new interpreter stack names now, while its
		// process lives; the drain finds it cached.
		opts.NewInterp = func(pid uint32, startNs uint64, raw *bpf.InterpStack) { env.Stacks.Resolve(pid, startNs, raw) }
	}
	s, err := New(opts)
	if err != nil {
		return nil, fmt.Errorf("starting the eBPF sampler (needs root, perf events, BTF and Linux 5.8 or later; slurmscope-agent check says what this node lacks): %w", err)
	}
	src := &closingSource{Source: NewSource(s, k.rate, env.Stacks).WithJobs(env.Job), s: s}
	env.Reg.MustRegister(src.Collectors()...)
	env.Reg.MustRegister(programStats(s)...)
	counts, stacks := s.MapEntries()
	env.Log.Info("sampling CPU stacks", "sample_rate_hz", k.rate, "count_entries", counts, "stack_entries", stacks)
	return src, nil
}

// closingSource closes the sampler with the source.
type closingSource struct {
	*Source
	s *Sampler
}

func (c *closingSource) Close() error { return c.s.Close() }
