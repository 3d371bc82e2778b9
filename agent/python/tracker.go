package python

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// TrackerOptions configures a Tracker. Zero values select the defaults.
type TrackerOptions struct {
	Arch   Arch              // required
	Maps   interp.MapsReader // required
	Open   interp.Opener     // required
	Procs  interp.Table      // required
	Memory func(pid int) Memory
	// Ready is told of each process once it is set up; nil: nobody.
	Ready func(interp.Process)
	// Inspect reads a mapped file; default Inspect (tests fake it).
	Inspect func(r io.ReaderAt, name string, arch Arch) (*Interpreter, error)
	// MaxCodeBytes bounds the code-object cache (names, files, line
	// tables) over all processes. Default 16 MiB.
	MaxCodeBytes int64
	// MaxProcessCodeBytes bounds one process's share. Default a quarter of
	// MaxCodeBytes.
	MaxProcessCodeBytes int64
	// ReadBytesPerSecond bounds what resolving one process's frames may
	// read of its memory, so that a process that fakes a new code object
	// in every sample costs bounded work. Default 4 MiB/s, with a burst of
	// four seconds' worth.
	ReadBytesPerSecond int64
	Now                func() time.Time
}

// Tracker is CPython's interp.Instance: it finds the CPython processes the
// capture announces, writes their entries, and resolves their frames. It
// is safe for concurrent use.
type Tracker struct {
	o     TrackerOptions
	mu    sync.Mutex
	procs map[uint32]*proc
	files map[fileKey]fileResult
	bytes int64 // code cache, all processes
	stats Stats
}

// Stats counts what the Tracker did.
type Stats struct {
	// Found counts processes set up for the walk, by version ("3.11").
	Found map[string]uint64
	// Skipped counts processes left to native stacks, by reason:
	// not_python, unknown_version, unsupported, bad_interpreter,
	// not_initialized (never initialised within the retries), open, maps,
	// memory, bpf_map.
	Skipped map[string]uint64
	// Code-object cache: hits, misses (each a read of the process), code
	// objects that failed to read or validate, entries evicted for bytes,
	// frames left unresolved because the process's read budget was spent,
	// frames whose code object was gone (freed, its address reused) by
	// the time they were resolved, and frames whose code object could not
	// be read or was none (the process gone before its frames were
	// resolved, a freed or faked frame).
	CodeHits, CodeMisses, CodeBad, CodeEvicted, ReadBudgetExceeded, CodeGone, CodeUnreadable uint64
	CodeBytes                                                                                int64
	// Frames resolved, and Python stacks cut at MaxFrames.
	Frames, Truncated uint64
	// Forked counts children set up from their parent (Fork), and
	// ParentReads the code objects read from a forked child's parent
	// because the child's own memory was gone.
	Forked, ParentReads uint64
}

type procState uint8

const (
	stateNone    procState = iota // not (or not yet known to be) a CPython process we can walk
	statePending                  // a CPython process whose runtime is not initialised yet
	stateReady                    // in the capture's process table
)

type proc struct {
	pid        uint32
	start, mm  uint64
	state      procState
	next       time.Time // when to look again (none, pending)
	tries      int
	quick      int // rechecks so far of a process found not to be CPython
	in         *Interpreter
	runtime    uint64
	codeType   uint64
	mem        Memory
	codes      map[uint64]*codeInfo
	lru        codeList
	codeBytes  int64
	budget     float64
	budgetTime time.Time
	// parent is the process a forked child was copied from (Fork): code
	// objects made before the fork sit at the same addresses in both, and
	// the parent's memory still holds them once a short-lived child is gone.
	parent *proc
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
		o.Memory = func(pid int) Memory { return ProcessMemory(pid) }
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
		o.ReadBytesPerSecond = 4 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Tracker{o: o, procs: map[uint32]*proc{}, files: map[fileKey]fileResult{},
		stats: Stats{Found: map[string]uint64{}, Skipped: map[string]uint64{}}}
}

// Announce looks at a process the capture sampled without an entry.
func (t *Tracker) Announce(ev interp.Process) {
	if ev.MM == 0 {
		return // an exiting task: not another process (the BPF side does not send these)
	}
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
			return
		case p.state == statePending || now.Before(p.next):
			return
		}
	} else {
		if p != nil {
			t.dropLocked(p)
		}
		p = &proc{pid: ev.PID, start: ev.StartNs, mm: ev.MM}
		t.procs[ev.PID] = p
	}
	t.discover(p, now)
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
	c := &proc{pid: child.PID, start: child.StartNs, mm: child.MM, state: stateReady,
		in: par.in, runtime: par.runtime, codeType: par.codeType, mem: t.o.Memory(int(child.PID)), parent: par}
	t.procs[child.PID] = c
	t.stats.Forked++
	t.ready(c)
	return true
}

// Retry looks again at CPython processes whose runtime was not initialised
// yet, and soon after at processes first found not to be CPython (seen
// mid-exec, or before libpython was mapped). It reports whether any such
// process remains: while one does, call it every few milliseconds (a 2 s
// `python -c` must not wait long); otherwise only after the next Notify.
func (t *Tracker) Retry() (pending bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.o.Now()
	for _, p := range t.procs {
		switch {
		case now.Before(p.next):
		case p.state == statePending:
			t.validate(p, now)
		case p.state == stateNone && p.quick <= quickRechecks:
			t.discover(p, now)
		}
		pending = pending || p.state == statePending || (p.state == stateNone && p.quick <= quickRechecks)
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
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[uint32(id.PID)]; p != nil && procfs.StartFromBoottime(p.start) == id.Start { // #nosec G115 -- range checked above
		t.dropLocked(p)
	}
}

func (t *Tracker) dropLocked(p *proc) {
	if p.state == stateReady {
		t.o.Procs.Delete(p.pid)
	}
	t.bytes -= p.codeBytes
	delete(t.procs, p.pid)
	for _, q := range t.procs {
		if q.parent == p {
			q.parent = nil
		}
	}
}

func (t *Tracker) skip(p *proc, now time.Time, reason string) {
	// A process is often first seen mid-exec or before the dynamic linker
	// has mapped libpython: look again soon, a few times, then rarely.
	p.quick++
	p.state, p.next = stateNone, now.Add(recheckNone)
	if p.quick <= quickRechecks {
		p.next = now.Add(quickFirst << (2 * (p.quick - 1)))
	}
	t.stats.Skipped[reason]++
}

func reasonOf(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{{ErrNotPython, "not_python"}, {ErrUnknownVersion, "unknown_version"}, {ErrUnsupported, "unsupported"},
		{ErrBadInterpreter, "bad_interpreter"}, {ErrNotInitialized, "not_initialized"}} {
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

func (t *Tracker) discover(p *proc, now time.Time) {
	maps, err := t.o.Maps.Maps(int(p.pid))
	if err != nil {
		t.skip(p, now, "maps")
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
		in, err := t.inspect(int(p.pid), m)
		if err != nil {
			if firstErr == nil || errors.Is(firstErr, ErrNotPython) {
				firstErr = err
			}
			continue
		}
		if err := in.Layout.check(); err != nil {
			firstErr = fmt.Errorf("%s: %w", m.Path, err)
			continue
		}
		bias, ok := in.Bias(m.Start, m.Offset)
		if !ok {
			firstErr = fmt.Errorf("%w: %s: mapping at offset 0x%x in no segment", ErrBadInterpreter, m.Path, m.Offset)
			continue
		}
		p.in, p.runtime = in, in.Runtime+bias
		if in.CodeType != 0 {
			p.codeType = in.CodeType + bias
		}
		p.mem = t.o.Memory(int(p.pid))
		p.state, p.tries = statePending, 0
		t.validate(p, now)
		return
	}
	if firstErr == nil {
		firstErr = ErrNotPython
	}
	t.skip(p, now, reasonOf(firstErr))
}

// inspect returns the interpreter in a mapped file, cached by the file's
// identity (never by its name or build id, which a job controls).
func (t *Tracker) inspect(pid int, m Mapping) (*Interpreter, error) {
	f, err := t.o.Open.OpenMapped(pid, m)
	if err != nil {
		return nil, fmt.Errorf("open %s: %v", m.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %v", m.Path, err)
	}
	key := fileKey{size: fi.Size(), mtimeNsec: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		key.dev, key.ino = uint64(st.Dev), st.Ino
	}
	if r, ok := t.files[key]; ok {
		return r.in, r.err
	}
	in, err := t.o.Inspect(f, m.Path, t.o.Arch)
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
func (t *Tracker) validate(p *proc, now time.Time) {
	l := &p.in.Layout
	interp, err := readPtr(p.mem, p.runtime+uint64(l.RuntimeInterpretersHead))
	if err != nil {
		t.skip(p, now, "memory")
		return
	}
	var ts uint64
	if interp != 0 {
		if ts, err = readPtr(p.mem, interp+uint64(l.InterpThreadsHead)); err != nil {
			t.skip(p, now, "memory")
			return
		}
	}
	if interp == 0 || ts == 0 {
		p.tries++
		if p.tries > pendingTries {
			t.skip(p, now, "not_initialized")
			return
		}
		p.next = now.Add(min(pendingFirst<<min(p.tries, 16), pendingMax))
		return
	}
	back, err := readPtr(p.mem, ts+uint64(l.TstateInterp))
	if err != nil || back != interp {
		t.skip(p, now, "bad_interpreter")
		return
	}
	t.put(p)
}

func (t *Tracker) put(p *proc) {
	l := &p.in.Layout
	info, err := NewProcInfo(*l, t.o.Arch, p.runtime)
	if err != nil {
		t.skip(p, t.o.Now(), reasonOf(err))
		return
	}
	if err := t.o.Procs.Put(interp.Process{PID: p.pid, StartNs: p.start, MM: p.mm}, info.encode()); err != nil {
		t.skip(p, t.o.Now(), "bpf_map")
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
	return s
}
