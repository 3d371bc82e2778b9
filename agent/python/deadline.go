package python

import (
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// A read of a job's memory or files may never return: a page on the job's
// own FUSE mount waits for a daemon the job runs, and no flag of
// process_vm_readv avoids the fault. The gate runs each batch of one job's
// reads (one set-up, one stack's code objects) in a goroutine of its own,
// one batch per job at a time, and waits for it at most a deadline. A
// batch past its deadline is left parked in the kernel, and the job's
// reads are refused at once until it returns: a stuck job costs one
// goroutine and one deadline, never the tracker's progress or its lock.
// That thread may not end when the agent exits: FUSE waits for its daemon
// uninterruptibly once the daemon has the request. So the gate is the
// bound, not the defence: reads touch only resident pages of anonymous
// memory and the interpreter's data (readable.go, memory.go), which leaves
// a race between that check and the read.

// DefaultReadTimeout is how long one batch of a job's reads may take.
// Reads of resident memory take microseconds; a page the kernel must
// fetch from a local disk, milliseconds.
const DefaultReadTimeout = time.Second

// errStalled: the job's reads did not finish within the deadline;
// errStuck: they are refused while an earlier batch of them is stuck (or
// busy past the deadline).
var (
	errStalled = fmt.Errorf("python: %w", procfs.ErrStalled)
	errStuck   = fmt.Errorf("python: refused, an earlier read is stuck: %w", procfs.ErrStalled)
)

// panicError is a panic in a batch of reads, with its stack.
type panicError struct {
	v     any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic reading a process: %v", p.v) }

// gate runs batches of reads, one at a time per key (a job), each within
// a deadline.
type gate struct {
	timeout time.Duration

	mu      sync.Mutex
	lanes   map[string]*lane
	stalls  uint64 // batches that passed their deadline
	refused uint64 // batches not run: the job's lane stuck, or busy past the deadline
}

// lane is one key's: the token its batch in flight holds.
type lane struct {
	token chan struct{}
	stuck bool
	users int
}

// run runs fn, which must touch only what it owns (it may still run after
// run returns), and waits for it until the deadline. errStalled: fn did
// not finish in time; errStuck: fn was not run, because the key's lane is
// stuck or stayed busy until the deadline. A panic in fn comes back as a
// *panicError.
func (g *gate) run(key string, fn func()) error {
	g.mu.Lock()
	if g.lanes == nil {
		g.lanes = map[string]*lane{}
	}
	ln := g.lanes[key]
	if ln == nil {
		ln = &lane{token: make(chan struct{}, 1)}
		g.lanes[key] = ln
	}
	if ln.stuck {
		g.refused++
		g.mu.Unlock()
		return errStuck
	}
	ln.users++
	g.mu.Unlock()

	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	select {
	case ln.token <- struct{}{}:
	case <-timer.C:
		g.mu.Lock()
		g.refused++
		g.leave(key, ln)
		g.mu.Unlock()
		return errStuck
	}
	done := make(chan *panicError, 1)
	go func() {
		defer func() {
			var pe *panicError
			if v := recover(); v != nil {
				pe = &panicError{v: v, stack: debug.Stack()}
			}
			done <- pe
		}()
		fn()
	}()
	select {
	case pe := <-done:
		<-ln.token
		g.mu.Lock()
		g.leave(key, ln)
		g.mu.Unlock()
		if pe != nil {
			return pe
		}
		return nil
	case <-timer.C:
	}
	g.mu.Lock()
	ln.stuck = true
	g.stalls++
	g.mu.Unlock()
	go func() {
		<-done
		<-ln.token
		g.mu.Lock()
		ln.stuck = false
		g.leave(key, ln)
		g.mu.Unlock()
	}()
	return errStalled
}

// leave drops one user of a lane; g.mu held.
func (g *gate) leave(key string, ln *lane) {
	if ln.users--; ln.users == 0 && !ln.stuck {
		delete(g.lanes, key)
	}
}

// gateStats: batches past their deadline, batches refused, lanes stuck now.
type gateStats struct {
	stalls, refused uint64
	stuck           int
}

func (g *gate) stats() gateStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := gateStats{stalls: g.stalls, refused: g.refused}
	for _, ln := range g.lanes {
		if ln.stuck {
			s.stuck++
		}
	}
	return s
}
