package procfs

import (
	"errors"
	"sync"
	"time"
)

// A file a job controls can live on a file system that never answers: a
// FUSE daemon the job runs (or stopped), a hung NFS mount. Open's O_PATH
// and O_NONBLOCK keep FIFOs and devices from blocking, but a lookup, fstat
// or read on such a file system waits in the kernel for as long as its
// server likes, and no flag shortens that. Reading /proc/<pid>/maps can
// wait too, on the mmap lock of a process stuck in such a fault.
//
// Guard bounds what that costs the other jobs: the I/O runs in its own
// goroutine, and the caller waits for it as long as it makes progress (it
// reports each read), but no more than Timeout without any. A stuck call is
// left to finish (or not) on its own; until it does, further I/O of the
// same key (the job) is refused at once, so one job's hung file system
// holds one goroutine and delays the agent once, by Timeout. Not every such
// wait ends when the agent exits: FUSE waits for its daemon uninterruptibly
// once the daemon has taken the request, so a stuck thread holds up the
// agent's exit until the daemon answers or dies (or the node's
// fs.fuse.max_request_timeout aborts the connection). Avoiding the stall
// (reading only what no such file backs) is the defence; the guard is the
// bound on what is left.

// ErrStalled is returned for I/O that did not finish within the guard's
// timeout, and for I/O refused while an earlier call of the same key is
// still stuck.
var ErrStalled = errors.New("file system did not answer in time")

// DefaultIOTimeout is how long a job's file I/O may take before its caller
// moves on.
const DefaultIOTimeout = 2 * time.Second

// Guard runs a job's file I/O with a deadline. The zero value waits
// DefaultIOTimeout; a nil Guard runs fn in line.
type Guard struct {
	Timeout time.Duration

	mu      sync.Mutex
	stuck   map[string]int
	stalls  uint64
	refused uint64
}

// Do runs fn, which must touch nothing but what it owns (it may still be
// running after Do returns), and waits for it while it calls progress at
// least once per timeout: a large file being read and parsed is not a
// stalled one. It returns ErrStalled when fn went a timeout without
// progress, or when an earlier fn of key is still running past its own
// deadline (then fn is not run). A panic in fn that finished in time is
// re-raised in the caller.
func (g *Guard) Do(key string, fn func(progress func())) error {
	if g == nil {
		fn(func() {})
		return nil
	}
	g.mu.Lock()
	if g.stuck[key] > 0 {
		g.refused++
		g.mu.Unlock()
		return ErrStalled
	}
	g.mu.Unlock()
	done := make(chan any, 1)
	moved := make(chan struct{}, 1)
	progress := func() {
		select {
		case moved <- struct{}{}:
		default:
		}
	}
	go func() {
		defer func() { done <- recover() }()
		fn(progress)
	}()
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = DefaultIOTimeout
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
wait:
	for {
		select {
		case p := <-done:
			if p != nil {
				panic(p)
			}
			return nil
		case <-moved:
			t.Reset(timeout)
		case <-t.C:
			break wait
		}
	}
	g.mu.Lock()
	if g.stuck == nil {
		g.stuck = map[string]int{}
	}
	g.stuck[key]++
	g.stalls++
	g.mu.Unlock()
	go func() {
		<-done
		g.mu.Lock()
		if g.stuck[key]--; g.stuck[key] <= 0 {
			delete(g.stuck, key)
		}
		g.mu.Unlock()
	}()
	return ErrStalled
}

// GuardStats counts calls that timed out, calls refused while their key
// was stuck, and the keys stuck now.
type GuardStats struct {
	Stalls, Refused uint64
	Stuck           int
}

// Stats returns the guard's counters.
func (g *Guard) Stats() GuardStats {
	if g == nil {
		return GuardStats{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return GuardStats{Stalls: g.stalls, Refused: g.refused, Stuck: len(g.stuck)}
}
