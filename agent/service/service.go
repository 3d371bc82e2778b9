// Package service is the contract between the agent's run command and what
// runs beside its profile sources: the metric collectors (NVML, the jobs'
// cgroups), the delivery backends (Pyroscope, the output directory, remote
// write) and the /metrics server.
//
// Each is a Kind: its flags, their check, and how to open it. agent/cli
// lists the kinds it runs, one line each, and runs what they open as a
// Group. A new delivery backend or collector is one package that implements
// Kind and Service, and that line.
package service

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Env is what the agent gives a service it opens.
type Env struct {
	// Jobs attributes processes to jobs; HostName is this node's
	// host_name.
	Jobs     *attribution.Resolver
	HostName string
	Proc     procfs.FS
	// Reg takes the service's own metrics. Gatherer is the registry the
	// agent serves on /metrics and remote-writes.
	Reg      prometheus.Registerer
	Gatherer prometheus.Gatherer
	Log      *slog.Logger
}

// Kind is something the agent can run beside its profile sources.
type Kind interface {
	Flags(fs *flag.FlagSet)
	// Check validates the parsed flags before anything starts.
	Check() error
	// Open prepares the service as the flags ask (registers its metrics,
	// opens its spool, listens), or returns nil when they turn it off.
	// Nothing of it runs before Run.
	Open(env Env) (Service, error)
}

// Service is what a Kind opened. One that takes profiles also implements
// daemon.Sink; one that implements io.Closer is closed once it stopped.
type Service interface {
	// Run works until ctx is done, then finishes in a bounded time (a
	// last poll or gather, a flush of its spool) and returns. An error
	// says it stopped: the agent goes on without it.
	Run(ctx context.Context) error
}

// Fallback is a Kind that, left off by its flags, still opens when no other
// kind of its list opened anything: the output directory, where profiles
// go when no backend is set.
type Fallback interface {
	Kind
	OpenFallback(env Env) (Service, error)
}

// Group is what a list of kinds opened, run and stopped together.
type Group struct {
	log      *slog.Logger
	svcs     []Service
	runs     []*running
	stopped  bool
	stopErrs error
}

type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Open opens every kind in order, then, if none opened anything, the first
// Fallback kind at its defaults. On an error it closes what it opened.
func Open(kinds []Kind, env Env) (*Group, error) {
	g := &Group{log: env.Log}
	if g.log == nil {
		g.log = slog.Default()
	}
	open := func(f func() (Service, error)) error {
		s, err := f()
		if err != nil {
			g.Stop()
			return err
		}
		if s != nil {
			g.svcs = append(g.svcs, s)
		}
		return nil
	}
	for _, k := range kinds {
		if err := open(func() (Service, error) { return k.Open(env) }); err != nil {
			return nil, err
		}
	}
	for _, k := range kinds {
		if fb, ok := k.(Fallback); ok && len(g.svcs) == 0 {
			if err := open(func() (Service, error) { return fb.OpenFallback(env) }); err != nil {
				return nil, err
			}
			break
		}
	}
	return g, nil
}

// Services are what the kinds opened, in their order.
func (g *Group) Services() []Service { return g.svcs }

// Start runs every service on a goroutine of its own. A service that stops
// before Stop asks is logged then.
func (g *Group) Start() {
	if g.runs != nil || g.stopped {
		return
	}
	for _, s := range g.svcs {
		ctx, cancel := context.WithCancel(context.Background())
		r := &running{cancel: cancel, done: make(chan struct{})}
		g.runs = append(g.runs, r)
		go func() {
			defer close(r.done)
			r.err = s.Run(ctx)
			if errors.Is(r.err, context.Canceled) {
				r.err = nil
			}
			if r.err != nil && ctx.Err() == nil {
				g.log.Error("stopped early; the agent goes on without it", "err", r.err)
			}
		}()
	}
}

// Stop stops the services in reverse order, each once the one after it
// has returned, and closes each once it has (a failed Close is logged).
// It returns the errors their Run returned. Services that never ran are
// only closed. Later calls return the same.
func (g *Group) Stop() error {
	if g.stopped {
		return g.stopErrs
	}
	g.stopped = true
	var errs []error
	for i := len(g.svcs) - 1; i >= 0; i-- {
		if i < len(g.runs) {
			r := g.runs[i]
			r.cancel()
			<-r.done
			errs = append(errs, r.err)
		}
		if c, ok := g.svcs[i].(io.Closer); ok {
			if err := c.Close(); err != nil {
				g.log.Warn("closing", "err", err)
			}
		}
	}
	g.stopErrs = errors.Join(errs...)
	return g.stopErrs
}
