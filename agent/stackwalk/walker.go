package stackwalk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/logx"
	"github.com/slurmscope/slurmscope/agent/prio"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/agent/unwind"
)

// Options configures a Walker.
type Options struct {
	Proc procfs.FS // default /proc
	// Tables unwinds native frames from .eh_frame tables (--unwind=auto);
	// false takes frame pointers only, as the kernel does (--unwind=fp).
	// x86-64 only: elsewhere it is ignored (and said so in the log).
	Tables bool
	// Interpreters are the interpreters whose frames are walked (each
	// one's --<name>-frames); none: native frames only.
	Interpreters []interp.Interpreter
	// Annotators name the root frames the capture records beside the
	// native and interpreter frames of every process (agent/nvtx: the
	// thread's open NVTX ranges); each one's BPF constant is turned on.
	Annotators []interp.Annotator
	// Profiled says whether the agent profiles a process (it is in a job,
	// or --all-processes): only those are loaded. nil: every process. It
	// is called on the reader of new processes, whose interpreter set-up
	// waits for it: it must not read the process's files (agent/daemon's
	// Admit leaves that to its settlers).
	Profiled func(procfs.ID) bool
	// MaxTableBytes bounds the unwind tables in BPF maps (unwind.Options).
	MaxTableBytes int64
	// Owner names a process's job (the memory budget's owner key): the
	// probes' per-job shares of their own tables count by it (nil: no
	// shares), the interpreters meter their reads by it, and with Work,
	// what the table builder and the interpreters read of a process's
	// mapped files is charged to its job's read allowance (procfs.Mapped;
	// nil Work: not charged). It is asked on the readers and under the
	// interpreters' locks: a cache lookup, no I/O.
	Work  *budget.Work
	Owner func(procfs.ID) string
	// ForkJobShare bounds, with Owner, one job's live forked processes
	// handed their origin's state at their fork, per table (default
	// DefaultForkJobShare); the rest are set up when first sampled.
	ForkJobShare int
	// Remapped, when set, is told of each load of a process's tables: the
	// first, and each again because its mappings changed (code mapped
	// since, or an exec), so that the symbolizer reads the mappings the
	// tables cover while the process lives.
	Remapped func(procfs.ID)
	// ExitGrace is how long the interpreter state of a process that exited
	// is kept when the daemon does not forget it first, so that samples
	// drained after its exit still resolve. Default 2 minutes.
	ExitGrace time.Duration
	Log       *slog.Logger
	// HaveLoop says whether the kernel has bpf_loop (5.17), which the
	// table unwinder needs: without it (an ebpf.ErrNotSupported), native
	// frames come from frame pointers, logged and exported as
	// agent_unwind_mode_info. nil: ask the kernel.
	HaveLoop func() error
}

// Walker owns the maps that stack.h reads, for every probe, and the
// goroutines that keep them: the reader of stack_events, the syncers that
// load processes' tables, and a loop that retries the interpreters'
// pending processes and sweeps exited ones. What to load when is the
// lifecycle's to decide.
type Walker struct {
	o      Options
	tables bool
	// fpReason is why native frames come from frame pointers ("flag",
	// "arch", "no_bpf_loop"); "" when they come from tables.
	fpReason string
	loader   *unwind.Loader
	interps  *interpreters
	life     *lifecycle
	shared   map[string]*ebpf.Map
	objs     procsObjects
	loaded   bool
	links    []link.Link
	events   *ringbuf.Reader
	setup    *setupClock

	syncq chan procfs.ID
	wake  chan struct{}
	stop  chan struct{}
	wg    sync.WaitGroup

	raiseErr sync.Once
}

var _ source.ProcessAttacher = (*Walker)(nil)

// Timing of the Walker's own work.
const (
	// syncers load processes side by side: a job's small program is not
	// left unwound behind another's interpreter (90 ms of .eh_frame for
	// Debian's python3.11, 500 ms under load) or a slurmstepd fork
	// about to exec (its libslurmfull).
	syncers   = 4
	retryTick = 5 * time.Millisecond // while an interpreter waits for a process
	sweepTick = 2 * time.Second      // exited processes
)

// DefaultForkJobShare is an eighth of the process tables' 32768 entries:
// sixteen processes of one job each forking 256 children fill it.
const DefaultForkJobShare = 4096

// New creates the shared maps, loads the fork and exec hooks and starts the
// Walker's goroutines. It needs CAP_BPF and CAP_PERFMON (or root).
func New(o Options) (*Walker, error) {
	if o.Proc.Root == "" {
		o.Proc = procfs.New("")
	}
	if o.ExitGrace <= 0 {
		o.ExitGrace = 2 * time.Minute
	}
	if o.ForkJobShare <= 0 {
		o.ForkJobShare = DefaultForkJobShare
	}
	o.ForkJobShare = min(o.ForkJobShare, 1<<20)
	if o.Log == nil {
		o.Log = slog.Default()
	}
	w := &Walker{o: o, tables: o.Tables && runtime.GOARCH == "amd64", shared: map[string]*ebpf.Map{},
		syncq: make(chan procfs.ID, 1024), wake: make(chan struct{}, 1), stop: make(chan struct{}), setup: newSetupClock()}
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
	w.life = newLifecycle(o.Profiled, w.tables, o.ExitGrace)
	if !w.tables && len(o.Interpreters) == 0 && len(o.Annotators) == 0 {
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
	shared, err := bpf.StackSpec()
	if err != nil {
		return fmt.Errorf("stack walker: %w", err)
	}
	// stack.h's maps and its interpreters', once for every program; the
	// unwinder's are the Loader's.
	for name, ms := range shared.Maps {
		// .rodata, .bss: each program's own constants and globals.
		if strings.HasPrefix(name, ".") || slices.Contains(unwind.MapNames(), name) {
			continue
		}
		m, err := ebpf.NewMap(ms.Copy())
		if err != nil {
			return fmt.Errorf("stack walker: create %s: %w", name, err)
		}
		w.shared[name] = m
	}
	mapped := procfs.Mapped{FS: w.o.Proc, Work: w.o.Work, Owner: w.o.Owner}
	if w.tables {
		if w.loader, err = unwind.NewLoader(unwind.Options{Maps: mapped, Opener: mapped, MaxTableBytes: w.o.MaxTableBytes, Owner: w.o.Owner,
			Group: w.group}); err != nil {
			return fmt.Errorf("stack walker: %w", err)
		}
	}
	env := interp.Env{Maps: mapsReader{mapped}, Open: opener{mapped}, Arch: runtime.GOARCH, Log: w.o.Log, Owner: w.interpOwner(),
		Ready: func(p interp.Process) { w.setup.observe(partInterpreter, p.StartNs) }}
	if w.interps, err = openInterpreters(w.o.Interpreters, env, kindTable{m: w.shared["interp_procs"], proc: w.o.Proc, owner: w.o.Owner}); err != nil {
		return fmt.Errorf("stack walker: %w", err)
	}
	spec, err := loadProcs()
	if err != nil {
		return fmt.Errorf("stack walker: %w", err)
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
	}{{"sched_process_fork", w.objs.OnFork}, {"sched_process_exit", w.objs.OnExit}, {"sched_process_exec", w.objs.OnExec}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: p.name, Program: p.prog})
		if err != nil {
			return fmt.Errorf("stack walker: raw tracepoint %s: %w", p.name, err)
		}
		w.links = append(w.links, l)
	}
	if w.events, err = ringbuf.NewReader(w.shared["stack_events"]); err != nil {
		return fmt.Errorf("stack walker: %w", err)
	}
	return nil
}

// interpOwner is Options.Owner as the interpreters ask it; nil without.
func (w *Walker) interpOwner() func(interp.Process) string {
	if w.o.Owner == nil {
		return nil
	}
	return func(p interp.Process) string { return w.o.Owner(p.ID()) }
}

// Prepare readies the spec of a program that includes stack.h: the
// constants it is loaded with (set them, as agent/bpf.LoadWith does) and
// the shared maps to load it with (ebpf.CollectionOptions.MapReplacements).
func (w *Walker) Prepare(spec *ebpf.CollectionSpec) (map[string]any, map[string]*ebpf.Map, error) {
	consts := map[string]any{"stack_tables": uint32(0), "stack_interpreters": uint32(0), "stack_fork_job_share": uint32(0)}
	if w.o.Owner != nil {
		consts["stack_fork_job_share"] = uint32(w.o.ForkJobShare) // #nosec G115 -- defaulted and bounded in New
	}
	if w.tables {
		consts["stack_tables"] = uint32(1)
	}
	if w.interps != nil {
		consts["stack_interpreters"] = w.interps.mask
	}
	for _, a := range w.o.Annotators {
		consts[a.Const()] = uint32(1)
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

// group is a process's job group in the BPF tables; 0 without Owner.
func (w *Walker) group(id procfs.ID) uint32 { return jobGroup(w.o.Owner, id) }

// Tables reports whether native frames are unwound from tables.
func (w *Walker) Tables() bool { return w.tables }

// FramePointerReason says why native frames come from frame pointers: flag
// (--unwind=fp), arch (not x86-64), no_bpf_loop (a kernel before 5.17);
// "" when they come from tables.
func (w *Walker) FramePointerReason() string { return w.fpReason }

// Interpreters names the interpreters whose frames are walked.
func (w *Walker) Interpreters() []string {
	if w.interps == nil {
		return nil
	}
	return w.interps.names
}

// Resolve names the raw interpreter frames of one sample of process pid
// (startNs: the leader's start_boottime in ns, as the probe read it),
// innermost first. Call it soon after draining: what the frames name is
// read from the process's memory and cached.
func (w *Walker) Resolve(pid uint32, startNs uint64, raw *bpf.InterpStack) interp.Stack {
	if raw == nil || raw.Len == 0 {
		return interp.Stack{}
	}
	p := interp.Process{PID: pid, StartNs: startNs}
	n, root := raw.RootFrames()
	var st interp.Stack
	if in := w.interps.of(raw.Kind); in != nil && n > 0 {
		if len(root) == 0 {
			st = in.Resolve(p, raw)
		} else {
			// The interpreter sees its own frames only.
			own := *raw
			own.Len = n
			own.Flags &^= bpf.InterpRootTruncated | 0xff<<bpf.InterpRootShift
			st = in.Resolve(p, &own)
		}
	}
	if len(root) > 0 {
		st.Root = w.annotate(p, root, raw.Flags&bpf.InterpRootTruncated != 0)
	}
	return st
}

// annotate names root frames: each annotator the frames that carry its
// tag, in order; frames of no annotator's tag are dropped.
func (w *Walker) annotate(p interp.Process, root []bpf.InterpFrame, truncated bool) []symbolize.Frame {
	var out []symbolize.Frame
	for _, a := range w.o.Annotators {
		mine := root
		for _, f := range root {
			if f.Check != a.Tag() {
				mine = nil
				break
			}
		}
		if mine == nil {
			for _, f := range root {
				if f.Check == a.Tag() {
					mine = append(mine, f)
				}
			}
		}
		if len(mine) > 0 {
			out = append(out, a.Root(p, mine, truncated)...)
		}
	}
	return out
}

// AttachProcess loads a process the daemon found in a rescan, unless it is
// loaded already.
func (w *Walker) AttachProcess(id procfs.ID) (source.Attach, error) {
	if w.loader == nil && w.interps == nil {
		return source.AttachDone, nil
	}
	// A forked child is unwound through its origin's tables.
	loaded := w.loader != nil && (w.loader.Loaded(id.PID, id.Start) || w.loader.Aliased(id.PID, id.Start))
	sync, replay := w.life.attach(id, loaded, time.Now())
	if sync {
		w.enqueue(id)
	}
	// Announced before the agent profiled it: look at it now.
	if replay != nil {
		w.handle(*replay, time.Now())
	}
	return source.AttachDone, nil
}

// ForgetProcess unloads a process that exited, once the daemon has drained
// its samples.
func (w *Walker) ForgetProcess(id procfs.ID) {
	w.life.forget(id)
	w.unload(id, true)
}

// unload drops a process's tables and, with interpreters, its interpreter
// state.
func (w *Walker) unload(id procfs.ID, interpreters bool) {
	if w.loader != nil && w.loader.Loaded(id.PID, id.Start) {
		w.loader.RemoveProcess(id.PID)
	}
	if interpreters {
		w.interps.forget(id)
	}
}

func (w *Walker) enqueue(id procfs.ID) {
	select {
	case w.syncq <- id:
	default:
		w.life.dropped(id) // a burst beyond the queue
	}
}

func (w *Walker) wakeLoop() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// syncer loads processes from the queue, one at a time: a large process
// takes a second (tens of files to parse), and no sample waits for it. A
// process another syncer is loading is left to it, to load once more when
// done.
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
		if !w.life.claim(id) {
			continue
		}
		for next := &id; next != nil; {
			next = w.sync(*next)
		}
	}
}

// sync loads a claimed process's tables and returns the sync to run next
// for its pid, if one was asked meanwhile.
func (w *Walker) sync(id procfs.ID) *procfs.ID {
	var changed bool
	err := errStale
	// The pid may have been reused since it was queued: never load one
	// process's mappings under another's start time. Nor one that has
	// begun to exit: a fork storm's children are sampled and announced as
	// they exit, hundreds a second, and would each cost a read of their
	// maps and files.
	running := func() bool {
		st, err := w.o.Proc.Stat(id.PID)
		return err == nil && st.StartTime == id.Start && !st.Exiting()
	}
	began := time.Now()
	if running() {
		changed, err = w.loader.SyncProcess(id.PID, id.Start)
		// As kindTable.Put: the exit hook frees the entry of a process
		// that exits after the write, and this the entry of one that
		// began to exit before it, which would stay until the sweep.
		if err == nil && !running() {
			w.loader.RemoveProcessStarted(id.PID, id.Start)
			changed, err = false, fmt.Errorf("process %d: %w", id.PID, procfs.ErrGone)
		}
	} else if now, perr := w.o.Proc.ID(id.PID); perr == nil && now == id {
		err = fmt.Errorf("process %d: %w", id.PID, procfs.ErrGone) // exiting: counted, not loaded
	}
	now := time.Now()
	loaded, first, again := w.life.synced(id, changed, err, now)
	w.debugSynced(id, changed, err, now.Sub(began))
	if first {
		w.setup.observe(partTables, procfs.BoottimeFromStart(id.Start))
	}
	// The first load too: the symbolizer may have read the process's
	// mappings before it dlopened what the tables now cover (a Python
	// process's _hashlib and libcrypto), and would never learn of them
	// once it exited, though its walks there never ask for a reload.
	if loaded && w.o.Remapped != nil {
		w.o.Remapped(id)
	}
	return again
}

// debugSynced logs a sync of a process's unwind tables at debug level:
// its pid, the files it has tables of, whether they changed, how long the
// sync took and why it failed.
func (w *Walker) debugSynced(id procfs.ID, changed bool, err error, took time.Duration) {
	ctx := context.Background()
	if !w.o.Log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.Int("pid", id.PID), slog.Int("files", w.loader.Files(id.PID, id.Start)),
		slog.Bool("changed", changed), slog.Duration("took", took.Round(time.Microsecond))}
	if err != nil {
		attrs = append(attrs, slog.String("err", logx.Err(err)))
	}
	w.o.Log.LogAttrs(ctx, slog.LevelDebug, "synced unwind tables", attrs...)
}

// raise runs the calling goroutine ahead of the jobs (agent/prio): a new
// process is announced, loaded and set up for its interpreter on these
// goroutines, and its samples until then keep only their leaf.
func (w *Walker) raise() {
	if err := prio.Raise(); err != nil {
		w.raiseErr.Do(func() { w.o.Log.Info("running the table loaders at the default priority", "err", err) })
	}
}

// loop retries the interpreters' pending processes, re-syncs processes
// whose walks meet unknown code, and unloads processes that exited.
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
		if w.interps.retry() {
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
	var pids []int
	for pid := range w.loader.UnknownFrames() {
		pids = append(pids, pid)
	}
	for _, id := range w.life.unknown(pids, now) {
		w.enqueue(id)
	}
}

func (w *Walker) sweep(now time.Time) {
	// A process found gone is not read again: under process churn the
	// ones within their exit grace outnumber the live ones.
	for _, id := range w.life.expired(now) {
		w.unload(id, true)
	}
	for _, id := range w.life.live() {
		cur, err := w.o.Proc.ID(id.PID)
		if err == nil && cur == id {
			continue
		}
		if err != nil && !errors.Is(err, procfs.ErrGone) {
			continue // unreadable, not gone
		}
		if tables, forget := w.life.gone(id, now); tables || forget {
			w.unload(id, forget)
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

// Collectors are the Walker's metrics: the unwinder's, the set-up times,
// and each interpreter's.
func (w *Walker) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{w.collector(), w.setup.hist}, w.interps.collectors()...)
}

var _ unwind.MapsReader = procfs.Mapped{}
var _ unwind.FileOpener = procfs.Mapped{}
