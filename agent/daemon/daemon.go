// Package daemon is the agent's main loop: every interval it drains each
// profile source (agent/source), attributes each process's samples to its
// SLURM job, symbolises the stacks and hands one pprof profile per job and
// profile type to a Sink (a delivery backend: files on disk, the Pyroscope
// spool). It does not know which sources or backends it runs.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

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
	Cached(p procfs.ID) (attribution.Process, bool)
	Resolve(pid int) (attribution.Process, error)
	Scan() ([]attribution.Process, error)
	Refresh() ([]attribution.Process, error)
}

var (
	_ Symbolizer = (*symbolize.Symbolizer)(nil)
	_ Resolver   = (*attribution.Resolver)(nil)
)

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
	Interval time.Duration // drain and upload interval
	// RescanInterval is how often new processes are attributed, so that one
	// which runs for a second and exits is still labelled.
	RescanInterval time.Duration
	AllProcesses   bool // also profile processes in no job
	// Watchers are told of every profiled process as attaching sources are
	// (the shared stack capture, agent/stackwalk, which loads a process's
	// unwind tables), without being a source.
	Watchers []source.ProcessAttacher
	// LabelStackSetup labels each sample with what of the stack capture
	// was set up for its process (schema.StackSetupLabel): a diagnostic
	// for the stack tests, which splits series.
	LabelStackSetup bool
	Log             *slog.Logger
	Now             func() time.Time
}

// Daemon is the main loop.
type Daemon struct {
	cfg  Config
	srcs []*src
	sym  Symbolizer
	res  Resolver
	sink Sink

	mu         sync.Mutex // serialises Collect
	knownMu    sync.Mutex // rescans run beside Collect
	known      map[procfs.ID]bool
	lastLogged map[string]bool
	// settleq feeds the settlers that Run starts: the file reading of
	// processes Admit let in (see settle); nil before Run.
	settleq atomic.Pointer[chan procfs.ID]

	m metrics
}

// src is a source and what the daemon keeps for it.
type src struct {
	source.Source
	info   source.Info
	attach source.ProcessAttacher // nil unless the source is one
	// pending: profiled processes the attacher asked to retry; guarded by
	// knownMu.
	pending map[procfs.ID]bool
	start   time.Time // of the interval not drained yet; guarded by mu
}

// New returns a Daemon that profiles with sources.
func New(cfg Config, sources []source.Source, sym Symbolizer, res Resolver, sink Sink) *Daemon {
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
	d := &Daemon{cfg: cfg, sym: sym, res: res, sink: sink,
		known: map[procfs.ID]bool{}, lastLogged: map[string]bool{}, m: newMetrics()}
	start := cfg.Now()
	for _, s := range sources {
		st := &src{Source: s, info: s.Info(), pending: map[procfs.ID]bool{}, start: start}
		st.attach, _ = s.(source.ProcessAttacher)
		d.srcs = append(d.srcs, st)
	}
	return d
}

// Run collects every interval until ctx is done, then collects and writes
// the last, partial interval so a stop loses nothing.
func (d *Daemon) Run(ctx context.Context) error {
	tick := time.NewTicker(d.cfg.Interval)
	defer tick.Stop()
	settled := d.startSettlers(ctx)
	defer func() { <-settled }()
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
// known ones whose cache entries expired, and retries the attachers that
// asked for it.
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
		d.admit(p, full, false)
	}
}

// Admit attributes a live process that a probe met before any rescan did
// (the stack capture announces the processes it samples without state), and
// if the agent profiles it, does what a rescan does for a new one: tells the
// watchers at once, and once Run has started, leaves reading its symbols
// and handing it to the attaching sources to the settlers. It reports
// whether the process is profiled, without waiting for them.
func (d *Daemon) Admit(id procfs.ID) bool {
	p, ok := d.res.Cached(id)
	if !ok {
		var err error
		if p, err = d.res.Resolve(id.PID); err != nil {
			return false
		}
	}
	return p.ID == id && d.admit(p, false, true)
}

// Settling a process admitted on the probes' path: its symbols and the
// attaching sources. Two settlers, so that one interpreter's symbols (40 ms
// for python3.11 on a quiet host, ten times that under load) do not hold up
// the next job's; the queue bounds what a burst of new processes keeps
// waiting, and past it Admit settles inline, which slows the probes' reader
// rather than losing a process.
const (
	settlers    = 2
	settleQueue = 1024
)

// startSettlers starts the settlers; the channel it returns is closed
// once they have stopped, after ctx is done.
func (d *Daemon) startSettlers(ctx context.Context) <-chan struct{} {
	q := make(chan procfs.ID, settleQueue)
	d.settleq.Store(&q)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range settlers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case k := <-q:
					d.knownMu.Lock()
					live := d.known[k] // not forgotten as exited since
					d.knownMu.Unlock()
					if live {
						d.settle(k)
					}
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		d.settleq.Store(nil)
		close(done)
	}()
	return done
}

// admit handles one process a rescan (or Admit) attributed; full retries
// the attachers that asked for it. async hands the file reading to the
// settlers (Admit's callers are the probes' event reader: a new process's
// interpreter is set up for its frames there, and must not wait for
// another process's symbols).
func (d *Daemon) admit(p attribution.Process, full, async bool) bool {
	if p.Foreign || !(p.InJob() || d.cfg.AllProcesses) {
		return false
	}
	k := p.ID
	var retry []*src
	d.knownMu.Lock()
	seen := d.known[k]
	d.known[k] = true
	for _, s := range d.srcs {
		if full && s.pending[k] {
			retry = append(retry, s)
		}
	}
	d.knownMu.Unlock()
	if seen {
		for _, s := range retry {
			d.attachProcess(s, k)
		}
		return true
	}
	// The stack watchers first: they only queue the process, and its
	// samples keep their callers from the moment its unwind tables are
	// in, which must not wait for its symbols (40 ms for python3.11).
	for _, w := range d.cfg.Watchers {
		if _, err := w.AttachProcess(k); err != nil {
			d.logOnce("watch", "loading a process for stack capture failed", err)
		}
	}
	if q := d.settleq.Load(); async && q != nil {
		select {
		case *q <- k:
			return true
		default: // full: settle it here
		}
	}
	d.settle(k)
	return true
}

// settle reads a new profiled process's symbols and hands it to the
// attaching sources. Symbols are read while the process lives: by the time
// its interval is drained, a short task may be gone.
func (d *Daemon) settle(k procfs.ID) {
	d.sym.Prepare(k)
	for _, s := range d.srcs {
		if s.attach != nil {
			d.attachProcess(s, k)
		}
	}
}

// attachProcess hands a profiled process to a source that attaches to
// processes, and keeps it pending while the source asks to retry.
func (d *Daemon) attachProcess(s *src, k procfs.ID) {
	res, err := s.attach.AttachProcess(k)
	if err != nil {
		d.logOnce(s.info.Name+"_attach", "the "+s.info.Name+" source failed to attach to a process", err)
	}
	if res == source.AttachReload {
		// Same pid and start time, another program: its symbols may
		// have been read from the shell it was forked as.
		d.sym.Forget(k)
		d.sym.Prepare(k)
	}
	d.knownMu.Lock()
	defer d.knownMu.Unlock()
	if res == source.AttachRetry && d.known[k] { // not forgotten in the meantime
		s.pending[k] = true
	} else {
		delete(s.pending, k)
	}
}

// Collect drains every source and writes one profile per job and profile
// type. A source that fails to drain keeps its interval for the next
// Collect; the others are written, and the failure is returned.
func (d *Daemon) Collect(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	end := d.cfg.Now()
	var outs []Output
	var errs []error
	seen := map[procfs.ID]bool{}
	for _, s := range d.srcs {
		b, err := s.Drain()
		if err != nil {
			errs = append(errs, fmt.Errorf("draining the %s source: %w", s.info.Name, err))
			continue
		}
		if b.Warn != nil {
			d.logOnce(s.info.Name+"_drain", "draining the "+s.info.Name+" source", b.Warn)
		}
		builders := map[string]*jobProfile{}
		for i := range b.Samples {
			d.add(builders, s, &b.Samples[i])
			seen[b.Samples[i].Proc] = true
		}
		outs = d.finish(outs, builders, s.start, end)
		s.start = end
	}
	// After every source: a process seen by any of them stays known.
	d.forgetExited(seen)
	if len(outs) > 0 {
		if err := d.sink.Write(ctx, outs); err != nil {
			d.m.profiles.WithLabelValues("error").Add(float64(len(outs)))
			errs = append(errs, fmt.Errorf("writing profiles: %w", err))
		} else {
			d.m.profiles.WithLabelValues("ok").Add(float64(len(outs)))
		}
	}
	return errors.Join(errs...)
}

// add attributes, symbolises and adds one sample of source s.
func (d *Daemon) add(builders map[string]*jobProfile, s *src, smp *source.Sample) {
	count := float64(smp.Values[s.info.Counted])
	s.info.Drained.Add(count)
	jp := d.profileFor(builders, s, smp.Proc, count)
	if jp == nil {
		return
	}
	stack := append([]symbolize.Frame(nil), smp.Frames...)
	if len(smp.Kernel) > 0 {
		stack = append(stack, d.sym.Kernel(smp.Kernel)...)
	}
	if len(smp.User) > 0 || len(smp.Interp.Frames) > 0 {
		var user []symbolize.Frame
		if len(smp.User) > 0 {
			user = d.sym.User(smp.Proc, smp.User)
		}
		// The one place interpreter frames join the native ones,
		// whichever source captured them: each eval-loop frame becomes
		// the frames it ran.
		if len(smp.Interp.Frames) > 0 {
			user = interp.Splice(user, smp.Interp)
		}
		stack = append(stack, user...)
	}
	// The step is a sample label: one profile per job, while Pyroscope
	// still splits series by step.
	var sl []profiles.Label
	if st := jp.stepOf[smp.Proc]; st != "" {
		sl = append(sl, profiles.Label{Name: schema.JobStep.Label, Value: st})
	}
	sl = append(sl, smp.Labels...)
	if d.cfg.LabelStackSetup {
		sl = append(sl, profiles.Label{Name: schema.StackSetupLabel, Value: smp.Setup.String()})
	}
	jp.b.Add(stack, sl, smp.Values...)
}

// finish encodes the builders' profiles, in job order, onto outs.
func (d *Daemon) finish(outs []Output, builders map[string]*jobProfile, start, end time.Time) []Output {
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
			Labels: jp.labels, Start: start, End: end, Data: data})
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
	stepOf  map[procfs.ID]string
}

// profileFor attributes a sample of source s. A sample whose process
// cannot be attributed with certainty (it exited and its pid is gone or
// reused) is counted (count, in the source's Unattributed) and dropped,
// never guessed. builders holds profiles of s only.
func (d *Daemon) profileFor(builders map[string]*jobProfile, s *src, key procfs.ID, count float64) *jobProfile {
	unattr := s.info.Unattributed
	p, ok := d.res.Cached(key)
	if !ok {
		var err error
		p, err = d.res.Resolve(key.PID)
		if err != nil || p.ID != key {
			unattr.WithLabelValues("exited").Add(count)
			return nil
		}
	}
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
	// Known once profiled, not before: a process in no job yet (before
	// it joins, or is adopted) must still be admitted in full when it is.
	d.knownMu.Lock()
	d.known[key] = true
	d.knownMu.Unlock()
	jp := builders[bk]
	if jp == nil {
		jp = &jobProfile{typ: s.info.Type, b: profiles.NewBuilder(s.info.Type, s.info.Period, s.start),
			steps: map[string]bool{}, stepOf: map[procfs.ID]string{}}
		if p.InJob() {
			jp.jobID = p.Job.ID
		}
		jp.labels = p.Labels()
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

// forgetExited drops the symbolizer's and the attachers' state of
// processes that no longer run (and that no source drained a sample of).
func (d *Daemon) forgetExited(seen map[procfs.ID]bool) {
	d.knownMu.Lock()
	defer d.knownMu.Unlock()
	for k := range d.known {
		if seen[k] {
			continue
		}
		if p, ok := d.res.Cached(k); !ok || p.ID != k {
			d.sym.Forget(k)
			delete(d.known, k)
			for _, w := range d.cfg.Watchers {
				w.ForgetProcess(k)
			}
			for _, s := range d.srcs {
				if s.attach != nil {
					delete(s.pending, k)
					s.attach.ForgetProcess(k)
				}
			}
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

// Collectors returns the daemon's Prometheus collectors, with the sample
// counters of each source.
func (d *Daemon) Collectors() []prometheus.Collector {
	cs := d.m.all()
	for _, s := range d.srcs {
		cs = append(cs, s.info.Drained, s.info.Unattributed)
	}
	return cs
}
