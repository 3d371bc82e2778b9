package cli

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slurmscope/slurmscope/agent/daemon"
)

// firstInterval tells when the daemon has delivered its first interval,
// which makes the agent ready (/-/ready): its profile sources are loaded
// (the BPF programs attached) before the daemon exists, and then either a
// Write of the sinks succeeded, or an interval ended with nothing to write
// (an idle node: the daemon writes only intervals that made profiles).
//
// The daemon reads the clock once when made and once as each Collect
// begins, under its Collect lock; Collects do not overlap, so when one
// begins the previous one has ended, and whether it wrote is known.
type firstInterval struct {
	ready *atomic.Bool
	clock func() time.Time

	mu     sync.Mutex
	reads  int  // clock reads: New's, then one per Collect
	wrote  bool // the Collect under way wrote, or tried to
	failed bool // a Write failed: only a good one makes the agent ready
}

// now is the daemon's clock (daemon.Config.Now).
func (f *firstInterval) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	// A Collect begins and the previous one (reads > 2) ended without
	// writing: nothing was due, and its interval is delivered.
	if f.reads > 2 && !f.wrote && !f.failed {
		f.ready.Store(true)
	}
	f.wrote = false
	return f.clock()
}

// sink wraps the daemon's sinks.
func (f *firstInterval) sink(s daemon.Sink) daemon.Sink {
	return firstWrite{f: f, Sink: s}
}

type firstWrite struct {
	f *firstInterval
	daemon.Sink
}

func (w firstWrite) Write(ctx context.Context, outs []daemon.Output) error {
	err := w.Sink.Write(ctx, outs)
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	w.f.wrote = true
	if err == nil {
		w.f.ready.Store(true)
	} else {
		w.f.failed = true
	}
	return err
}

// Delivery passes what the sinks delivered on to the daemon's interval
// line (daemon.Reporter).
func (w firstWrite) Delivery() daemon.Delivery {
	d, _ := daemon.DeliveryOf(w.Sink)
	return d
}
