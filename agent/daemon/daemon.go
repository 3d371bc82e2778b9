// Package daemon is the agent's main loop: every interval it drains each
// profile source (agent/source), attributes each process's samples to its
// SLURM job, symbolises the stacks and hands one pprof profile per job and
// profile type to a Sink (a delivery backend: files on disk, the Pyroscope
// spool). It does not know which sources or backends it runs.
package daemon

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/logx"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/symbolize"
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
	// RankLabels labels each sample of a job's process with its task:
	// global rank, local task id and node index (schema.TaskRank,
	// TaskLocalID, NodeIndex), each where known. They split a job's
	// profile series by rank.
	RankLabels bool
	Log        *slog.Logger
	Now        func() time.Time
}

// Daemon is the main loop.
type Daemon struct {
	cfg  Config
	srcs []*src
	sym  Symbolizer
	res  Resolver
	sink Sink

	mu      sync.Mutex // serialises Collect
	knownMu sync.Mutex // rescans run beside Collect
	known   map[procfs.ID]bool
	// limit logs errors when new, then now and then with their count.
	limit *logx.Limiter
	// lastDelivery is the sinks' at the last interval line; guarded by mu.
	lastDelivery Delivery
	// settleq feeds the settlers that Run starts: the file reading of
	// processes Admit let in (see settle); nil before Run.
	settleq atomic.Pointer[chan procfs.ID]
	// delivered is the end of the last interval whose profiles the sink
	// took (or that made none), in Unix nanoseconds; 0 before the first.
	delivered atomic.Int64

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
		known: map[procfs.ID]bool{}, limit: newLimiter(cfg.Log), m: newMetrics()}
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
				d.logError("collect", "interval failed", err)
			} else {
				d.limit.OK("collect", "intervals delivered again")
			}
		}
	}
}

// logError counts an error under key (the stage label of the error
// counter) and logs it when new, then at most every few minutes with how
// often it came back (logx.Limiter).
func (d *Daemon) logError(key, msg string, err error) {
	d.m.errors.WithLabelValues(key).Inc()
	d.limit.Warn(key, msg, err)
}

// LastInterval returns the end of the last interval the daemon delivered:
// its profiles taken by the sink, or none due; false before the first.
// The agent's heartbeat (schema.AgentLastInterval) reads it.
func (d *Daemon) LastInterval() (time.Time, bool) {
	ns := d.delivered.Load()
	if ns == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
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
