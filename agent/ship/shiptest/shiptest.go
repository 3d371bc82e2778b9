// Package shiptest holds what tests of a ship.Shipper share.
package shiptest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/spool"
)

// Delays stands in for the shipper's timer (ship.Options.After): it fires at
// once and records each delay asked for, so that a test checks the backoff
// and Retry-After the shipper chose instead of measuring them.
type Delays struct {
	mu sync.Mutex
	d  []time.Duration
}

// After is the timer.
func (r *Delays) After(d time.Duration) <-chan time.Time {
	r.mu.Lock()
	r.d = append(r.d, d)
	r.mu.Unlock()
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

// Got returns the delays asked for so far, in order.
func (r *Delays) Got() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.d...)
}

// RequireHeld fails t unless the spool in dir is open: a backend that
// spools there holds it as its one reader.
func RequireHeld(t testing.TB, dir string) {
	t.Helper()
	sp, err := spool.Open(dir, 1<<20)
	if err == nil {
		sp.Close()
	}
	if !errors.Is(err, spool.ErrLocked) {
		t.Fatalf("opening %s beside its backend: %v, want spool.ErrLocked", dir, err)
	}
}
