package nvtx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/logx"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/source"
)

// Markers of gpuinject/slurmscope_nvtx.h.
const (
	markerThread = "slurmscope_nvtx_thread"
	markerName   = "slurmscope_nvtx_range_name"
)

// Preparer readies a program that includes stack.h: agent/stackwalk's
// Walker, whose shared maps (nvtx_threads among them) the probes write.
type Preparer interface {
	Prepare(spec *ebpf.CollectionSpec) (consts map[string]any, maps map[string]*ebpf.Map, err error)
}

// Options configure a Tracker. Zero values select the defaults.
type Options struct {
	Proc   procfs.FS // default /proc
	Stacks Preparer  // required
	Names  *Names    // required: where announced names go
	// ExcludePID is a process whose calls are not taken (the agent).
	ExcludePID int
	// CallsPerSecond is each process's ration of marker calls (new
	// thread registrations and name announcements together; a
	// re-registration of a known struct is free). Default 4096: the
	// library announces at most 256 names and 256 threads a second
	// besides first uses.
	CallsPerSecond int
	// RingBufferBytes sizes the names' ring buffer (a power of two
	// multiple of the page size). Default 1 MiB, about 2700 names.
	RingBufferBytes int
	// MaxFiles bounds the library files attached (a job can copy the
	// library under any name). Default 32.
	MaxFiles int
	Log      *slog.Logger
}

// Tracker attaches the NVTX probes to the injection library files the
// profiled processes map (once per file, for every process, as
// agent/gputrace does) and feeds the names the probes read to Names. It is
// a source.ProcessAttacher the daemon tells of every profiled process.
type Tracker struct {
	o    Options
	objs probesObjects
	rd   *ringbuf.Reader
	done chan struct{}

	mu      sync.Mutex
	files   map[procfs.FileID][]link.Link
	pending map[procfs.ID]*retry
	closed  bool
	st      TrackerStats
	errs    *logx.Limiter
	stop    chan struct{}
	wg      sync.WaitGroup
}

// retry is a process whose library was not mapped yet when the daemon
// first told of it: NVTX loads the library at the process's first NVTX
// call, which may come late.
type retry struct {
	next  time.Time
	delay time.Duration
}

// TrackerStats count the tracker's work.
type TrackerStats struct {
	AttachedFiles, AttachErrors, NotInjected uint64
	PendingFull                              uint64 // processes not watched for a late library: too many pending
	Decode                                   uint64 // events too short
}

var _ source.ProcessAttacher = (*Tracker)(nil)

// Bounds of the wait for a library loaded late.
const (
	maxPending   = 4096
	retryFirst   = time.Second
	retryMax     = 30 * time.Second
	retryTick    = time.Second
	retryPerTick = 256
	maxLibBytes  = 64 << 20 // as agent/gputrace's bound of the library file
)

// New loads the probes with the capture's shared maps; nothing is probed
// before a process mapping the library is attached.
func New(o Options) (*Tracker, error) {
	if o.Stacks == nil || o.Names == nil {
		return nil, errors.New("nvtx: Stacks and Names are required")
	}
	if o.Proc.Root == "" {
		o.Proc = procfs.New("")
	}
	if o.CallsPerSecond <= 0 {
		o.CallsPerSecond = 4096
	}
	if o.RingBufferBytes <= 0 {
		o.RingBufferBytes = 1 << 20
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = 32
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	spec, err := loadProbes()
	if err != nil {
		return nil, fmt.Errorf("nvtx: %w", err)
	}
	spec.Maps[probesMapNvtxNames].MaxEntries = uint32(o.RingBufferBytes) // #nosec G115 -- a ring size the kernel checks
	consts, maps, err := o.Stacks.Prepare(spec)
	if err != nil {
		return nil, fmt.Errorf("nvtx: %w", err)
	}
	consts[probesVarExcludeTgid] = uint32(o.ExcludePID)         // #nosec G115 -- a pid
	consts[probesVarProcCallsPerSec] = uint32(o.CallsPerSecond) // #nosec G115 -- a rate, positive
	t := &Tracker{o: o, done: make(chan struct{}), stop: make(chan struct{}), files: map[procfs.FileID][]link.Link{},
		pending: map[procfs.ID]*retry{}, errs: logx.NewLimiter(o.Log, logx.Options{})}
	if err := bpf.LoadWith(spec, consts, maps, &t.objs); err != nil {
		return nil, fmt.Errorf("nvtx: %w", err)
	}
	if t.rd, err = ringbuf.NewReader(t.objs.NvtxNames); err != nil {
		t.objs.Close()
		return nil, fmt.Errorf("nvtx: %w", err)
	}
	t.wg.Add(1)
	go t.retryLoop()
	go t.readLoop()
	return t, nil
}

// nameEventLen is struct nvtx_name_event's size; TestEventLayout checks it
// against the generated type.
const (
	nameEventHead = 32
	nameTextMax   = 328
	nameEventLen  = nameEventHead + nameTextMax
)

// decodeName decodes one name event: the process (from the kernel), the
// id, the text copied and the claimed domain length. ok is false for an
// event too short, or whose text was cut (a text longer than any the
// library sends: refused).
func decodeName(b []byte) (p procfs.ID, id uint64, text []byte, domainLen uint32, ok bool) {
	if len(b) < nameEventLen {
		return p, 0, nil, 0, false
	}
	le := binary.LittleEndian
	tgid, n := le.Uint32(b), le.Uint32(b[4:])
	copied := le.Uint32(b[28:])
	if copied != n || n > nameTextMax {
		return p, 0, nil, 0, false
	}
	p = procfs.ID{PID: int(tgid), Start: procfs.StartFromBoottime(le.Uint64(b[8:]))}
	return p, le.Uint64(b[16:]), b[nameEventHead : nameEventHead+int(n)], le.Uint32(b[24:]), true
}

func (t *Tracker) readLoop() {
	defer close(t.done)
	var rec ringbuf.Record
	for {
		err := t.rd.ReadInto(&rec)
		switch {
		case err == nil:
			p, id, text, dl, ok := decodeName(rec.RawSample)
			if !ok {
				t.mu.Lock()
				t.st.Decode++
				t.mu.Unlock()
				continue
			}
			if err := t.o.Names.Add(p, id, text, dl); err != nil {
				t.errs.Log(slog.LevelInfo, "nvtx_name", "an NVTX range name was refused", err)
			}
		case errors.Is(err, os.ErrClosed):
			return
		default:
			t.mu.Lock()
			t.st.Decode++
			t.mu.Unlock()
		}
	}
}

// AttachProcess attaches the probes to the injection library process id
// maps, once per file for every process. A process that does not map it
// yet is looked at again, less and less often.
func (t *Tracker) AttachProcess(id procfs.ID) (source.Attach, error) {
	err := t.attach(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case errors.Is(err, gputrace.ErrNotInjected):
		t.st.NotInjected++
		if t.pending[id] == nil {
			if len(t.pending) >= maxPending {
				t.st.PendingFull++
			} else {
				t.pending[id] = &retry{next: time.Now().Add(retryFirst), delay: retryFirst}
			}
		}
		return source.AttachRetry, nil
	case err != nil && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)):
		delete(t.pending, id)
		return source.AttachDone, nil
	case err != nil:
		t.st.AttachErrors++
		delete(t.pending, id)
		return source.AttachDone, err
	}
	delete(t.pending, id)
	return source.AttachDone, nil
}

// attach finds and attaches the library process id maps.
func (t *Tracker) attach(id procfs.ID) error {
	m, err := gputrace.FindMapping(t.o.Proc, id.PID)
	if err != nil {
		return err
	}
	if now, err := t.o.Proc.ID(id.PID); err != nil {
		return err
	} else if now != id {
		return fmt.Errorf("pid %d reused: %w", id.PID, fs.ErrNotExist)
	}
	st, err := t.o.Proc.Status(id.PID)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("nvtx: closed")
	}
	// The installed library, attached for another process already: no
	// need to open it (maps' device may differ from fstat's on btrfs;
	// then it is opened, and found attached by its own identity).
	if _, ok := t.files[procfs.FileID{Dev: m.Dev, Ino: m.Inode}]; ok {
		return nil
	}
	f, err := t.o.Proc.Open(procfs.JobFile{PID: id.PID, Mapping: &m, UID: st.UID, MaxSize: maxLibBytes})
	if err != nil {
		return fmt.Errorf("nvtx: open the library of pid %d: %w", id.PID, err)
	}
	defer f.Close()
	return t.attachLocked(f.File, f.Info.ID)
}

// AttachFile attaches the installed library at path (the agent's own
// flag, not a file a job controls).
func (t *Tracker) AttachFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("nvtx: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("nvtx: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return fmt.Errorf("nvtx: %s: not a regular file", path)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.attachLocked(f, procfs.FileID{Dev: st.Dev, Ino: st.Ino})
}

// attachLocked attaches the two probes to open file f, identified as fk.
// A library without the NVTX markers (built before them) is remembered
// with no probes.
func (t *Tracker) attachLocked(f *os.File, fk procfs.FileID) error {
	if _, ok := t.files[fk]; ok {
		return nil
	}
	if len(t.files) >= t.o.MaxFiles {
		return fmt.Errorf("nvtx: %s: already %d library files attached", f.Name(), len(t.files))
	}
	// Named by the open descriptor: the file checked is the one probed.
	ex, err := link.OpenExecutable(procfs.FDPath(f.Fd()))
	if err != nil {
		return fmt.Errorf("nvtx: %w", err)
	}
	var links []link.Link
	// Names first: a name announced once the thread probe is on is not
	// missed.
	for _, p := range []struct {
		sym  string
		prog *ebpf.Program
	}{{markerName, t.objs.NvtxRangeName}, {markerThread, t.objs.NvtxThread}} {
		l, err := ex.Uprobe(p.sym, p.prog, nil) // all processes: see agent/gputrace
		if errors.Is(err, link.ErrNoSymbol) {
			break
		}
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return fmt.Errorf("nvtx: %s: uprobe %s: %w", f.Name(), p.sym, err)
		}
		links = append(links, l)
	}
	if len(links) == 1 { // one marker without the other: not the ABI
		links[0].Close()
		links = nil
	}
	t.files[fk] = links
	t.st.AttachedFiles++
	return nil
}

// retryLoop looks again at the processes whose library was not mapped.
func (t *Tracker) retryLoop() {
	defer t.wg.Done()
	tick := time.NewTicker(retryTick)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case now := <-tick.C:
			var due []procfs.ID
			t.mu.Lock()
			for id, r := range t.pending {
				if len(due) >= retryPerTick {
					break
				}
				if !now.Before(r.next) {
					due = append(due, id)
					r.delay = min(2*r.delay, retryMax)
					r.next = now.Add(r.delay)
				}
			}
			t.mu.Unlock()
			for _, id := range due {
				if _, err := t.AttachProcess(id); err != nil {
					t.errs.Log(slog.LevelWarn, "nvtx_attach", "attaching the NVTX probes failed", err)
				}
			}
		}
	}
}

// ForgetProcess drops a process that exited: its names, and its wait for
// the library.
func (t *Tracker) ForgetProcess(id procfs.ID) {
	t.mu.Lock()
	delete(t.pending, id)
	t.mu.Unlock()
	t.o.Names.Forget(id)
}

// Stats returns the tracker's counters.
func (t *Tracker) Stats() TrackerStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

// ProbeStats reads the probes' counters (nvtx_probe_stats), summed over
// CPUs, by index (NVTX_PROBE_*).
func (t *Tracker) ProbeStats() ([]uint64, error) {
	return sumPerCPU(t.objs.NvtxProbeStats, int(probesNvtxProbeStatNVTX_PROBE_STAT_MAX))
}

// CaptureStats reads the capture's counters of its reads of threads'
// structs at samples (nvtx_stats, nvtx.h), by index (bpf.NVTXStat*).
func (t *Tracker) CaptureStats() ([]uint64, error) {
	return sumPerCPU(t.objs.NvtxStats, int(bpf.NVTXStatMax))
}

func sumPerCPU(m *ebpf.Map, n int) ([]uint64, error) {
	out := make([]uint64, n)
	for i := range out {
		var per []uint64
		key := uint32(i) // #nosec G115 -- a stats index, below n
		if err := m.Lookup(key, &per); err != nil {
			return nil, err
		}
		out[i] = bpf.SumPerCPU(per)
	}
	return out, nil
}

// Close detaches the probes and stops the reader.
func (t *Tracker) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	for _, ls := range t.files {
		for _, l := range ls {
			l.Close()
		}
	}
	t.files = nil
	t.mu.Unlock()
	close(t.stop)
	t.wg.Wait()
	err := t.rd.Close()
	<-t.done
	return errors.Join(err, t.objs.Close())
}
