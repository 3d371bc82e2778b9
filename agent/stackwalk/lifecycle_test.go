package stackwalk

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// admissions is a fake Profiled: the daemon's answer per pid, and what it
// was asked.
type admissions struct {
	mu     sync.Mutex
	yes    map[int]bool
	asked  []procfs.ID
	before func(procfs.ID) // runs at each question, before the answer
}

func (a *admissions) profiled(id procfs.ID) bool {
	if a.before != nil {
		a.before(id)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, id)
	return a.yes[id.PID]
}

func (a *admissions) count() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.asked) }

var t0 = time.Unix(1000, 0)

func pid(n int) procfs.ID { return procfs.ID{PID: n, Start: 700} }

func announce(id procfs.ID, mm uint64, flags uint32) procEvent {
	return procEvent{id: id, startNs: 7e9, mm: mm, flags: flags}
}

func forkOf(child, parent procfs.ID) procEvent {
	return procEvent{id: child, startNs: 8e9, mm: 0xc, flags: eventFork, parent: parent, parentStartNs: 7e9, kind: 1}
}

func newTestLifecycle(a *admissions) *lifecycle {
	return newLifecycle(a.profiled, true, 2*time.Minute)
}

const both = eventNoTables | eventNoInterp

func TestLifecycleAnnounce(t *testing.T) {
	a := &admissions{yes: map[int]bool{10: true}}
	l := newTestLifecycle(a)
	sync, interps := l.announced(announce(pid(10), 0xa, both), t0)
	if !sync || !interps {
		t.Fatalf("a new profiled process: sync %v, interpreters %v; want both", sync, interps)
	}
	// Announced again within the second while its sync is queued: nothing
	// more, and the daemon is not asked again.
	if sync, _ := l.announced(announce(pid(10), 0xa, both), t0.Add(100*time.Millisecond)); sync {
		t.Error("a second sync queued while the first is pending")
	}
	if a.count() != 1 {
		t.Errorf("Profiled asked %d times, want 1", a.count())
	}
	// Synced: a later announce within the second (its tables not in BPF
	// yet) waits; after the second it queues again.
	if !l.claim(pid(10)) {
		t.Fatal("claim refused")
	}
	if loaded, first, again := l.synced(pid(10), true, nil, t0.Add(200*time.Millisecond)); !loaded || !first || again != nil {
		t.Fatalf("synced: loaded %v first %v again %v", loaded, first, again)
	}
	if sync, _ := l.announced(announce(pid(10), 0xa, eventNoTables), t0.Add(500*time.Millisecond)); sync {
		t.Error("synced again within the second of the last sync")
	}
	if sync, interps := l.announced(announce(pid(10), 0xa, eventNoTables), t0.Add(1100*time.Millisecond)); !sync || interps {
		t.Errorf("after the second: sync %v (want true), interpreters %v (want false: tables only)", sync, interps)
	}
	// Only the interpreters asked: no sync.
	l.claim(pid(10))
	l.synced(pid(10), false, nil, t0.Add(1200*time.Millisecond))
	if sync, interps := l.announced(announce(pid(10), 0xa, eventNoInterp), t0.Add(3*time.Second)); sync || !interps {
		t.Errorf("interpreter announce: sync %v interpreters %v", sync, interps)
	}
}

// An exec within the second (a job's fork, then the exec of its program)
// queues at once: the first image's tables are of no use.
func TestLifecycleExecQueuesAtOnce(t *testing.T) {
	a := &admissions{yes: map[int]bool{10: true}}
	l := newTestLifecycle(a)
	l.announced(announce(pid(10), 0xa, both), t0)
	l.claim(pid(10))
	l.synced(pid(10), true, nil, t0.Add(10*time.Millisecond))
	if sync, _ := l.announced(announce(pid(10), 0xb, both), t0.Add(20*time.Millisecond)); !sync {
		t.Error("the exec'd image was not queued")
	}
}

// A fork whose parent has no interpreter state (slurmstepd forking a task,
// a shell) is not admitted at its fork: the child is still its parent until
// it execs (root, no job environment), and would be attributed as that. A
// known parent's child is admitted at once, before any probe announces it.
func TestLifecycleForks(t *testing.T) {
	a := &admissions{yes: map[int]bool{20: true, 21: true}}
	l := newTestLifecycle(a)
	l.forked(forkOf(pid(20), pid(1)), false)
	if a.count() != 0 || len(l.known()) != 0 {
		t.Fatalf("an unknown parent's fork: asked %v, known %v", a.asked, l.known())
	}
	l.forked(forkOf(pid(21), pid(1)), true)
	if a.count() != 1 || len(l.known()) != 1 || l.counters().forks != 1 {
		t.Fatalf("a known parent's fork: asked %v, known %v, forks %d", a.asked, l.known(), l.counters().forks)
	}
}

// A process announced before the agent profiled it (not yet in its job)
// is looked at when the daemon admits it, without waiting for its next
// announce; and its image's "no" is forgotten.
func TestLifecycleDeclinedThenAdmitted(t *testing.T) {
	a := &admissions{yes: map[int]bool{}}
	l := newTestLifecycle(a)
	ev := announce(pid(30), 0xa, both)
	if sync, interps := l.announced(ev, t0); sync || interps {
		t.Fatal("a process in no job was loaded")
	}
	// Asked again within the TTL: the no is believed.
	l.announced(ev, t0.Add(time.Second))
	if a.count() != 1 {
		t.Errorf("asked %d times within the TTL, want 1", a.count())
	}
	a.yes[30] = true
	sync, replay := l.attach(pid(30), false, t0.Add(2*time.Second))
	if !sync || replay == nil || replay.id != pid(30) || replay.mm != 0xa {
		t.Fatalf("attach: sync %v, replay %+v", sync, replay)
	}
	// The replay is an announce like any: it is admitted now, and finds
	// the sync already queued.
	if sync, interps := l.announced(*replay, t0.Add(2*time.Second)); sync || !interps {
		t.Errorf("replayed announce: sync %v (queued already), interpreters %v", sync, interps)
	}
	// A declined announce of an earlier process under the pid is not
	// replayed for a new one.
	l.announced(announce(pid(31), 0xa, both), t0)
	if _, replay := l.attach(procfs.ID{PID: 31, Start: 999}, false, t0); replay != nil {
		t.Errorf("replayed another process's announce: %+v", replay)
	}
}

// The negative cache keys an image: an exec, or the TTL, asks again.
func TestLifecycleNotProfiledTTL(t *testing.T) {
	a := &admissions{yes: map[int]bool{}}
	l := newTestLifecycle(a)
	l.announced(announce(pid(40), 0xa, both), t0)
	l.announced(announce(pid(40), 0xb, both), t0.Add(time.Millisecond))
	l.announced(announce(pid(40), 0xb, both), t0.Add(notProfileTTL+time.Millisecond))
	if a.count() != 3 {
		t.Errorf("asked %d times (exec, then past the TTL), want 3", a.count())
	}
}

// One process's syncs never overlap: a sync asked while one runs is run
// next by the same syncer.
func TestLifecycleSyncDedup(t *testing.T) {
	a := &admissions{yes: map[int]bool{50: true}}
	l := newTestLifecycle(a)
	l.announced(announce(pid(50), 0xa, both), t0)
	if !l.claim(pid(50)) {
		t.Fatal("first claim refused")
	}
	if l.claim(pid(50)) {
		t.Fatal("a second syncer took the same pid")
	}
	_, _, again := l.synced(pid(50), true, nil, t0)
	if again == nil || *again != pid(50) {
		t.Fatalf("the sync asked meanwhile was lost: %v", again)
	}
	if _, first, again := l.synced(pid(50), false, nil, t0); first || again != nil {
		t.Errorf("second sync: first %v again %v", first, again)
	}
	if !l.claim(pid(50)) {
		t.Error("the pid stayed claimed after its syncs")
	}
}

// A sync of a reused pid does not run and is not counted; a process gone
// mid-sync is not an error; any other failure is.
func TestLifecycleSyncResults(t *testing.T) {
	a := &admissions{yes: map[int]bool{60: true}}
	l := newTestLifecycle(a)
	l.announced(announce(pid(60), 0xa, both), t0)
	for _, err := range []error{errStale, fs.ErrNotExist, procfs.ErrGone, errors.New("EIO")} {
		l.claim(pid(60))
		if loaded, _, _ := l.synced(pid(60), false, err, t0); loaded {
			t.Errorf("%v: loaded", err)
		}
	}
	if c := l.counters(); c.syncs != 3 || c.syncErrors != 1 {
		t.Errorf("syncs %d errors %d, want 3 and 1", c.syncs, c.syncErrors)
	}
	// A full queue: the sync is undone, and the next announce past the
	// second queues it again.
	if sync, _ := l.announced(announce(pid(60), 0xa, both), t0.Add(2*time.Second)); !sync {
		t.Fatal("not queued")
	}
	l.dropped(pid(60))
	if sync, _ := l.announced(announce(pid(60), 0xa, both), t0.Add(3*time.Second)); !sync {
		t.Error("after a full queue the process was never queued again")
	}
}

// Unknown frames resync with a backoff that doubles up to maxBackoff, and
// a sync that loaded new code (a library mapped since) resets it.
func TestLifecycleUnknownBackoff(t *testing.T) {
	a := &admissions{yes: map[int]bool{70: true}}
	l := newTestLifecycle(a)
	l.announced(announce(pid(70), 0xa, both), t0)
	l.claim(pid(70))
	l.synced(pid(70), true, nil, t0)
	now := t0
	var gaps []time.Duration
	last := now
	for range 400 {
		now = now.Add(unknownTick)
		if q := l.unknown([]int{70, 71}, now); len(q) > 0 {
			if len(q) != 1 || q[0] != pid(70) {
				t.Fatalf("queued %v", q)
			}
			gaps = append(gaps, now.Sub(last))
			last = now
			l.claim(pid(70))
			l.synced(pid(70), false, nil, now)
		}
	}
	want := []time.Duration{250 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second}
	if len(gaps) < len(want) || fmt.Sprint(gaps[:len(want)]) != fmt.Sprint(want) {
		t.Fatalf("resync gaps %v, want %v then 30s", gaps, want)
	}
	l.claim(pid(70))
	l.synced(pid(70), true, nil, now)
	if q := l.unknown([]int{70}, now.Add(unknownTick)); len(q) != 1 {
		t.Error("new code loaded, but the backoff was not reset")
	}
}

// An exited process loses its tables at once and its interpreter state
// after the exit grace; a process the daemon forgot is gone at once.
func TestLifecycleSweep(t *testing.T) {
	a := &admissions{yes: map[int]bool{80: true, 81: true, 82: true}}
	l := newTestLifecycle(a)
	l.announced(announce(pid(80), 0xa, both), t0)
	l.announced(announce(pid(81), 0xa, both), t0)
	if tables, forget := l.gone(pid(80), t0); !tables || forget {
		t.Errorf("first found gone: tables %v forget %v, want true false", tables, forget)
	}
	// Found gone, it is no longer read; its state goes after the grace.
	if live := l.live(); len(live) != 1 || live[0] != pid(81) {
		t.Errorf("live after 80 was found gone: %v, want 81 only", live)
	}
	if e := l.expired(t0.Add(time.Minute)); len(e) != 0 {
		t.Errorf("expired within the grace: %v", e)
	}
	if tables, forget := l.gone(pid(80), t0.Add(time.Minute)); tables || forget {
		t.Errorf("within the grace: tables %v forget %v", tables, forget)
	}
	if tables, forget := l.gone(pid(80), t0.Add(2*time.Minute)); !tables || !forget {
		t.Errorf("after the grace: tables %v forget %v", tables, forget)
	}
	l.forget(pid(81))
	if k := l.known(); len(k) != 0 {
		t.Errorf("still known: %v", k)
	}
	// Expiry without a read: found gone, then forgotten by expired alone.
	l.announced(announce(pid(82), 0xa, both), t0)
	l.gone(pid(82), t0)
	if e := l.expired(t0.Add(2 * time.Minute)); len(e) != 1 || e[0] != pid(82) || len(l.known()) != 0 {
		t.Errorf("expired after the grace: %v, known %v", e, l.known())
	}
	// A new process under a pid replaces the old one's record.
	l.announced(announce(procfs.ID{PID: 80, Start: 900}, 0xa, both), t0)
	if tables, _ := l.gone(pid(80), t0); tables {
		t.Error("the old process's record outlived a new one under its pid")
	}
}

// Admission is asked without the lock: a slow answer for one process (the
// daemon attributing it) holds up no other process's announce.
func TestLifecycleSlowAdmissionHoldsUpNobody(t *testing.T) {
	release := make(chan struct{})
	inSlow := make(chan struct{})
	a := &admissions{yes: map[int]bool{90: true, 91: true}}
	a.before = func(id procfs.ID) {
		if id.PID == 90 {
			close(inSlow)
			<-release
		}
	}
	l := newTestLifecycle(a)
	done := make(chan struct{})
	go func() { l.announced(announce(pid(90), 0xa, both), t0); close(done) }()
	<-inSlow
	if sync, _ := l.announced(announce(pid(91), 0xa, both), t0); !sync {
		t.Error("the other process was not queued")
	}
	close(release)
	<-done
}
