package stackwalk

import (
	"errors"
	"io/fs"
	"sync"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// lifecycle decides, for each process the capture hears of, whether the
// agent profiles it (admission), when its tables are loaded (queueing,
// with one sync a second per process and a backoff for unknown code),
// that one process's syncs never overlap (dedup), and when an exited
// process is unloaded (sweep). It does no I/O and reads no clock: the
// Walker feeds it what it read (events, the result of a sync, whether a
// process still runs) with the time, and carries out what it returns.
type lifecycle struct {
	// profiled is the admission decision (Options.Profiled); it is called
	// without the lock held, and must not read the process's files.
	profiled  func(procfs.ID) bool
	tables    bool // native tables are loaded: syncs are queued
	exitGrace time.Duration

	mu         sync.Mutex
	procs      map[int]*proc
	notProfile map[int]declinedImage // negative decisions by pid
	// declined holds the last announce of each process found not
	// profiled, so that a process the daemon admits later (adopted into a
	// job) is looked at without waiting for its next announce.
	declined map[int]procEvent
	// syncing holds the pids a syncer is loading; a non-nil value is a
	// sync asked meanwhile, for that syncer to run next.
	syncing map[int]*procfs.ID
	m       counters
}

// procEvent is a stack_event (stack.h) as the lifecycle reads it.
type procEvent struct {
	id      procfs.ID
	startNs uint64 // the leader's start_boottime, ns
	mm      uint64
	flags   uint32 // bpf.Event*
	// A fork (bpf.EventFork): the parent whose interpreter entry the
	// child was given, and that interpreter.
	parent        procfs.ID
	parentStartNs uint64
	kind          uint32
}

// image is a process running one program: a process that exec's (a job's
// shell exec'ing its program after slurmstepd placed it) is asked again.
type image struct {
	id procfs.ID
	mm uint64
}

// declinedImage is a decision that an image is not profiled, until.
type declinedImage struct {
	img   image
	until time.Time
}

// proc is what the lifecycle keeps of a profiled process.
type proc struct {
	id       procfs.ID
	pending  bool      // in the sync queue
	synced   bool      // loaded at least once
	lastSync time.Time // when a sync was last queued
	// syncMM is the address space (mm) of the announce that last queued a
	// sync: an announce of another one (an exec since) queues at once.
	syncMM     uint64
	backoff    time.Duration
	nextResync time.Time
	dead       time.Time // when it was found gone; zero while it runs
}

type counters struct {
	syncs, syncErrors, announces, forks uint64
}

// Timing of the lifecycle.
const (
	announceSync  = time.Second            // between syncs asked by announces
	unknownTick   = 250 * time.Millisecond // the first backoff of unknown frames
	maxBackoff    = 30 * time.Second       // between syncs asked by unknown frames
	notProfileTTL = 5 * time.Second
	maxNotProfile = 1 << 16
)

// errStale marks a sync that did not run: the pid names another process
// now. It is not counted.
var errStale = errors.New("pid reused since the sync was asked")

func newLifecycle(profiled func(procfs.ID) bool, tables bool, exitGrace time.Duration) *lifecycle {
	return &lifecycle{profiled: profiled, tables: tables, exitGrace: exitGrace,
		procs: map[int]*proc{}, notProfile: map[int]declinedImage{}, declined: map[int]procEvent{}, syncing: map[int]*procfs.ID{}}
}

// procLocked returns the record of id, replacing that of an earlier
// process with the same pid.
func (l *lifecycle) procLocked(id procfs.ID) *proc {
	p := l.procs[id.PID]
	if p == nil || p.id != id {
		p = &proc{id: id}
		l.procs[id.PID] = p
	}
	return p
}

func (l *lifecycle) matchLocked(id procfs.ID) *proc {
	if p := l.procs[id.PID]; p != nil && p.id == id {
		return p
	}
	return nil
}

// admit reports (and caches) whether id, running the image mm, is
// profiled: asked of profiled once per image, a no believed for
// notProfileTTL.
func (l *lifecycle) admit(id procfs.ID, mm uint64, now time.Time) bool {
	l.mu.Lock()
	if l.matchLocked(id) != nil {
		l.mu.Unlock()
		return true
	}
	key := image{id, mm}
	if d, ok := l.notProfile[id.PID]; ok && d.img == key && now.Before(d.until) {
		l.mu.Unlock()
		return false
	}
	l.mu.Unlock()
	ok := l.profiled == nil || l.profiled(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok {
		l.procLocked(id)
		delete(l.notProfile, id.PID)
	} else {
		if len(l.notProfile) >= maxNotProfile {
			clear(l.notProfile)
		}
		l.notProfile[id.PID] = declinedImage{key, now.Add(notProfileTTL)}
	}
	return ok
}

// announced handles an announce (not a fork) of a process the capture
// sampled without state for it. It reports whether to queue a sync of its
// tables and whether to hand it to the interpreters.
func (l *lifecycle) announced(ev procEvent, now time.Time) (sync, interpreters bool) {
	if ev.mm == 0 {
		return false, false // an exiting task (the BPF side does not send these)
	}
	if !l.admit(ev.id, ev.mm, now) {
		l.mu.Lock()
		if len(l.declined) >= maxNotProfile {
			clear(l.declined)
		}
		l.declined[ev.id.PID] = ev
		l.mu.Unlock()
		return false, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m.announces++
	p := l.procLocked(ev.id)
	// No tables in BPF: new, or exec'd since it was loaded. An exec within
	// the second (a job's fork, then exec of its program) must not wait
	// out the limit: its first image's tables are of no use, and a short
	// program would run its whole life unloaded.
	if ev.flags&eventNoTables != 0 && l.tables && !p.pending && (now.Sub(p.lastSync) >= announceSync || ev.mm != p.syncMM) {
		p.pending, p.lastSync, p.syncMM, sync = true, now, ev.mm, true
	}
	return sync, ev.flags&eventNoInterp != 0
}

// forked admits a forked child that an interpreter set up from its parent
// (known): such a child is never announced by a probe, and a short-lived
// worker's samples would find it gone at the drain and be lost as exited.
// Only such a child: any other fork (slurmstepd's, before it execs the
// task) would be attributed from what it is before its exec, root and no
// job environment.
func (l *lifecycle) forked(ev procEvent, known bool) {
	if !known || ev.mm == 0 {
		return
	}
	if l.profiled != nil {
		l.profiled(ev.id)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.procLocked(ev.id)
	l.m.forks++
}

// attach handles a process the daemon found in a rescan (loaded: its
// tables are in already). It reports whether to queue a sync, and the
// announce to act on now if the process was declined when announced.
func (l *lifecycle) attach(id procfs.ID, loaded bool, now time.Time) (sync bool, replay *procEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.procLocked(id)
	if l.tables && !loaded && !p.pending {
		p.pending, p.lastSync, sync = true, now, true
	}
	ev, ok := l.declined[id.PID]
	delete(l.declined, id.PID)
	delete(l.notProfile, id.PID)
	if ok && ev.id == id {
		replay = &ev
	}
	return sync, replay
}

// forget drops a process the daemon forgot (it exited and its samples
// are drained).
func (l *lifecycle) forget(id procfs.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.matchLocked(id) != nil {
		delete(l.procs, id.PID)
	}
}

// dropped undoes the queueing of a sync that found the queue full: the
// process is asked again by its next announce, rescan or unknown frames.
func (l *lifecycle) dropped(id procfs.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.matchLocked(id); p != nil {
		p.pending = false
	}
	l.m.syncErrors++
}

// claim gives a syncer the sync of id, unless another syncer is loading
// the same pid: then that one runs it next, and claim reports false.
func (l *lifecycle) claim(id procfs.ID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, busy := l.syncing[id.PID]; busy {
		l.syncing[id.PID] = &id
		return false
	}
	l.syncing[id.PID] = nil
	if p := l.matchLocked(id); p != nil {
		p.pending = false
	}
	return true
}

// synced records the end of a claimed sync of id: whether it loaded new
// code, and its error (errStale: it did not run). It reports whether the
// process's tables are loaded now, whether that is their first load, and
// the sync to run next for the same pid (asked while this one ran).
func (l *lifecycle) synced(id procfs.ID, changed bool, err error, now time.Time) (loaded, first bool, again *procfs.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !errors.Is(err, errStale) {
		l.m.syncs++
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, procfs.ErrGone) {
			l.m.syncErrors++
		}
		if p := l.matchLocked(id); p != nil && err == nil {
			loaded, first, p.synced = true, !p.synced, true
			if changed {
				// New code was loaded: the process is still mapping its
				// libraries (a Python program's imports: ctypes's libffi
				// seconds in), and its next unknown frames are more of
				// it, not JIT code no table covers. The backoff is for
				// those.
				p.backoff, p.nextResync = 0, time.Time{}
			}
		}
	}
	again = l.syncing[id.PID]
	if again == nil {
		delete(l.syncing, id.PID)
		return loaded, first, nil
	}
	l.syncing[id.PID] = nil
	if p := l.matchLocked(*again); p != nil {
		p.pending = false
	}
	return loaded, first, again
}

// unknown handles the processes whose walks met code in no loaded
// mapping: each is synced again, with a backoff that doubles up to
// maxBackoff (JIT code that no table will ever cover).
func (l *lifecycle) unknown(pids []int, now time.Time) []procfs.ID {
	l.mu.Lock()
	defer l.mu.Unlock()
	var queue []procfs.ID
	for _, pid := range pids {
		p := l.procs[pid]
		if p != nil && !p.pending && !now.Before(p.nextResync) {
			p.backoff = min(max(2*p.backoff, unknownTick), maxBackoff)
			p.nextResync = now.Add(p.backoff)
			p.pending, p.lastSync = true, now
			queue = append(queue, p.id)
		}
	}
	return queue
}

// known lists the processes the lifecycle holds, for the sweep to check.
func (l *lifecycle) known() []procfs.ID {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]procfs.ID, 0, len(l.procs))
	for _, p := range l.procs {
		out = append(out, p.id)
	}
	return out
}

// live returns the processes not found gone yet: the ones the sweep
// reads. One found gone is not read again; expired ends it.
func (l *lifecycle) live() []procfs.ID {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]procfs.ID, 0, len(l.procs))
	for _, p := range l.procs {
		if p.dead.IsZero() {
			out = append(out, p.id)
		}
	}
	return out
}

// expired forgets the processes found gone an exit grace ago and returns
// them, for their interpreter state to go.
func (l *lifecycle) expired(now time.Time) []procfs.ID {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []procfs.ID
	for pid, p := range l.procs {
		if !p.dead.IsZero() && now.Sub(p.dead) >= l.exitGrace {
			delete(l.procs, pid)
			out = append(out, p.id)
		}
	}
	return out
}

// gone handles a process the sweep found gone: its tables go at once
// (they serve only live processes), its interpreter state after the exit
// grace, for the samples still to be drained. It reports what to unload.
func (l *lifecycle) gone(id procfs.ID, now time.Time) (unloadTables, forget bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.matchLocked(id)
	if p == nil {
		return false, false
	}
	first := p.dead.IsZero()
	if first {
		p.dead = now
	}
	expired := now.Sub(p.dead) >= l.exitGrace
	if expired {
		delete(l.procs, id.PID)
	}
	return first || expired, expired
}

// counters returns a copy of the counters.
func (l *lifecycle) counters() counters {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m
}
