// Package gputrace attributes GPU kernel time to the CPU stacks that
// launched the kernels. The C half (gpuinject/) runs inside CUDA jobs and calls
// three empty marker functions; this package attaches uprobes to them, takes
// the launching thread's user stack at each sampled launch, and joins
// launches with completed-kernel records on the correlation id (join.go).
//
// # Attaching per file, not per process
//
// The probes are attached once per library file (device and inode), for
// every process (perf pid -1), rather than once per (file, pid):
//
//   - A process announces each kernel name once, at its first launch, which
//     comes right after CUDA initialisation. A per-pid probe attached by a
//     rescan a second later would have missed those announcements for good,
//     and with them the names of the kernels every training step runs.
//     A per-file probe (attached at startup with AttachFile, or by the first
//     Attach of any process) sees every later process from its first call.
//   - The uprobe lives on the inode, so one attachment covers every job on
//     the node that loads the installed library, at no cost per process.
//
// No pid filter is applied in BPF: the process identity in every event is
// the kernel's (tgid and the leader's start time), never a marker argument,
// so a process can only describe itself, and the daemon attributes and
// filters processes as it does for CPU samples. Processes that never map an
// attached file are never probed at all.
package gputrace

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/source"
)

// Options configures a Tracer. Zero values select the defaults.
type Options struct {
	// Proc is the host's procfs. Default /proc.
	Proc procfs.FS
	// ExcludePID is a process not to trace, normally the agent itself.
	ExcludePID int
	// RingBufferBytes is the size of the BPF ring buffer, a power of two
	// multiple of the page size. Default 8 MiB: a launch event takes 2.9
	// KiB (its native and interpreter stacks, NVTX ranges), a batch of 64 records 3.6 KiB.
	RingBufferBytes int
	// MaxFiles bounds the library files attached at once. A job can copy
	// the library under any name, so this is a bound, not a guess. Default 32.
	MaxFiles int
	// Bounds of the join state; see join.go. Defaults: 4096 processes,
	// 65536 pending launches (16384 per process, the library's own table
	// size), 16384 records waiting for their launch, 16384 names per
	// process and 64 MiB of names in all.
	MaxProcesses, MaxPendingLaunches, MaxPendingLaunchesPerProcess int
	MaxHeldRecords, MaxNamesPerProcess, MaxNameBytes               int
	// LaunchTimeout is how long a sampled launch waits for its kernel
	// record. CUPTI hands records over when a buffer fills or at exit, which
	// can be minutes for a slow job. Default 10 minutes.
	LaunchTimeout time.Duration
	// RecordGrace is how long a record flagged sampled waits for a launch
	// event not seen yet before it counts as unsampled. Default 2 s.
	RecordGrace time.Duration
	// UserCallsPerSecond and UserCallsBurst are each user's (uid's) ration
	// of marker calls: the ring buffer is shared by every job and the
	// markers are exported, so one user calling them in a loop would
	// otherwise crowd out every other user's events. While the reader
	// keeps up nothing is dropped; once the ring is half full, the calls
	// of users who used more than half their ration are dropped in the
	// kernel, counted (rate_limited), leaving the other half to the users
	// who call little. Defaults
	// 2048 a second (131,072 records: a batch holds 64) and 16384 at once;
	// -1: no ration.
	UserCallsPerSecond, UserCallsBurst int
	// Budget, when set, holds what each process makes the tracer keep
	// (launches, names, the interval's rows), charged to Owner(process):
	// its job (budget.JobOwner). See join.go.
	Budget *budget.Budget
	Owner  func(procfs.ID) string
	// Stacks is the user-stack capture the probes share with the CPU
	// sampler (stack.h: the table unwinder and the interpreter walks),
	// which also resolves each launch's interpreter frames as its event is
	// read, while the process lives. nil: frame pointers only, no
	// interpreter frames.
	Stacks source.Stacks
	// Now is the clock; tests replace it.
	Now func() time.Time
}

func (o *Options) setDefaults() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Proc.Root == "" {
		o.Proc = procfs.New("")
	}
	def(&o.RingBufferBytes, 8<<20)
	def(&o.MaxFiles, 32)
	def(&o.MaxProcesses, 4096)
	def(&o.MaxPendingLaunches, 65536)
	def(&o.MaxPendingLaunchesPerProcess, 16384)
	def(&o.MaxHeldRecords, 16384)
	def(&o.MaxNamesPerProcess, 16384)
	def(&o.MaxNameBytes, 64<<20)
	def(&o.UserCallsPerSecond, 2048)
	def(&o.UserCallsBurst, 16384)
	if o.LaunchTimeout == 0 {
		o.LaunchTimeout = 10 * time.Minute
	}
	if o.RecordGrace == 0 {
		o.RecordGrace = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.UserCallsPerSecond < 0 {
		o.UserCallsPerSecond, o.UserCallsBurst = 0, 0 // no ration
	}
	for _, v := range []int{o.ExcludePID, o.RingBufferBytes, o.MaxFiles, o.MaxProcesses, o.MaxPendingLaunches,
		o.MaxPendingLaunchesPerProcess, o.MaxHeldRecords, o.MaxNamesPerProcess, o.MaxNameBytes, o.UserCallsBurst} {
		if v < 0 {
			return fmt.Errorf("negative option in %+v", *o)
		}
	}
	if o.LaunchTimeout < 0 || o.RecordGrace < 0 {
		return fmt.Errorf("negative timeout in %+v", *o)
	}
	return nil
}

func (o *Options) limits() limits {
	return limits{
		maxProcesses: o.MaxProcesses, maxLaunches: o.MaxPendingLaunches,
		maxLaunchesPerProcess: o.MaxPendingLaunchesPerProcess, maxHeld: o.MaxHeldRecords,
		maxNamesPerProcess: o.MaxNamesPerProcess, maxNameBytes: o.MaxNameBytes,
		launchTimeout: o.LaunchTimeout, recordGrace: o.RecordGrace,
		budget: o.Budget, owner: o.Owner,
	}
}

// Stats are counters since New; they only grow, except the gauges at the
// end.
type Stats struct {
	// BPF side: marker calls turned into events, and calls dropped.
	LaunchEvents, RecordBatches, NameEvents uint64
	StateEvents                             uint64 // slurmscope_trace_state calls
	StackErrors                             uint64 // launches without a user stack
	LostRingBuffer                          uint64 // events dropped because the ring buffer was full
	BadArgs                                 uint64 // calls with n or len out of range
	ReadErrors                              uint64 // calls whose user memory could not be read
	SkippedSelf                             uint64
	RateLimited                             uint64 // calls over their user's ration (UserCallsPerSecond)
	// Go side.
	DecodeErrors                     uint64 // malformed events (a bug, not a caller)
	Records                          uint64 // kernel records received
	MatchedRecords, UnsampledRecords uint64 // joined with a launch / not
	ExpiredLaunches, EvictedLaunches uint64 // launches that never saw their record
	HeldRecords, ExpiredHeld         uint64 // sampled records that waited for their launch
	EvictedHeld                      uint64
	RejectedNames                    uint64 // names whose id is not their hash, or empty
	DroppedNames                     uint64 // names over a bound
	TruncatedStacks                  uint64
	OverBudgetLaunches               uint64 // launches and names dropped: the job's memory share was full
	OverBudgetNames                  uint64
	FoldedRecords                    uint64 // records put under OverBudgetFrame
	EvictedProcesses                 uint64
	ExitedProcesses                  uint64
	StepAsides, Resumes              uint64 // the library stepped aside for a process's own CUPTI client, and came back
	FlushTimeouts                    uint64 // drains that could not wait for the reader
	AttachErrors                     uint64
	// Gauges.
	AttachedFiles   int
	PendingLaunches int
	Processes       int
	Stacks          int
}

type attachedFile struct {
	path  string
	links []link.Link
}

// errClosed is returned by a closed Tracer.
var errClosed = errors.New("gpu tracer: closed")

// Tracer attaches to injection libraries and joins their events until
// Close. Its methods are safe for concurrent use.
type Tracer struct {
	opts Options

	objs    markersObjects
	rd      *ringbuf.Reader
	flushed chan struct{}
	// flushWant is what a Drain waits for: the bytes that were in the
	// ring when it asked (want), under a request number (seq). While jobs
	// keep the ring busy it is never empty, so "consumed what was there"
	// is the handshake, not "empty".
	flushWant atomic.Pointer[flushRequest]
	done      chan struct{}

	attachMu     sync.Mutex
	files        map[procfs.FileID]*attachedFile
	procs        map[procfs.ID]procfs.FileID // attached processes
	attachErrors uint64

	drainMu sync.Mutex // one Drain at a time: it owns the flush handshake

	mu           sync.Mutex // the joiner and the Go-side counters
	join         *joiner
	decodeErrors uint64
	flushTimeout uint64
	closed       bool
}

// New loads the programs; nothing is traced before Attach or AttachFile. It
// needs CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN (map_files), or root.
func New(opts Options) (*Tracer, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, fmt.Errorf("gpu tracer: %w", err)
	}
	spec, err := loadMarkers()
	if err != nil {
		return nil, fmt.Errorf("gpu tracer: %w", err)
	}
	spec.Maps[markersMapEvents].MaxEntries = uint32(opts.RingBufferBytes) // #nosec G115 -- a power of two the kernel accepts (checked in setDefaults)
	t := &Tracer{opts: opts, flushed: make(chan struct{}, 1), done: make(chan struct{}),
		files: map[procfs.FileID]*attachedFile{}, procs: map[procfs.ID]procfs.FileID{}, join: newJoiner(opts.limits())}
	consts := map[string]any{markersVarExcludeTgid: uint32(opts.ExcludePID), markersVarWakeupBytes: uint64(opts.RingBufferBytes / 4), // #nosec G115 -- not negative (setDefaults), a pid
		markersVarUserCallsPerSec: uint64(opts.UserCallsPerSecond), markersVarUserCallsBurst: uint64(opts.UserCallsBurst)} // #nosec G115 -- not negative (setDefaults)
	var shared map[string]*ebpf.Map
	if opts.Stacks != nil {
		c, m, err := opts.Stacks.Prepare(spec)
		if err != nil {
			return nil, fmt.Errorf("gpu tracer: %w", err)
		}
		for k, v := range c {
			consts[k] = v
		}
		shared = m
	}
	if err := bpf.LoadWith(spec, consts, shared, &t.objs); err != nil {
		return nil, fmt.Errorf("gpu tracer: %w", err)
	}
	t.rd, err = ringbuf.NewReader(t.objs.Events)
	if err != nil {
		t.objs.Close()
		return nil, fmt.Errorf("gpu tracer: %w", err)
	}
	go t.readLoop()
	return t, nil
}

// Attach makes sure process id is traced: if it maps the injection
// library, the library file is attached (once per file, for all
// processes). It returns ErrNotInjected when the library is not mapped, so
// a rescan can try again later (CUDA loads it at initialisation), and an
// error wrapping fs.ErrNotExist when the process is gone or its pid was
// reused. Calling it again for an attached process costs a map lookup.
func (t *Tracer) Attach(id procfs.ID) error {
	pid := id.PID
	t.attachMu.Lock()
	defer t.attachMu.Unlock()
	if t.files == nil {
		return errClosed
	}
	if fk, ok := t.procs[id]; ok && t.files[fk] != nil {
		return nil
	}
	m, err := FindMapping(t.opts.Proc, pid)
	if err != nil {
		return err
	}
	// The pid may have been reused between the caller's scan and ours.
	if now, err := t.opts.Proc.ID(pid); err != nil {
		return err
	} else if now != id {
		return fmt.Errorf("pid %d started at %d, not %d: %w", pid, now.Start, id.Start, fs.ErrNotExist)
	}
	st, err := t.opts.Proc.Status(pid)
	if err != nil {
		return err
	}
	// The very file the process maps (map_files), or the same file by its
	// path in the process's root; never what a link there points to.
	f, err := t.opts.Proc.Open(procfs.JobFile{PID: pid, Mapping: &m, UID: st.UID, MaxSize: maxLibraryBytes})
	if err == nil {
		defer f.Close()
		err = t.attachLocked(f.File, f.Reader(), f.Info.ID)
	}
	if err != nil {
		t.attachErrors++
		return fmt.Errorf("gpu tracer: attach pid %d: %w", pid, err)
	}
	if len(t.procs) >= 4*t.opts.MaxProcesses {
		clear(t.procs) // only a shortcut for repeated calls
	}
	t.procs[id] = f.Info.ID
	return nil
}

// AttachFile attaches to the injection library at path (in the agent's
// mount namespace), e.g. the installed library that CUDA_INJECTION64_PATH
// names, so that every process loading it is traced from its first marker
// call. Attaching a file twice (under any name) is a no-op.
func (t *Tracer) AttachFile(path string) error {
	t.attachMu.Lock()
	defer t.attachMu.Unlock()
	if t.files == nil {
		return errClosed
	}
	// The installed library, named by the agent's own flag: not a file a
	// job controls.
	f, err := os.Open(path)
	if err == nil {
		defer f.Close()
		var fi os.FileInfo
		if fi, err = f.Stat(); err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s: not a regular file", path)
		}
		if err == nil {
			st := fi.Sys().(*syscall.Stat_t)
			err = t.attachLocked(f, io.NewSectionReader(f, 0, fi.Size()), procfs.FileID{Dev: st.Dev, Ino: st.Ino})
		}
	}
	if err != nil {
		t.attachErrors++
		return fmt.Errorf("gpu tracer: %w", err)
	}
	return nil
}

// attachLocked attaches the probes to the open library file f (read
// through r, of its real size), identified as fk.
func (t *Tracer) attachLocked(f *os.File, r *io.SectionReader, fk procfs.FileID) error {
	path := f.Name()
	if t.files[fk] != nil {
		return nil
	}
	if len(t.files) >= t.opts.MaxFiles {
		return fmt.Errorf("%s: already %d library files attached", path, len(t.files))
	}
	v, err := readABIVersion(r, r.Size())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if v != abiVersion {
		return fmt.Errorf("%s: marker ABI version %d, this agent speaks %d", path, v, abiVersion)
	}
	// The kernel resolves a uprobe's path itself: name the open
	// descriptor, so that it attaches to the file checked here, whatever
	// the path names by then.
	ex, err := link.OpenExecutable(procfs.FDPath(f.Fd()))
	if err != nil {
		return err
	}
	af := &attachedFile{path: path}
	for _, p := range []struct {
		sym      string
		prog     *ebpf.Program
		optional bool // libraries built before it lack it
	}{
		// Names first: once attached, a name announced in the meantime is
		// seen before the launches that use it.
		{"slurmscope_kernel_name", t.objs.KernelName, false},
		{"slurmscope_kernel_records", t.objs.KernelRecords, false},
		{"slurmscope_kernel_launch", t.objs.KernelLaunch, false},
		{"slurmscope_trace_state", t.objs.TraceState, true},
	} {
		l, err := ex.Uprobe(p.sym, p.prog, nil) // pid 0: all processes, see the package doc
		if p.optional && errors.Is(err, link.ErrNoSymbol) {
			continue
		}
		if err != nil {
			for _, l := range af.links {
				l.Close()
			}
			return fmt.Errorf("%s: uprobe %s: %w", path, p.sym, err)
		}
		af.links = append(af.links, l)
	}
	t.files[fk] = af
	return nil
}

// flushRequest is a Drain's: consume want bytes of the ring.
type flushRequest struct {
	want int64
}

// ringRecordBytes is what a sample of n bytes takes in a BPF ring buffer:
// an 8-byte header, the data rounded up to 8 (BPF_RINGBUF_HDR_SZ, kernel
// ABI).
func ringRecordBytes(n int) int64 { return 8 + int64(n+7)&^7 }

func (t *Tracer) readLoop() {
	defer close(t.done)
	var rec ringbuf.Record
	var recs []kernelRecord
	var req *flushRequest
	var consumed int64
	ack := func() {
		select {
		case t.flushed <- struct{}{}:
		default:
		}
	}
	for {
		// The probes wake the reader only when the ring is a quarter full;
		// the deadline makes it poll the rest.
		t.rd.SetDeadline(time.Now().Add(pollInterval))
		err := t.rd.ReadInto(&rec)
		if r := t.flushWant.Load(); r != req {
			req, consumed = r, 0
		}
		switch {
		case err == nil:
			recs = t.handle(rec.RawSample, recs[:0])
			if req != nil {
				if consumed += ringRecordBytes(len(rec.RawSample)); consumed >= req.want {
					t.flushWant.CompareAndSwap(req, nil)
					ack()
				}
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, ringbuf.ErrFlushed):
			ack()
		case errors.Is(err, os.ErrClosed):
			return
		default:
			t.mu.Lock()
			t.decodeErrors++
			t.mu.Unlock()
		}
	}
}

// handle decodes one event into the joiner; recs is scratch space.
func (t *Tracer) handle(b []byte, recs []kernelRecord) []kernelRecord {
	now := t.opts.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	h, err := decodeHeader(b)
	if err == nil {
		switch markersEventKind(h.kind) {
		case markersEventKindEVENT_LAUNCH:
			var e launchEvent
			if e, err = decodeLaunch(h, b); err == nil {
				if e.raw != nil && t.opts.Stacks != nil {
					e.interp = t.opts.Stacks.Resolve(uint32(h.proc.PID), le.Uint64(b[8:]), e.raw) // #nosec G115 -- a pid is below pid_max (at most 2^22)
				}
				t.join.launch(e, now)
			}
		case markersEventKindEVENT_RECORDS:
			if recs, err = decodeRecords(recs, b); err == nil {
				t.join.records(h, recs, now)
			}
		case markersEventKindEVENT_NAME:
			var e nameEvent
			if e, err = decodeName(h, b); err == nil {
				t.join.name(e)
			}
		case markersEventKindEVENT_STATE:
			var e stateEvent
			if e, err = decodeState(h, b); err == nil {
				t.join.state(e)
			}
		default:
			err = fmt.Errorf("event kind %d", h.kind)
		}
	}
	if err != nil {
		t.decodeErrors++
	}
	return recs
}

// pollInterval is how often the reader looks at the ring buffer without
// being woken.
const pollInterval = 100 * time.Millisecond

// flushWait bounds how long Drain waits for the reader to catch up. What
// it has not read by then is the next interval's: a reader kept behind (a
// job flooding the markers, starved of CPU) must not hold every job's
// interval, nor the agent's stop.
const flushWait = time.Second

// Drain returns the GPU time joined since the previous Drain (or New) and
// clears it, with the counters since New. Every event the probes emitted
// before the call is included. An error other than from a closed Tracer
// comes with the samples: only the counters are off. Samples are sorted by
// process, then kernel, device and stack.
func (t *Tracer) Drain() ([]Sample, Stats, error) {
	t.drainMu.Lock()
	defer t.drainMu.Unlock()
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, Stats{}, errClosed
	}
	// Make the reader consume everything committed so far, then wait for it
	// to say so.
	select {
	case <-t.flushed:
	default:
	}
	timedOut := false
	t.flushWant.Store(&flushRequest{want: int64(t.rd.AvailableBytes())})
	if err := t.rd.Flush(); err == nil {
		select {
		case <-t.flushed:
		case <-time.After(flushWait):
			timedOut = true
		}
	}
	t.flushWant.Store(nil)
	bst, berr := t.bpfStats()

	t.mu.Lock()
	defer t.mu.Unlock()
	if timedOut {
		t.flushTimeout++
	}
	samples := t.join.drain(t.opts.Now(), t.alive)
	st := t.statsLocked(bst)
	if berr != nil {
		berr = fmt.Errorf("gpu tracer: %w", berr)
	}
	return samples, st, berr
}

// alive reports whether a process still runs; an unreadable /proc keeps it.
func (t *Tracer) alive(id procfs.ID) bool {
	now, err := t.opts.Proc.ID(id.PID)
	if err != nil {
		return !errors.Is(err, procfs.ErrGone)
	}
	return now == id
}

func (t *Tracer) bpfStats() (Stats, error) {
	var st Stats
	fields := map[markersStatIndex]*uint64{
		markersStatIndexSTAT_LAUNCHES:       &st.LaunchEvents,
		markersStatIndexSTAT_RECORD_BATCHES: &st.RecordBatches,
		markersStatIndexSTAT_NAMES:          &st.NameEvents,
		markersStatIndexSTAT_STACK_ERRORS:   &st.StackErrors,
		markersStatIndexSTAT_LOST_RINGBUF:   &st.LostRingBuffer,
		markersStatIndexSTAT_BAD_ARGS:       &st.BadArgs,
		markersStatIndexSTAT_READ_ERRORS:    &st.ReadErrors,
		markersStatIndexSTAT_SKIPPED_SELF:   &st.SkippedSelf,
		markersStatIndexSTAT_RATE_LIMITED:   &st.RateLimited,
		markersStatIndexSTAT_STATES:         &st.StateEvents,
	}
	var perCPU []uint64
	for idx, dst := range fields {
		if err := t.objs.Stats.Lookup(uint32(idx), &perCPU); err != nil {
			return st, fmt.Errorf("read stats: %w", err)
		}
		for _, v := range perCPU {
			*dst += v
		}
	}
	return st, nil
}

func (t *Tracer) statsLocked(st Stats) Stats {
	j := t.join.st
	st.DecodeErrors = t.decodeErrors
	st.Records = j.Records
	st.MatchedRecords, st.UnsampledRecords = j.MatchedRecords, j.UnsampledRecords
	st.ExpiredLaunches, st.EvictedLaunches = j.ExpiredLaunches, j.EvictedLaunches
	st.HeldRecords, st.ExpiredHeld, st.EvictedHeld = j.HeldRecords, j.ExpiredHeld, j.EvictedHeld
	st.RejectedNames, st.DroppedNames = j.RejectedNames, j.DroppedNames
	st.TruncatedStacks = j.TruncatedStacks
	st.OverBudgetLaunches, st.OverBudgetNames, st.FoldedRecords = j.OverBudgetLaunches, j.OverBudgetNames, j.FoldedRecords
	st.EvictedProcesses, st.ExitedProcesses = j.EvictedProcesses, j.ExitedProcesses
	st.StepAsides, st.Resumes = j.StepAsides, j.Resumes
	st.FlushTimeouts = t.flushTimeout
	st.PendingLaunches = t.join.launches.Len()
	st.Processes = len(t.join.procs)
	st.Stacks = t.join.stacks.live()
	t.attachMu.Lock()
	st.AttachedFiles = len(t.files)
	st.AttachErrors = t.attachErrors
	t.attachMu.Unlock()
	return st
}

// Close detaches every probe and unloads the programs. Traced processes are
// unaffected: the markers are ordinary functions again. Undrained data is
// discarded.
func (t *Tracer) Close() error {
	t.drainMu.Lock()
	defer t.drainMu.Unlock()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()

	var errs []error
	t.attachMu.Lock()
	for _, f := range t.files {
		for _, l := range f.links {
			errs = append(errs, l.Close())
		}
	}
	t.files = nil
	t.attachMu.Unlock()
	errs = append(errs, t.rd.Close())
	<-t.done
	errs = append(errs, t.objs.Close())
	return errors.Join(errs...)
}
