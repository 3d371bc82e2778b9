package python

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// TrackerOptions configures a Tracker. Zero values select the defaults.
type TrackerOptions struct {
	Arch  Arch              // required
	Maps  interp.MapsReader // required
	Open  interp.Opener     // required
	Procs interp.Table      // required
	// Memory reads a process's memory; default MemoryOf.
	Memory func(interp.Process) Memory
	// Ready is told of each process once it is set up; nil: nobody.
	Ready func(interp.Process)
	// Owner names the job a process belongs to (interp.Env.Owner): its
	// processes share one read allowance, one CPU allowance and one lane
	// of reads (at most one stuck read). nil, or "": each process is its
	// own.
	Owner func(interp.Process) string
	// Inspect reads a mapped file; default Inspect (tests fake it).
	Inspect func(r io.ReaderAt, name string, arch Arch) (*Interpreter, error)
	// MaxCodeBytes bounds the code-object cache (names, files, line
	// tables) over all processes. Default 16 MiB.
	MaxCodeBytes int64
	// MaxProcessCodeBytes bounds one process's share. Default a quarter of
	// MaxCodeBytes.
	MaxProcessCodeBytes int64
	// ReadBytesPerSecond bounds what resolving one job's frames may read
	// of its memory, so that a job that fakes a new code object in every
	// sample costs bounded work. Default 4 MiB/s, with a burst of four
	// seconds' worth.
	ReadBytesPerSecond int64
	// ResolveTimePerSecond bounds the time resolving one job's frames may
	// take (reads, line tables, lookups); past it the job's frames stay
	// unresolved until it refills. Default 50 ms a second, with a burst of
	// four seconds' worth.
	ResolveTimePerSecond time.Duration
	// ReadTimeout bounds one batch of reads of a job's memory or files
	// (a set-up, one stack's code objects). Default DefaultReadTimeout.
	ReadTimeout time.Duration
	Now         func() time.Time
	Log         *slog.Logger
}

// Tracker is CPython's interp.Instance: it finds the CPython processes the
// capture announces, writes their entries, and resolves their frames. It
// is safe for concurrent use.
//
// Its lock guards its maps and counters only. Nothing reads a process's
// memory or files under it: a call takes what it needs under the lock,
// reads without it (in the gate, with a deadline), and publishes what it
// read under it again, if the process is still the one it read.
type Tracker struct {
	o       TrackerOptions
	gate    gate
	mu      sync.Mutex
	procs   map[uint32]*proc
	waiting map[*proc]bool // pending, or not CPython yet and rechecked soon
	files   map[fileKey]fileResult
	jobs    map[string]*jobMeter
	bytes   int64 // code cache, all processes
	stats   Stats
	panics  int // logged so far
}

// Stats counts what the Tracker did.
type Stats struct {
	// Found counts processes set up for the walk, by version ("3.11").
	Found map[string]uint64
	// Skipped counts processes left to native stacks, by reason:
	// not_python, unknown_version, unsupported, bad_interpreter,
	// not_initialized (never initialised within the retries), open, maps,
	// memory, bpf_map, stalled (its job's reads did not finish in time, or
	// were refused while one was stuck), read_panic (reading it panicked:
	// it is never read again).
	Skipped map[string]uint64
	// Code-object cache: hits, misses (each a read of the process), code
	// objects that failed to read or validate, entries evicted for bytes,
	// frames left unresolved because the job's read allowance was spent,
	// frames whose code object was gone (freed, its address reused) by
	// the time they were resolved, and frames whose code object could not
	// be read or was none (the process gone before its frames were
	// resolved, a freed or faked frame).
	CodeHits, CodeMisses, CodeBad, CodeEvicted, ReadBudgetExceeded, CodeGone, CodeUnreadable uint64
	CodeBytes                                                                                int64
	// Frames left unresolved: their code object or names lie in no
	// mapping the tracker reads (a file other than the interpreter's), or
	// on a page not resident in the process (reading it would fetch it
	// from its file); the job's reads stalled (or were refused while one
	// was stuck); the job had spent its CPU allowance.
	CodeRefused, CodeNotResident, Stalled, CPUBudgetExceeded uint64
	// LineTableBytes counts line-table bytes decoded (each once per code
	// object read).
	LineTableBytes uint64
	// Frames resolved, and Python stacks cut at MaxFrames.
	Frames, Truncated uint64
	// Forked counts children set up from their parent (Fork), and
	// ParentReads the code objects read from a forked child's parent
	// because the child's own memory was gone.
	Forked, ParentReads uint64
	// ReadStalls counts batches of reads that passed their deadline,
	// ReadsRefused those refused (the job's lane stuck), and StuckJobs the
	// jobs with a read stuck now.
	ReadStalls, ReadsRefused uint64
	StuckJobs                int
}

type procState uint8

const (
	stateNone       procState = iota // not (or not yet known to be) a CPython process we can walk
	statePending                     // a CPython process whose runtime is not initialised yet
	stateReady                       // in the capture's process table
	stateUnreadable                  // reading it panicked: never read again
)

type proc struct {
	pid       uint32
	start, mm uint64
	owner     string // the gate's and meter's key; "" until first looked at
	state     procState
	busy      bool      // a set-up of it runs (off the lock)
	next      time.Time // when to look again (none, pending)
	tries     int
	quick     int // rechecks so far of a process found not to be CPython
	in        *Interpreter
	runtime   uint64
	codeType  uint64
	file      procfs.FileID // the interpreter's file
	mem       Memory
	ranges    *readable // what of its memory is read (readable.go)
	codes     map[uint64]*codeInfo
	lru       codeList
	codeBytes int64
	// parent is the process a forked child was copied from (Fork): code
	// objects made before the fork sit at the same addresses in both, and
	// the parent's memory still holds them once a short-lived child is gone.
	parent   *proc
	children map[*proc]bool // its forked children that point at it
}

type fileKey struct {
	dev, ino  uint64
	size      int64
	mtimeNsec int64
}

type fileResult struct {
	in  *Interpreter
	err error
}

// maxFileResults bounds the per-file cache of Inspect results; each is a
// few hundred bytes.
const maxFileResults = 4096

// How often a process found not to be CPython is looked at again when it is
// announced (it may load libpython later); and the retry schedule of a
// CPython process whose runtime is not initialised yet.
const (
	recheckNone  = 10 * time.Second
	pendingFirst = 10 * time.Millisecond
	pendingMax   = time.Second
	pendingTries = 40
	// Rechecks of a process found not to be CPython: 10, 40, 160, 640 ms.
	quickFirst    = 10 * time.Millisecond
	quickRechecks = 4
)

// NewTracker returns a Tracker.
func NewTracker(o TrackerOptions) *Tracker {
	if o.Memory == nil {
		o.Memory = MemoryOf
	}
	if o.Inspect == nil {
		o.Inspect = Inspect
	}
	if o.MaxCodeBytes <= 0 {
		o.MaxCodeBytes = 16 << 20
	}
	if o.MaxProcessCodeBytes <= 0 {
		o.MaxProcessCodeBytes = o.MaxCodeBytes / 4
	}
	if o.ReadBytesPerSecond <= 0 {
		o.ReadBytesPerSecond = defaultReadBytesPerSecond
	}
	if o.ResolveTimePerSecond <= 0 {
		o.ResolveTimePerSecond = defaultResolveTimePerSecond
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Tracker{o: o, gate: gate{timeout: o.ReadTimeout}, procs: map[uint32]*proc{}, waiting: map[*proc]bool{},
		files: map[fileKey]fileResult{}, jobs: map[string]*jobMeter{},
		stats: Stats{Found: map[string]uint64{}, Skipped: map[string]uint64{}}}
}

// Announce looks at a process the capture sampled without an entry.
func (t *Tracker) Announce(ev interp.Process) {
	if ev.MM == 0 {
		return // an exiting task: not another process (the BPF side does not send these)
	}
	p := t.announced(ev)
	if p != nil {
		t.look(p)
	}
}

// announced finds or makes the state of an announced process, and returns
// it when it is to be looked at now (marked busy).
func (t *Tracker) announced(ev interp.Process) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.o.Now()
	p := t.procs[ev.PID]
	if p != nil && p.start == ev.StartNs && p.mm == ev.MM {
		switch {
		case p.state == stateReady:
			// Announced although set up: the entry was lost (an earlier
			// Put failed, or someone deleted it). Put it back.
			t.put(p)
			return nil
		case p.busy || p.state == stateUnreadable || p.state == statePending || now.Before(p.next):
			return nil
		}
	} else {
		if p != nil {
			t.dropLocked(p)
		}
		p = &proc{pid: ev.PID, start: ev.StartNs, mm: ev.MM}
		t.procs[ev.PID] = p
	}
	p.busy = true
	return p
}

// Fork sets up a forked child, which the BPF side gave its parent's entry,
// from the parent's state, reading nothing: a fork runs the same
// interpreter at the same addresses. It reports whether the parent was
// known; if not, the child is looked at as any announced process.
func (t *Tracker) Fork(child, parent interp.Process) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	par := t.procs[parent.PID]
	if par == nil || par.start != parent.StartNs || par.state != stateReady {
		return false
	}
	if old := t.procs[child.PID]; old != nil {
		t.dropLocked(old)
	}
	for par.parent != nil {
		par = par.parent // a fork of a fork: the process that was looked at
	}
	c := &proc{pid: child.PID, start: child.StartNs, mm: child.MM, state: stateReady, owner: par.owner,
		in: par.in, runtime: par.runtime, codeType: par.codeType, file: par.file, ranges: par.ranges,
		mem: t.o.Memory(child), parent: par}
	if par.children == nil {
		par.children = map[*proc]bool{}
	}
	par.children[c] = true
	t.procs[child.PID] = c
	t.meterOf(c.owner).procs++
	t.stats.Forked++
	t.ready(c)
	return true
}

// Retry looks again at CPython processes whose runtime was not initialised
// yet, and soon after at processes first found not to be CPython (seen
// mid-exec, or before libpython was mapped). It reports whether any such
// process remains: while one does, call it every few milliseconds (a 2 s
// `python -c` must not wait long); otherwise only after the next Announce.
func (t *Tracker) Retry() (pending bool) {
	t.mu.Lock()
	now := t.o.Now()
	var due []*proc
	for p := range t.waiting {
		if !p.busy && !now.Before(p.next) {
			p.busy = true
			due = append(due, p)
		}
	}
	pending = len(t.waiting) > 0
	t.mu.Unlock()
	for _, p := range due {
		t.look(p)
	}
	if len(due) > 0 {
		t.mu.Lock()
		pending = len(t.waiting) > 0
		t.mu.Unlock()
	}
	return pending
}

// Forget drops a process that exited.
func (t *Tracker) Forget(id procfs.ID) {
	// The tracker keys processes as BPF does, by a 32-bit tgid; a pid
	// out of that range is no process it knows.
	if id.PID <= 0 || int64(id.PID) > math.MaxUint32 {
		return
	}
	pid := uint32(id.PID) // #nosec G115 -- range checked above
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil && procfs.StartFromBoottime(p.start) == id.Start {
		t.dropLocked(p)
	}
}

func (t *Tracker) dropLocked(p *proc) {
	if p.state == stateReady {
		t.o.Procs.Delete(p.pid)
	}
	t.freeCodes(p)
	delete(t.procs, p.pid)
	delete(t.waiting, p)
	if p.owner != "" {
		if m := t.jobs[p.owner]; m != nil {
			if m.procs--; m.procs <= 0 {
				delete(t.jobs, p.owner)
			}
		}
	}
	if par := p.parent; par != nil {
		delete(par.children, p)
		p.parent = nil
	}
	// Forked children point at it: they lose the link (their own state
	// stays).
	for q := range p.children {
		q.parent = nil
	}
	p.children = nil
}

// freeCodes drops a process's code cache.
func (t *Tracker) freeCodes(p *proc) {
	t.bytes -= p.codeBytes
	p.codeBytes, p.codes, p.lru = 0, nil, codeList{}
}

// current reports whether p is still the tracker's state of its pid.
func (t *Tracker) current(p *proc) bool { return t.procs[p.pid] == p }

func (t *Tracker) skip(p *proc, now time.Time, reason string) {
	// A process is often first seen mid-exec or before the dynamic linker
	// has mapped libpython: look again soon, a few times, then rarely.
	p.quick++
	if reason == "exited" {
		// Gone: nothing to look at again (a short process sampled once,
		// most of a pipeline's).
		p.quick = quickRechecks + 1
	}
	p.state, p.next = stateNone, now.Add(recheckNone)
	if p.quick <= quickRechecks {
		p.next = now.Add(quickFirst << (2 * (p.quick - 1)))
	}
	t.stats.Skipped[reason]++
	t.wait(p)
}

// wait keeps t.waiting: the processes Retry looks at.
func (t *Tracker) wait(p *proc) {
	if t.current(p) && (p.state == statePending || (p.state == stateNone && p.quick <= quickRechecks)) {
		t.waiting[p] = true
	} else {
		delete(t.waiting, p)
	}
}

// unreadable marks a process whose reading panicked (a bug, or structures
// forged past every check): it keeps native stacks, and is never read
// again while it lives. The agent goes on.
func (t *Tracker) unreadable(p *proc, v any, stack []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.Skipped["read_panic"]++
	if t.panics < 10 {
		t.panics++
		t.o.Log.Warn("reading a Python process panicked; it keeps native stacks", "pid", p.pid, "panic", fmt.Sprint(v), "stack", string(stack))
	}
	p.busy = false
	if !t.current(p) {
		return
	}
	if p.state == stateReady {
		t.o.Procs.Delete(p.pid)
	}
	p.state = stateUnreadable
	t.freeCodes(p)
	t.wait(p)
}

// recovered is deferred at the boundary of each read of one process's
// memory: a panic there marks the process unreadable.
func (t *Tracker) recovered(p *proc) {
	if v := recover(); v != nil {
		t.unreadable(p, v, debug.Stack())
	}
}

func reasonOf(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{{ErrNotPython, "not_python"}, {ErrUnknownVersion, "unknown_version"}, {ErrUnsupported, "unsupported"},
		{ErrBadInterpreter, "bad_interpreter"}, {ErrNotInitialized, "not_initialized"}, {budget.ErrWorkLimit, "read_allowance"}} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "open"
}

// candidate reports whether a mapping's file may hold the runtime: the
// executable (the first file mapped; for a static build such as Debian's)
// or any file whose name says python (libpython3.X.so, python3.X).
func candidate(m Mapping, first bool) bool {
	if m.Path == "" || m.Path[0] != '/' || m.Inode == 0 {
		return false
	}
	return first || strings.Contains(filepath.Base(m.Path), "python")
}

// setup is what a look at a process found, made off the lock and
// published by look.
type setup struct {
	owner    string
	start    uint64 // the process's (interp.Process.StartNs)
	mm       uint64
	in       *Interpreter // nil: not found
	runtime  uint64
	codeType uint64
	file     procfs.FileID
	ranges   *readable
	mem      Memory
	// Of validate: the runtime is initialised and checks out (ok), or
	// not initialised yet (notYet); else skip says why the process keeps
	// native stacks.
	ok, notYet bool
	skip       string
	panic      *panicError
}

// look sets p up, off the lock: discover (when it is not known to be
// CPython) or validate (when its runtime was not initialised), reading
// its maps, files and memory through the gate under its job's key. p is
// busy: no other look runs for it.
func (t *Tracker) look(p *proc) {
	defer t.recovered(p)
	t.mu.Lock()
	s := setup{owner: p.owner, start: p.start, mm: p.mm, in: p.in, runtime: p.runtime, codeType: p.codeType, file: p.file, ranges: p.ranges, mem: p.mem}
	state := p.state
	t.mu.Unlock()
	if s.owner == "" {
		s.owner = t.ownerOf(interp.Process{PID: p.pid, StartNs: p.start, MM: p.mm})
	}
	if state == statePending {
		t.validate(p.pid, &s)
	} else {
		t.discover(p.pid, &s)
	}
	if s.panic != nil {
		t.unreadable(p, s.panic.v, s.panic.stack)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p.busy = false
	if !t.current(p) {
		return // forgotten, or its pid reused, meanwhile
	}
	if p.owner == "" {
		p.owner = s.owner
		t.meterOf(p.owner).procs++
	}
	now := t.o.Now()
	switch {
	case s.skip != "":
		t.skip(p, now, s.skip)
	case s.in == nil:
		t.skip(p, now, "not_python")
	case state != statePending:
		p.in, p.runtime, p.codeType, p.file, p.mem = s.in, s.runtime, s.codeType, s.file, s.mem
		p.state, p.tries = statePending, 0
		fallthrough
	default:
		p.ranges = s.ranges
		switch {
		case s.ok:
			t.put(p)
		case s.notYet:
			p.tries++
			if p.tries > pendingTries {
				t.skip(p, now, "not_initialized")
				return
			}
			p.next = now.Add(min(pendingFirst<<min(p.tries, 16), pendingMax))
		}
	}
	t.wait(p)
}

// ownerOf is the key of a process's job in the gate and the meter.
func (t *Tracker) ownerOf(p interp.Process) string {
	if t.o.Owner != nil {
		if o := t.o.Owner(p); o != "" {
			return "job " + o
		}
	}
	return fmt.Sprintf("process %d/%d", p.PID, p.StartNs)
}

// read runs fn in the gate under s's key; false when it did not run to
// the end (stalled, refused or panicked: s.skip or s.panic say which).
func (t *Tracker) read(s *setup, fn func()) bool {
	err := t.gate.run(s.owner, fn)
	var pe *panicError
	switch {
	case err == nil:
		return true
	case errors.As(err, &pe):
		s.panic = pe
	default:
		s.skip = "stalled"
	}
	return false
}

// discover looks for the interpreter in the files pid maps.
func (t *Tracker) discover(pid uint32, s *setup) {
	var maps []Mapping
	var err error
	if !t.read(s, func() { maps, err = t.o.Maps.Maps(int(pid)) }) {
		return
	}
	if err != nil {
		s.skip = "maps"
		if errors.Is(err, procfs.ErrGone) {
			s.skip = "exited"
		}
		return
	}
	var firstErr error
	seen := map[string]bool{}
	first := true
	for _, m := range maps {
		if m.Path == "" || m.Inode == 0 || strings.HasPrefix(m.Path, "[") {
			continue
		}
		isFirst := first
		first = false
		if seen[m.Path] || !candidate(m, isFirst) {
			continue
		}
		seen[m.Path] = true
		in, err := t.inspect(int(pid), m, s)
		if s.skip != "" || s.panic != nil {
			return
		}
		if err == nil {
			err = in.Layout.check()
		}
		if err != nil {
			if firstErr == nil || errors.Is(firstErr, ErrNotPython) {
				firstErr = fmt.Errorf("%s: %w", m.Path, err)
			}
			continue
		}
		bias, ok := in.Bias(m.Start, m.Offset)
		if !ok {
			firstErr = fmt.Errorf("%w: %s: mapping at offset 0x%x in no segment", ErrBadInterpreter, m.Path, m.Offset)
			continue
		}
		s.in, s.runtime, s.file = in, in.Runtime+bias, m.File()
		if in.CodeType != 0 {
			s.codeType = in.CodeType + bias
		}
		s.mem = t.o.Memory(interp.Process{PID: pid, StartNs: s.start, MM: s.mm})
		s.ranges = readableOf(maps, s.file)
		t.validate(pid, s)
		return
	}
	if firstErr == nil {
		firstErr = ErrNotPython
	}
	s.skip = reasonOf(firstErr)
}

// inspect returns the interpreter in a mapped file, cached by the file's
// identity (never by its name or build id, which a job controls). The
// file is the job's: it is opened and read in the gate.
func (t *Tracker) inspect(pid int, m Mapping, s *setup) (*Interpreter, error) {
	var in *Interpreter
	var err error
	if !t.read(s, func() { in, err = t.inspectFile(pid, m) }) {
		return nil, nil
	}
	return in, err
}

// inspectFile runs in the gate: it may outlive its caller, so it closes
// what it opens and touches the tracker only under its lock.
func (t *Tracker) inspectFile(pid int, m Mapping) (*Interpreter, error) {
	// Identified first: a file inspected before (every process's libc,
	// each python3's binary) is not opened again.
	info, err := t.o.Open.StatMapped(pid, m)
	if err != nil {
		return nil, fmt.Errorf("open %s: %v", m.Path, err)
	}
	key := fileKey{dev: info.ID.Dev, ino: info.ID.Ino, size: info.Size, mtimeNsec: info.MtimeNsec}
	t.mu.Lock()
	r, ok := t.files[key]
	t.mu.Unlock()
	if ok {
		return r.in, r.err
	}
	f, err := t.o.Open.OpenMapped(pid, m)
	if err != nil {
		return nil, fmt.Errorf("open %s: %v", m.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %v", m.Path, err)
	}
	opened := fileKey{size: fi.Size(), mtimeNsec: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		opened.dev, opened.ino = uint64(st.Dev), st.Ino
	}
	if opened != key {
		return nil, fmt.Errorf("open %s: the file changed while it was opened", m.Path)
	}
	in, err := t.o.Inspect(f, m.Path, t.o.Arch)
	if errors.Is(err, budget.ErrWorkLimit) {
		// The job had read its allowance: the file is read again at the
		// next look, not taken for one that holds no interpreter.
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.files) >= maxFileResults {
		clear(t.files)
	}
	t.files[key] = fileResult{in, err}
	return in, err
}

// validate checks the layout against the live process before the walk
// trusts it: the first thread state must point back at its interpreter. A
// wrong version or a faked runtime fails here, and the process keeps native
// stacks, rather than getting wrong frames.
func (t *Tracker) validate(pid uint32, s *setup) {
	l := &s.in.Layout
	mem := &checkedMemory{mem: s.mem, ranges: s.ranges, remap: t.remap(pid, s.file)}
	var in, ts, back uint64
	var err error
	var notYet bool
	if !t.read(s, func() {
		defer mem.done()
		if in, err = readPtr(mem, s.runtime+uint64(l.RuntimeInterpretersHead)); err != nil || in == 0 {
			notYet = err == nil
			return
		}
		if ts, err = readPtr(mem, in+uint64(l.InterpThreadsHead)); err != nil || ts == 0 {
			notYet = err == nil
			return
		}
		back, err = readPtr(mem, ts+uint64(l.TstateInterp))
	}) {
		return
	}
	if mem.remapped {
		s.ranges = mem.ranges
	}
	switch {
	case notYet:
		s.notYet = true
	case err != nil && ts == 0:
		s.skip = "memory"
	case err != nil || back != in:
		s.skip = "bad_interpreter"
	default:
		s.ok = true
	}
}

// remap reads pid's maps again, for an address outside what they said.
func (t *Tracker) remap(pid uint32, file procfs.FileID) func() (*readable, error) {
	return func() (*readable, error) {
		maps, err := t.o.Maps.Maps(int(pid))
		if err != nil {
			return nil, err
		}
		return readableOf(maps, file), nil
	}
}

func (t *Tracker) put(p *proc) {
	l := &p.in.Layout
	info, err := NewProcInfo(*l, t.o.Arch, p.runtime)
	if err != nil {
		t.skip(p, t.o.Now(), reasonOf(err))
		return
	}
	if err := t.o.Procs.Put(interp.Process{PID: p.pid, StartNs: p.start, MM: p.mm}, info.encode()); err != nil {
		if p.state == stateReady && errors.Is(err, procfs.ErrGone) {
			// Its entry went with its last thread's exit, and a sample
			// taken in the rest of its exit (exit_mm comes after
			// sched_process_exit) announced it. What it sampled before
			// is drained later and still resolves until it is forgotten;
			// dropping it here lost its last interval's Python frames.
			return
		}
		reason := "bpf_map"
		if errors.Is(err, procfs.ErrGone) {
			reason = "exited" // as it was set up
		}
		t.skip(p, t.o.Now(), reason)
		return
	}
	if p.state == stateReady {
		return
	}
	t.stats.Found[fmt.Sprintf("%d.%d", l.Major, l.Minor)]++
	p.state = stateReady
	t.ready(p)
}

func (t *Tracker) ready(p *proc) {
	if t.o.Ready != nil {
		t.o.Ready(interp.Process{PID: p.pid, StartNs: p.start, MM: p.mm})
	}
}

// Start returns the start_boottime (ns) of the process the tracker holds
// under pid.
func (t *Tracker) Start(pid uint32) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil {
		return p.start, true
	}
	return 0, false
}

// Version returns the CPython version of a process set up for the walk.
func (t *Tracker) Version(pid uint32) (major, minor int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.procs[pid]
	if p == nil || p.state != stateReady {
		return 0, 0, false
	}
	return p.in.Major, p.in.Minor, true
}

// Stats returns a copy of the counters.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.stats
	s.Found, s.Skipped = map[string]uint64{}, map[string]uint64{}
	for k, v := range t.stats.Found {
		s.Found[k] = v
	}
	for k, v := range t.stats.Skipped {
		s.Skipped[k] = v
	}
	s.CodeBytes = t.bytes
	g := t.gate.stats()
	s.ReadStalls, s.ReadsRefused, s.StuckJobs = g.stalls, g.refused, g.stuck
	return s
}
