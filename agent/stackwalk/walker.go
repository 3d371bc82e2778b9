package stackwalk

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/prio"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/unwind"
)

// Options configures a Walker.
type Options struct {
	Proc procfs.FS // default /proc
	// Tables unwinds native frames from .eh_frame tables (--unwind=auto);
	// false takes frame pointers only, as the kernel does (--unwind=fp).
	// x86-64 only: elsewhere it is ignored (and said so in the log).
	Tables bool
	// Python walks CPython frames (--python-frames).
	Python bool
	// Profiled says whether the agent profiles a process (it is in a job,
	// or --all-processes): only those are loaded. nil: every process. It
	// is called on the reader of new processes, whose Python set-up waits
	// for it: it must not read the process's files (agent/daemon's Admit
	// leaves that to its settlers).
	Profiled func(procfs.ID) bool
	// MaxTableBytes bounds the unwind tables in BPF maps (unwind.Options).
	MaxTableBytes int64
	// Remapped, when set, is told of each load of a process's tables: the
	// first, and each again because its mappings changed (code mapped
	// since, or an exec), so that the symbolizer reads the mappings the
	// tables cover while the process lives.
	Remapped func(procfs.ID)
	// ExitGrace is how long the Python state of a process that exited is
	// kept when the daemon does not forget it first, so that samples
	// drained after its exit still resolve. Default 2 minutes.
	ExitGrace time.Duration
	Log       *slog.Logger
	// HaveLoop says whether the kernel has bpf_loop (5.17), which the
	// table unwinder needs: without it (an ebpf.ErrNotSupported), native
	// frames come from frame pointers, logged and exported as
	// agent_unwind_mode_info. nil: ask the kernel.
	HaveLoop func() error
}

// Walker owns the maps that stack.h reads, for every probe.
type Walker struct {
	o      Options
	tables bool
	// fpReason is why native frames come from frame pointers ("flag",
	// "arch", "no_bpf_loop"); "" when they come from tables.
	fpReason string
	loader   *unwind.Loader
	tracker  *python.Tracker
	shared   map[string]*ebpf.Map
	objs     procsObjects
	loaded   bool
	links    []link.Link
	events   *ringbuf.Reader

	syncq chan procfs.ID
	wake  chan struct{}
	stop  chan struct{}
	wg    sync.WaitGroup

	mu         sync.Mutex
	procs      map[int]*proc
	notProfile map[int]declinedImage // negative decisions by pid
	// declined holds the last announce of each process found not
	// profiled, so that a process the daemon admits later (adopted into a
	// job) is looked at without waiting for its next announce.
	declined map[int]python.Event
	// syncing holds the pids a syncer is loading; a non-nil value is a
	// sync asked meanwhile, for that syncer to run next.
	syncing  map[int]*procfs.ID
	m        counters
	raiseErr sync.Once
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

// proc is what the Walker keeps of a profiled process.
type proc struct {
	id       procfs.ID
	pyStart  uint64    // start_boottime (ns) as the tracker knows it; 0: none
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

var _ source.ProcessAttacher = (*Walker)(nil)

// Names of the maps of stack.h that the Walker shares besides agent/unwind's
// own (python.h's, and stack.h's scratch buffers).
var sharedMaps = []string{"py_procs", "py_threads", "py_seen", "py_events", "py_frame_scratch", "stack_fp_scratch", "stack_py_scratch"}

// Timing of the Walker's own work.
const (
	// syncers load processes side by side: a job's small program is not
	// left unwound behind another's interpreter (90 ms of .eh_frame for
	// Debian's python3.11, 500 ms under load) or a slurmstepd fork
	// about to exec (its libslurmfull).
	syncers       = 4
	retryTick     = 5 * time.Millisecond   // while the tracker waits for a process
	unknownTick   = 250 * time.Millisecond // unknown-frame checks
	sweepTick     = 2 * time.Second        // exited processes
	announceSync  = time.Second            // between syncs asked by announces
	maxBackoff    = 30 * time.Second       // between syncs asked by unknown frames
	notProfileTTL = 5 * time.Second
	maxNotProfile = 1 << 16
)

// New creates the shared maps, loads the fork and exec hooks and starts the
// Walker's goroutines. It needs CAP_BPF and CAP_PERFMON (or root).
func New(o Options) (*Walker, error) {
	if o.Proc.Root == "" {
		o.Proc = procfs.New("")
	}
	if o.ExitGrace <= 0 {
		o.ExitGrace = 2 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	w := &Walker{o: o, tables: o.Tables && runtime.GOARCH == "amd64", shared: map[string]*ebpf.Map{},
		syncq: make(chan procfs.ID, 1024), wake: make(chan struct{}, 1), stop: make(chan struct{}),
		procs: map[int]*proc{}, notProfile: map[int]declinedImage{}, declined: map[int]python.Event{}, syncing: map[int]*procfs.ID{}}
	switch {
	case !o.Tables:
		w.fpReason = "flag"
	case !w.tables:
		w.fpReason = "arch"
		o.Log.Info("unwinding from unwind tables is built for x86-64 only; using frame pointers", "arch", runtime.GOARCH)
	default:
		have := o.HaveLoop
		if have == nil {
			have = func() error { return features.HaveProgramHelper(ebpf.PerfEvent, asm.FnLoop) }
		}
		// Only a clear no falls back: any other error (a probe the
		// kernel refused for another reason) leaves the load to say why.
		if err := have(); errors.Is(err, ebpf.ErrNotSupported) {
			w.tables, w.fpReason = false, "no_bpf_loop"
			o.Log.Warn("the kernel has no bpf_loop (Linux 5.17): native frames come from frame pointers, and stop at code built without them", "err", err)
		}
	}
	if !w.tables && !o.Python {
		return w, nil
	}
	if err := w.init(); err != nil {
		w.Close()
		return nil, err
	}
	w.wg.Add(2 + syncers)
	go w.readEvents()
	go w.loop()
	for range syncers {
		go w.syncer()
	}
	return w, nil
}

func (w *Walker) init() error {
	spec, err := loadProcs()
	if err != nil {
		return fmt.Errorf("stack walker: %w", err)
	}
	for _, name := range sharedMaps {
		ms, ok := spec.Maps[name]
		if !ok {
			return fmt.Errorf("stack walker: no map %s in stack.h", name)
		}
		m, err := ebpf.NewMap(ms.Copy())
		if err != nil {
			return fmt.Errorf("stack walker: create %s: %w", name, err)
		}
		w.shared[name] = m
	}
	mapped := procfs.Mapped{FS: w.o.Proc}
	if w.tables {
		if w.loader, err = unwind.NewLoader(unwind.Options{Maps: mapped, Opener: mapped, MaxTableBytes: w.o.MaxTableBytes}); err != nil {
			return fmt.Errorf("stack walker: %w", err)
		}
	}
	if w.o.Python {
		w.tracker = python.NewTracker(python.TrackerOptions{Arch: python.Arch(runtime.GOARCH), Maps: pyMaps{mapped},
			Open: pyOpener{mapped}, Procs: procTable{w.shared["py_procs"]}})
	}
	consts, repl, err := w.Prepare(spec)
	if err != nil {
		return err
	}
	if err := bpf.LoadWith(spec, consts, repl, &w.objs); err != nil {
		return fmt.Errorf("stack walker: %w", err)
	}
	w.loaded = true
	for _, p := range []struct {
		name string
		prog *ebpf.Program
	}{{"sched_process_fork", w.objs.OnFork}, {"sched_process_exec", w.objs.OnExec}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: p.name, Program: p.prog})
		if err != nil {
			return fmt.Errorf("stack walker: raw tracepoint %s: %w", p.name, err)
		}
		w.links = append(w.links, l)
	}
	if w.events, err = ringbuf.NewReader(w.shared["py_events"]); err != nil {
		return fmt.Errorf("stack walker: %w", err)
	}
	return nil
}

// Prepare readies the spec of a program that includes stack.h: the
// constants it is loaded with (set them, as agent/bpf.LoadWith does) and
// the shared maps to load it with (ebpf.CollectionOptions.MapReplacements).
func (w *Walker) Prepare(spec *ebpf.CollectionSpec) (map[string]any, map[string]*ebpf.Map, error) {
	consts := map[string]any{"stack_tables": uint32(0), "stack_python": uint32(0)}
	if w.tables {
		consts["stack_tables"] = uint32(1)
	}
	if w.o.Python {
		consts["stack_python"] = uint32(1)
	}
	repl := map[string]*ebpf.Map{}
	if w.loader != nil {
		r, err := w.loader.Maps().Replace(spec)
		if err != nil {
			return nil, nil, fmt.Errorf("stack walker: %w", err)
		}
		for k, v := range r {
			repl[k] = v
		}
	}
	for name, m := range w.shared {
		ms, ok := spec.Maps[name]
		if !ok {
			return nil, nil, fmt.Errorf("stack walker: program has no map %s: does it include stack.h?", name)
		}
		ms.MaxEntries = m.MaxEntries()
		if err := ms.Compatible(m); err != nil {
			return nil, nil, fmt.Errorf("stack walker: map %s differs from stack.h: %w", name, err)
		}
		repl[name] = m
	}
	return consts, repl, nil
}

// Tables reports whether native frames are unwound from tables.
func (w *Walker) Tables() bool { return w.tables }

// FramePointerReason says why native frames come from frame pointers: flag
// (--unwind=fp), arch (not x86-64), no_bpf_loop (a kernel before 5.17);
// "" when they come from tables.
func (w *Walker) FramePointerReason() string { return w.fpReason }

// PythonFrames reports whether CPython frames are walked.
func (w *Walker) PythonFrames() bool { return w.tracker != nil }

// Python resolves the raw Python frames of one sample of process pid
// (startNs: the leader's start_boottime in ns, as the probe read it) into
// functions, files and lines, innermost first, and whether the stack was
// cut. Call it soon after draining: code objects are read from the
// process's memory (or its parent's, for a forked child that is gone) and
// cached.
func (w *Walker) Python(pid uint32, startNs uint64, raw *python.RawStack) ([]python.Frame, bool) {
	if w.tracker == nil || raw == nil || raw.Len == 0 {
		return nil, false
	}
	return w.tracker.Resolve(pid, startNs, raw)
}

// AttachProcess loads a process the daemon found in a rescan, unless it is
// loaded already.
func (w *Walker) AttachProcess(id procfs.ID) (source.Attach, error) {
	if w.loader == nil && w.tracker == nil {
		return source.AttachDone, nil
	}
	w.mu.Lock()
	p := w.procLocked(id)
	queue := w.loader != nil && !w.loader.Loaded(id.PID, id.Start) && !p.pending
	if queue {
		p.pending, p.lastSync = true, time.Now()
	}
	// Announced before the agent profiled it: look at it now.
	ev, declined := w.declined[id.PID]
	delete(w.declined, id.PID)
	declined = declined && procfs.StartFromBoottime(ev.StartBoottime) == id.Start
	delete(w.notProfile, id.PID)
	w.mu.Unlock()
	if queue {
		w.enqueue(id)
	}
	if declined {
		w.handle(ev, time.Now())
	}
	return source.AttachDone, nil
}

// ForgetProcess unloads a process that exited, once the daemon has drained
// its samples.
func (w *Walker) ForgetProcess(id procfs.ID) {
	w.mu.Lock()
	p := w.procs[id.PID]
	if p != nil && p.id == id {
		delete(w.procs, id.PID)
	}
	w.mu.Unlock()
	w.unload(id, true)
}

// unload drops a process's tables and, with python, its Python state.
func (w *Walker) unload(id procfs.ID, python bool) {
	if w.loader != nil && w.loader.Loaded(id.PID, id.Start) {
		w.loader.RemoveProcess(id.PID)
	}
	// The tracker keys processes as BPF does, by a 32-bit tgid; a pid
	// out of that range is no process it knows.
	if python && w.tracker != nil && id.PID > 0 && int64(id.PID) <= math.MaxUint32 {
		pid := uint32(id.PID) // #nosec G115 -- range checked above
		if ns, ok := w.tracker.Start(pid); ok && procfs.StartFromBoottime(ns) == id.Start {
			w.tracker.Forget(pid, ns)
		}
	}
}

// procLocked returns the Walker's record of id, replacing that of an
// earlier process with the same pid.
func (w *Walker) procLocked(id procfs.ID) *proc {
	p := w.procs[id.PID]
	if p == nil || p.id != id {
		p = &proc{id: id}
		w.procs[id.PID] = p
	}
	return p
}

func (w *Walker) enqueue(id procfs.ID) {
	select {
	case w.syncq <- id:
	default:
		// A burst beyond the queue: the process is asked again by its
		// next announce, rescan or unknown frames.
		w.mu.Lock()
		if p := w.procs[id.PID]; p != nil && p.id == id {
			p.pending = false
		}
		w.m.syncErrors++
		w.mu.Unlock()
	}
}

// profiled reports (and caches) whether id, running the image mm, is
// profiled.
func (w *Walker) profiled(id procfs.ID, mm uint64, now time.Time) bool {
	w.mu.Lock()
	if p := w.procs[id.PID]; p != nil && p.id == id {
		w.mu.Unlock()
		return true
	}
	key := image{id, mm}
	if d, ok := w.notProfile[id.PID]; ok && d.img == key && now.Before(d.until) {
		w.mu.Unlock()
		return false
	}
	w.mu.Unlock()
	ok := w.o.Profiled == nil || w.o.Profiled(id)
	w.mu.Lock()
	defer w.mu.Unlock()
	if ok {
		w.procLocked(id)
		delete(w.notProfile, id.PID)
	} else {
		if len(w.notProfile) >= maxNotProfile {
			clear(w.notProfile)
		}
		w.notProfile[id.PID] = declinedImage{key, now.Add(notProfileTTL)}
	}
	return ok
}

func (w *Walker) readEvents() {
	defer w.wg.Done()
	w.raise()
	var rec ringbuf.Record
	for {
		if err := w.events.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		var ev python.Event
		if len(rec.RawSample) < int(unsafe.Sizeof(ev)) {
			continue
		}
		ev = *(*python.Event)(unsafe.Pointer(&rec.RawSample[0]))
		w.handle(ev, time.Now())
	}
}

// handle acts on one py_events event: a forked child set up from its
// parent, or a process a probe sampled without state for it.
func (w *Walker) handle(ev python.Event, now time.Time) {
	if ev.MM == 0 {
		return // an exiting task (the BPF side does not send these)
	}
	id := procfs.ID{PID: int(ev.TGID), Start: procfs.StartFromBoottime(ev.StartBoottime)}
	if ev.ParentTGID != 0 {
		if w.tracker != nil && w.tracker.Fork(ev) {
			// A child that inherited a Python parent's state is never
			// announced by a probe: admit it now, while it lives, or a
			// short-lived worker's samples find it gone at the drain and
			// are lost as exited (a 16-worker pool lost every worker's
			// samples so, once, in CI). Only such a child: any other fork
			// (slurmstepd's, before it execs the task) would be attributed
			// from what it is before its exec, root and no job environment.
			if w.o.Profiled != nil {
				w.o.Profiled(id)
			}
			w.mu.Lock()
			p := w.procLocked(id)
			p.pyStart = ev.StartBoottime
			w.m.forks++
			w.mu.Unlock()
		}
		return
	}
	if !w.profiled(id, ev.MM, now) {
		w.mu.Lock()
		if len(w.declined) >= maxNotProfile {
			clear(w.declined)
		}
		w.declined[id.PID] = ev
		w.mu.Unlock()
		return
	}
	w.mu.Lock()
	w.m.announces++
	p := w.procLocked(id)
	queue := false
	if ev.Flags&python.EventNative != 0 && w.loader != nil && !p.pending && (now.Sub(p.lastSync) >= announceSync || ev.MM != p.syncMM) {
		// No tables in BPF: new, or exec'd since it was loaded. An exec
		// within the second (a job's fork, then exec of its program) must
		// not wait out the limit: its first image's tables are of no use,
		// and a short program would run its whole life unloaded.
		p.pending, p.lastSync, p.syncMM, queue = true, now, ev.MM, true
	}
	if w.tracker != nil {
		p.pyStart = ev.StartBoottime
	}
	w.mu.Unlock()
	if queue {
		w.enqueue(id)
	}
	if w.tracker != nil {
		w.tracker.Notify(ev)
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// syncer loads processes from the queue, one at a time: a large process
// takes a second (tens of files to parse), and no sample waits for it. A
// process another syncer is loading is left to it, to load once more when
// done: one process's syncs never overlap.
func (w *Walker) syncer() {
	defer w.wg.Done()
	w.raise()
	for {
		var id procfs.ID
		select {
		case <-w.stop:
			return
		case id = <-w.syncq:
		}
		for {
			w.mu.Lock()
			if _, busy := w.syncing[id.PID]; busy {
				w.syncing[id.PID] = &id
				w.mu.Unlock()
				break
			}
			w.syncing[id.PID] = nil
			w.mu.Unlock()
			w.sync(id)
			w.mu.Lock()
			again := w.syncing[id.PID]
			delete(w.syncing, id.PID)
			w.mu.Unlock()
			if again == nil {
				break
			}
			id = *again
		}
	}
}

func (w *Walker) sync(id procfs.ID) {
	w.mu.Lock()
	if p := w.procs[id.PID]; p != nil && p.id == id {
		p.pending = false
	}
	w.mu.Unlock()
	// The pid may have been reused since it was queued: never load one
	// process's mappings under another's start time.
	if now, err := w.o.Proc.ID(id.PID); err != nil || now != id {
		return
	}
	changed, err := w.loader.SyncProcess(id.PID, id.Start)
	w.mu.Lock()
	w.m.syncs++
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, procfs.ErrGone) {
		w.m.syncErrors++
	}
	loaded := false
	if p := w.procs[id.PID]; p != nil && p.id == id && err == nil {
		loaded, p.synced = true, true
		if changed {
			// New code was loaded: the process is still mapping its
			// libraries (a Python program's imports: ctypes's libffi
			// seconds in), and its next unknown frames are more of it,
			// not JIT code no table covers. The backoff is for those.
			p.backoff, p.nextResync = 0, time.Time{}
		}
	}
	w.mu.Unlock()
	// The first load too: the symbolizer may have read the process's
	// mappings before it dlopened what the tables now cover (a Python
	// process's _hashlib and libcrypto), and would never learn of them
	// once it exited, though its walks there never ask for a reload.
	if loaded && w.o.Remapped != nil {
		w.o.Remapped(id)
	}
}

// raise runs the calling goroutine ahead of the jobs (agent/prio): a new
// process is announced, loaded and set up for Python on these goroutines,
// and its samples until then keep only their leaf.
func (w *Walker) raise() {
	if err := prio.Raise(); err != nil {
		w.raiseErr.Do(func() { w.o.Log.Info("running the table loaders at the default priority", "err", err) })
	}
}

// loop retries the tracker's pending processes, re-syncs processes whose
// walks meet unknown code, and unloads processes that exited.
func (w *Walker) loop() {
	defer w.wg.Done()
	w.raise()
	unknown := time.NewTicker(unknownTick)
	defer unknown.Stop()
	sweep := time.NewTicker(sweepTick)
	defer sweep.Stop()
	var retry <-chan time.Time
	var retryTimer *time.Timer
	for {
		select {
		case <-w.stop:
			return
		case <-w.wake:
		case <-retry:
		case <-unknown.C:
			w.resyncUnknown(time.Now())
			continue
		case <-sweep.C:
			w.sweep(time.Now())
			continue
		}
		retry = nil
		if w.tracker != nil && w.tracker.Retry() {
			if retryTimer == nil {
				retryTimer = time.NewTimer(retryTick)
			} else {
				retryTimer.Reset(retryTick)
			}
			retry = retryTimer.C
		}
	}
}

func (w *Walker) resyncUnknown(now time.Time) {
	if w.loader == nil {
		return
	}
	var queue []procfs.ID
	for pid := range w.loader.UnknownFrames() {
		w.mu.Lock()
		p := w.procs[pid]
		if p != nil && !p.pending && !now.Before(p.nextResync) {
			p.backoff = min(max(2*p.backoff, unknownTick), maxBackoff)
			p.nextResync = now.Add(p.backoff)
			p.pending, p.lastSync = true, now
			queue = append(queue, p.id)
		}
		w.mu.Unlock()
	}
	for _, id := range queue {
		w.enqueue(id)
	}
}

func (w *Walker) sweep(now time.Time) {
	w.mu.Lock()
	procs := make([]*proc, 0, len(w.procs))
	for _, p := range w.procs {
		procs = append(procs, p)
	}
	w.mu.Unlock()
	for _, p := range procs {
		cur, err := w.o.Proc.ID(p.id.PID)
		if err == nil && cur == p.id {
			continue
		}
		if err != nil && !errors.Is(err, procfs.ErrGone) {
			continue // unreadable, not gone
		}
		w.mu.Lock()
		first := p.dead.IsZero()
		if first {
			p.dead = now
		}
		expired := now.Sub(p.dead) >= w.o.ExitGrace
		if expired && w.procs[p.id.PID] == p {
			delete(w.procs, p.id.PID)
		}
		w.mu.Unlock()
		if first || expired {
			// Tables at once (they serve only live processes); Python
			// state after the grace, for samples still to be drained.
			w.unload(p.id, expired)
		}
	}
}

// Close stops the Walker and frees its maps; loaded probes keep the maps
// they use.
func (w *Walker) Close() error {
	select {
	case <-w.stop:
		return nil
	default:
	}
	close(w.stop)
	if w.events != nil {
		w.events.Close()
	}
	w.wg.Wait()
	var errs []error
	for _, l := range w.links {
		errs = append(errs, l.Close())
	}
	if w.loaded {
		errs = append(errs, w.objs.Close())
	}
	for _, m := range w.shared {
		errs = append(errs, m.Close())
	}
	if w.loader != nil {
		w.loader.Close()
	}
	return errors.Join(errs...)
}

// pyMaps and pyOpener are procfs as agent/python's narrow interfaces.
type pyMaps struct{ m procfs.Mapped }

func (p pyMaps) Maps(pid int) ([]python.Mapping, error) { return p.m.Mappings(pid) }

type pyOpener struct{ m procfs.Mapped }

func (p pyOpener) OpenMapped(pid int, m python.Mapping) (python.File, error) {
	f, err := p.m.OpenMapping(pid, m)
	if err != nil {
		return nil, err
	}
	return pyFile{r: f.Reader(), f: f}, nil
}

// pyFile reads a mapped file only up to the size procfs checked.
type pyFile struct {
	r *io.SectionReader
	f *procfs.File
}

func (p pyFile) ReadAt(b []byte, off int64) (int, error) { return p.r.ReadAt(b, off) }
func (p pyFile) Close() error                            { return p.f.Close() }
func (p pyFile) Stat() (fs.FileInfo, error)              { return p.f.Stat() }

var (
	_ python.MapsReader = pyMaps{}
	_ python.Opener     = pyOpener{}
	_ python.ProcTable  = procTable{}
	_ unwind.MapsReader = procfs.Mapped{}
	_ unwind.FileOpener = procfs.Mapped{}
)

// procTable is py_procs as the tracker writes it.
type procTable struct{ m *ebpf.Map }

func (t procTable) Put(tgid uint32, info python.ProcInfo) error { return t.m.Put(tgid, info) }
func (t procTable) Delete(tgid uint32) error {
	if err := t.m.Delete(tgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}
