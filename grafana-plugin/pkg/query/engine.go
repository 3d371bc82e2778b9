// Package query is slurmscope's query engine, shared by the Grafana
// datasource and the slurmscope CLI: a filter becomes disjoint selectors,
// a range longer than Pyroscope accepts becomes time chunks, each selector
// and chunk one backend call (made concurrently, at most MaxCalls of
// them), and the answers are summed, which merges a job across its nodes
// and its lifetime exactly.
//
// This file holds the engine, its backends and its fan-out under the call
// budget; scope.go the ownership narrowing; each query family has a file
// of its own (flamegraph, series, metrics, values, top, usage, offcpu,
// job, diff, ranks).
package query

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/schema"
)

// CPUProfileType is what the agent pushes for CPU time.
var CPUProfileType = schema.ProcessCPU.ID()

// Profiles is the part of Pyroscope the engine uses. Start and end are
// Pyroscope's: milliseconds, both inclusive (see plan.go).
type Profiles interface {
	MergeStacktraces(ctx context.Context, profileType, selector string, start, end time.Time, maxNodes int64) (*querierv1.FlameGraph, error)
	Diff(ctx context.Context, profileType string, left, right backends.Selection, maxNodes int64) (*querierv1.FlameGraphDiff, error)
	SelectSeries(ctx context.Context, profileType, selector string, groupBy []string, start, end time.Time, step time.Duration) ([]*typesv1.Series, error)
	ProfileTypes(ctx context.Context, start, end time.Time) ([]*typesv1.ProfileType, error)
}

// Metrics is the part of Prometheus the engine uses.
type Metrics interface {
	QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]backends.PromSeries, error)
	Query(ctx context.Context, expr string, at time.Time) ([]backends.PromSeries, error)
	LabelValues(ctx context.Context, label string, selectors []string, start, end time.Time) ([]string, error)
}

// Engine answers slurmscope's questions. A nil backend is one that is not
// configured: queries that need it fail with ErrNoPyroscope/ErrNoPrometheus.
type Engine struct {
	Profiles Profiles
	Metrics  Metrics
	// Parallel bounds concurrent backend calls of one query; 0 means
	// DefaultParallel.
	Parallel int
	// MaxQueryLength is Pyroscope's max_query_length: longer ranges are
	// split into chunks. 0 means DefaultMaxQueryLength; under a second,
	// a second.
	MaxQueryLength time.Duration
	// MaxCalls caps the Pyroscope calls of one query (selectors × time
	// chunks, per profile type); 0 means DefaultMaxCalls.
	MaxCalls int
	// Thresholds judge findings; zero fields take findings.Defaults.
	Thresholds findings.Thresholds
}

// The engine's defaults: Pyroscope's max_query_length, and a fan-out that
// a 256-selector filter over a day fits, or a 64-selector one over a week.
const (
	DefaultParallel       = 8
	DefaultMaxQueryLength = 24 * time.Hour
	DefaultMaxCalls       = 1024
)

// ErrTooManyCalls is wrapped by the error of a query that would need more
// backend calls than MaxCalls.
var ErrTooManyCalls = errors.New("too many backend calls")

var (
	ErrNoPyroscope  = errors.New("no Pyroscope URL is configured")
	ErrNoPrometheus = errors.New("no Prometheus URL is configured")
)

// Range is a query's time range and resolution.
type Range struct {
	From, To time.Time
	Step     time.Duration
}

func (e *Engine) parallel() int {
	if e.Parallel > 0 {
		return e.Parallel
	}
	return DefaultParallel
}

func (e *Engine) maxQueryLength() time.Duration {
	if e.MaxQueryLength <= 0 {
		return DefaultMaxQueryLength
	}
	return max(e.MaxQueryLength, time.Second)
}

func (e *Engine) maxCalls() int {
	if e.MaxCalls > 0 {
		return e.MaxCalls
	}
	return DefaultMaxCalls
}

// budget refuses, before anything is sent, a query whose selectors ×
// chunks (× profile types) exceed MaxCalls.
func (e *Engine) budget(sels, chunks, types int) error {
	what := fmt.Sprintf("%d selector(s) × %d time chunk(s)", sels, chunks)
	if types > 1 {
		what += fmt.Sprintf(" × %d profile type(s)", types)
	}
	return e.allow(sels*chunks*types, what)
}

// allow refuses, before anything is sent, n calls over MaxCalls; what
// says how the query came to need them.
func (e *Engine) allow(n int, what string) error {
	if n <= e.maxCalls() {
		return nil
	}
	return fmt.Errorf("%w: this query needs %d Pyroscope calls (%s of at most %s), over the limit of %d per query: "+
		"narrow the filter or the time range, or raise maxCallsPerQuery in the datasource settings",
		ErrTooManyCalls, n, what, e.maxQueryLength(), e.maxCalls())
}

// fan runs fn(0..n-1), at most Parallel at a time, and returns the first
// error, cancelling the calls still running.
func (e *Engine) fan(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, e.parallel())
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}
