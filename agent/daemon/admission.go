package daemon

// Admission: which processes the daemon profiles, told to the stack
// watchers at once and settled (symbols read, attaching sources told) off
// the probes' path; and forgetting them once they are gone.

import (
	"context"
	"sync"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/source"
)

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
		d.logError("scan", "listing processes failed", err)
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
			d.logError("watch", "loading a process for stack capture failed", err)
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
		d.logError(s.info.Name+"_attach", "the "+s.info.Name+" source failed to attach to a process", err)
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
