package python

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// fakeMem is a process's memory: byte ranges at addresses.
type fakeMem struct{ seg map[uint64][]byte }

func (m *fakeMem) ReadAt(p []byte, addr uint64) error {
	for base, b := range m.seg {
		if addr >= base && addr+uint64(len(p)) <= base+uint64(len(b)) {
			copy(p, b[addr-base:])
			return nil
		}
	}
	return fmt.Errorf("EFAULT at 0x%x", addr)
}

func (m *fakeMem) put64(addr, v uint64) { binary.LittleEndian.PutUint64(m.at(addr, 8), v) }
func (m *fakeMem) put32(addr uint64, v uint32) {
	binary.LittleEndian.PutUint32(m.at(addr, 4), v)
}

// at returns the bytes at addr, making a 4 KiB segment there if needed.
func (m *fakeMem) at(addr uint64, n int) []byte {
	for base, b := range m.seg {
		if addr >= base && addr+uint64(n) <= base+uint64(len(b)) {
			return b[addr-base:]
		}
	}
	base := addr &^ 0xfff
	m.seg[base] = make([]byte, 8192)
	return m.seg[base][addr-base:]
}

// str writes a compact ASCII str object at addr (3.12 layout).
func (m *fakeMem) str(l *Layout, addr uint64, s string, length uint64) {
	m.put64(addr+uint64(l.UnicodeLength), length)
	m.put32(addr+uint64(l.UnicodeState), 1<<2|1<<5|1<<6)
	copy(m.at(addr+uint64(l.ASCIISize), len(s)), s)
}

// entry is an interp_procs entry as the tracker wrote it.
type entry struct {
	ProcInfo
	StartBoottime, MM uint64
}

type fakeProcs map[uint32]entry

func (f fakeProcs) Put(p interp.Process, data []byte) error {
	var info ProcInfo
	if _, err := binary.Decode(data, binary.LittleEndian, &info); err != nil {
		return err
	}
	f[p.PID] = entry{info, p.StartNs, p.MM}
	return nil
}
func (f fakeProcs) Delete(tgid uint32) error { delete(f, tgid); return nil }

type fakeMaps struct {
	maps  map[int][]Mapping
	reads int
	gone  bool // a pid without maps has exited (procfs.ErrGone)
}

func (f *fakeMaps) Maps(pid int) ([]Mapping, error) {
	f.reads++
	if m, ok := f.maps[pid]; ok {
		return m, nil
	}
	if f.gone {
		return nil, fmt.Errorf("maps of %d: %w", pid, procfs.ErrGone)
	}
	return nil, fs.ErrNotExist
}

type fakeFile struct{ name string }

func (fakeFile) ReadAt([]byte, int64) (int, error) { return 0, io.EOF }
func (fakeFile) Close() error                      { return nil }
func (f fakeFile) Stat() (fs.FileInfo, error)      { return fakeInfo{f.name}, nil }

// fakeInfo gives each path its own identity (inode).
type fakeInfo struct{ name string }

func (i fakeInfo) Name() string     { return i.name }
func (fakeInfo) Size() int64        { return 1 << 20 }
func (fakeInfo) Mode() fs.FileMode  { return 0o644 }
func (fakeInfo) ModTime() time.Time { return time.Unix(1, 0) }
func (fakeInfo) IsDir() bool        { return false }
func (i fakeInfo) Sys() any         { return &syscall.Stat_t{Ino: uint64(len(i.name)), Dev: 1} }

type fakeOpener struct{}

func (fakeOpener) OpenMapped(pid int, m Mapping) (interp.File, error) { return fakeFile{m.Path}, nil }

func (fakeOpener) StatMapped(pid int, m Mapping) (procfs.FileInfo, error) {
	i := fakeInfo{m.Path}
	st := i.Sys().(*syscall.Stat_t)
	return procfs.FileInfo{ID: procfs.FileID{Dev: st.Dev, Ino: st.Ino}, Size: i.Size(), MtimeNsec: i.ModTime().UnixNano()}, nil
}

// A 3.12 process: libpython mapped at 0x7f0000000000, _PyRuntime at link
// address 0x1000, one interpreter, one thread state, one code object.
const (
	libBase  = 0x7f0000000000
	runtime0 = libBase + 0x1000
	interp0  = 0x20000
	tstate0  = 0x30000
	code0    = 0x40000
	codeType = libBase + 0x5000
)

type fakeProc struct {
	mem     *fakeMem
	maps    *fakeMaps
	procs   fakeProcs
	now     time.Time
	tracker *Tracker
	l       Layout
	// layout is what Inspect says the process runs; l by default (a
	// forged one otherwise).
	layout *Layout
}

func newFakeProc(t *testing.T, inspectErr error) *fakeProc {
	f := &fakeProc{mem: &fakeMem{seg: map[uint64][]byte{}}, procs: fakeProcs{}, now: time.Unix(1000, 0), l: layouts[12]}
	f.maps = &fakeMaps{maps: map[int][]Mapping{42: {
		{Start: 0x400000, End: 0x401000, Perms: "r-xp", Inode: 7, Path: "/usr/bin/app"},
		{Start: libBase, End: libBase + 0x1000, Perms: "r-xp", Inode: 9, Path: "/usr/lib/libpython3.12.so.1.0"},
		// Its .data, which holds _PyRuntime.
		{Start: libBase + 0x1000, End: libBase + 0x10000, Offset: 0x1000, Perms: "rw-p", Inode: 9, Path: "/usr/lib/libpython3.12.so.1.0"},
		// The heap, arenas and stacks: every object the tests make.
		{Start: 0x10000, End: 0x40000000, Perms: "rw-p"},
	}}}
	f.tracker = NewTracker(TrackerOptions{
		Arch: AMD64, Maps: f.maps, Open: fakeOpener{}, Procs: f.procs,
		Memory: func(interp.Process) Memory { return f.mem },
		Now:    func() time.Time { return f.now },
		Inspect: func(r io.ReaderAt, name string, arch Arch) (*Interpreter, error) {
			if !strings.Contains(name, "libpython") {
				return nil, ErrNotPython
			}
			if inspectErr != nil {
				return nil, inspectErr
			}
			l := f.l
			if f.layout != nil {
				l = *f.layout
			}
			return &Interpreter{Major: 3, Minor: 12, Runtime: 0x1000, CodeType: 0x5000, Layout: l,
				loads: []elf.ProgHeader{{Type: elf.PT_LOAD, Off: 0, Vaddr: 0, Filesz: 0x10000}}}, nil
		},
	})
	l := &f.l
	f.mem.put64(runtime0+uint64(l.RuntimeInterpretersHead), interp0)
	f.mem.put64(interp0+uint64(l.InterpThreadsHead), tstate0)
	f.mem.put64(tstate0+uint64(l.TstateInterp), interp0)
	// The code object: qualname "Model.forward", file "/job/model.py",
	// first line 10, a location table: line +2 for 2 code units.
	f.mem.put64(code0+uint64(l.ObType), codeType)
	f.mem.put64(code0+uint64(l.CodeFilename), 0x60000)
	f.mem.put64(code0+uint64(l.CodeName), 0x61000)
	f.mem.put64(code0+uint64(l.CodeQualname), 0x62000)
	f.mem.put64(code0+uint64(l.CodeLineTable), 0x63000)
	f.mem.put32(code0+uint64(l.CodeFirstLineNo), 10)
	f.mem.str(l, 0x60000, "/job/model.py", 13)
	f.mem.str(l, 0x61000, "forward", 7)
	f.mem.str(l, 0x62000, "Model.forward", 13)
	f.mem.put64(0x63000+uint64(l.VarSize), 1)
	f.mem.at(0x63000+uint64(l.BytesData), 1)[0] = 0x80 | 12<<3 | 1
	return f
}

func (f *fakeProc) notify(mm uint64) { f.tracker.Announce(interp.Process{PID: 42, StartNs: 5, MM: mm}) }

// resolve is Resolve of process pid started at start.
func resolve(t *Tracker, pid uint32, start uint64, s *bpf.InterpStack) ([]interp.Frame, bool) {
	st := t.Resolve(interp.Process{PID: pid, StartNs: start}, s)
	return st.Frames, st.Truncated
}

func TestTrackerDiscovery(t *testing.T) {
	f := newFakeProc(t, nil)
	f.notify(1)
	info, ok := f.procs[42]
	if !ok {
		t.Fatalf("not set up: %+v", f.tracker.Stats())
	}
	if info.Runtime != runtime0 || info.StartBoottime != 5 || info.MM != 1 || info.TstateId != f.l.TstateNativeThreadID {
		t.Errorf("ProcInfo %+v", info)
	}
	if got := f.tracker.Stats().Found["3.12"]; got != 1 {
		t.Errorf("found %d, want 1", got)
	}
	// The same process announced again (its entry lost): put back, not
	// looked at again.
	delete(f.procs, 42)
	reads := f.maps.reads
	f.notify(1)
	if _, ok := f.procs[42]; !ok || f.maps.reads != reads {
		t.Errorf("re-announced process: in map %v, maps read %d more times", ok, f.maps.reads-reads)
	}
	// exec: same pid and start time, a new mm: looked at afresh.
	f.notify(2)
	if f.procs[42].MM != 2 || f.maps.reads != reads+1 {
		t.Errorf("after exec: mm %d, maps reads %d", f.procs[42].MM, f.maps.reads-reads)
	}
	f.tracker.Forget(procfs.ID{PID: 42, Start: procfs.StartFromBoottime(5)})
	if _, ok := f.procs[42]; ok {
		t.Error("Forget left the BPF entry")
	}
}

func TestTrackerNotInitialisedYet(t *testing.T) {
	f := newFakeProc(t, nil)
	f.mem.put64(interp0+uint64(f.l.InterpThreadsHead), 0) // no thread state yet
	f.notify(1)
	if _, ok := f.procs[42]; ok {
		t.Fatal("set up before its runtime was initialised")
	}
	f.tracker.Retry()
	f.now = f.now.Add(time.Second)
	f.mem.put64(interp0+uint64(f.l.InterpThreadsHead), tstate0)
	f.tracker.Retry()
	if _, ok := f.procs[42]; !ok {
		t.Fatalf("not set up once initialised: %+v", f.tracker.Stats())
	}
}

// A process first seen before the dynamic linker mapped libpython (or
// mid-exec) is looked at again soon, without waiting to be announced.
func TestTrackerQuickRecheck(t *testing.T) {
	f := newFakeProc(t, nil)
	all := f.maps.maps[42]
	f.maps.maps[42] = all[:1]
	f.notify(1)
	if _, ok := f.procs[42]; ok {
		t.Fatal("set up without libpython")
	}
	f.maps.maps[42] = all
	f.tracker.Retry()
	if _, ok := f.procs[42]; ok {
		t.Fatal("looked at again before its time")
	}
	f.now = f.now.Add(10 * time.Millisecond)
	f.tracker.Retry()
	if _, ok := f.procs[42]; !ok {
		t.Fatalf("not set up on the quick recheck: %+v", f.tracker.Stats())
	}
}

// A process gone by the time it is looked at (a short process of a
// pipeline, sampled once) is not looked at again: its maps are read once.
func TestTrackerForgetsAGoneProcess(t *testing.T) {
	f := newFakeProc(t, nil)
	delete(f.maps.maps, 42)
	f.maps.gone = true
	f.notify(1)
	for range 5 {
		f.now = f.now.Add(time.Second)
		if f.tracker.Retry() {
			t.Error("Retry still has a process pending after it was found gone")
		}
	}
	if f.maps.reads != 1 {
		t.Errorf("the maps of a gone process were read %d times, want once", f.maps.reads)
	}
	if n := f.tracker.Stats().Skipped["exited"]; n != 1 {
		t.Errorf("skipped as exited: %d, want 1", n)
	}
}

func TestTrackerRefuses(t *testing.T) {
	// A faked or misidentified runtime: the thread state does not point
	// back at its interpreter. Native stacks only, counted.
	f := newFakeProc(t, nil)
	f.mem.put64(tstate0+uint64(f.l.TstateInterp), 0xdead)
	f.notify(1)
	if _, ok := f.procs[42]; ok || f.tracker.Stats().Skipped["bad_interpreter"] != 1 {
		t.Errorf("bad interpreter: set up %v, stats %+v", ok, f.tracker.Stats().Skipped)
	}
	// An unknown version: counted, and looked at again only after a while.
	f = newFakeProc(t, fmt.Errorf("%w: CPython 3.14", ErrUnsupported))
	f.notify(1)
	reads := f.maps.reads
	f.notify(1)
	if f.maps.reads != reads {
		t.Error("an unsupported process was looked at again at once")
	}
	f.now = f.now.Add(11 * time.Second)
	f.notify(1)
	if f.maps.reads != reads+1 || f.tracker.Stats().Skipped["unsupported"] != 2 {
		t.Errorf("recheck: maps reads %d, stats %+v", f.maps.reads-reads, f.tracker.Stats().Skipped)
	}
	// A process that is gone.
	f = newFakeProc(t, nil)
	f.tracker.Announce(interp.Process{PID: 43, MM: 7})
	if f.tracker.Stats().Skipped["maps"] != 1 {
		t.Errorf("gone process: %+v", f.tracker.Stats().Skipped)
	}
}

// stackOf packs frames as python.h records them.
func stackOf(frames ...RawFrame) *bpf.InterpStack {
	s := &bpf.InterpStack{Len: uint32(len(frames)), Kind: Kind}
	for i, f := range frames {
		s.Frames[i] = bpf.InterpFrame{Addr: f.Code, Check: f.Check,
			Data: uint64(uint32(f.Lasti)) | uint64(f.Owner)<<32 | uint64(f.IsEntry)<<40}
	}
	return s
}

func TestTrackerResolve(t *testing.T) {
	f := newFakeProc(t, nil)
	f.notify(1)
	l := &f.l
	check := uint64(0x60000) ^ (0x61000<<1 | 0x61000>>63)
	good := RawFrame{Code: code0, Check: check, Lasti: int32(l.CodeAdaptive) + 2}
	frames, truncated := resolve(f.tracker, 42, 5, stackOf(good, RawFrame{Owner: FrameOwnedByCStack}))
	want := []interp.Frame{{Function: "Model.forward", File: "/job/model.py", Line: 12, Entry: true}}
	if truncated || fmt.Sprint(frames) != fmt.Sprint(want) {
		t.Fatalf("frames %+v, want %+v", frames, want)
	}
	if frames, _ := resolve(f.tracker, 42, 6, stackOf(good)); frames != nil {
		t.Error("resolved for another start time (a reused pid)")
	}
	// The code object the sample saw is gone: another took its address.
	frames, _ = resolve(f.tracker, 42, 5, stackOf(RawFrame{Code: code0, Check: check + 1}))
	if frames[0].Function != UnknownFunction || f.tracker.Stats().CodeGone != 1 {
		t.Errorf("replaced code object: %+v, gone %d", frames, f.tracker.Stats().CodeGone)
	}
	// Not a code object; a name that claims a huge length; unreadable.
	f.mem.put64(0x70000+uint64(l.ObType), 0x1234)
	f.mem.put64(0x71000+uint64(l.ObType), codeType)
	f.mem.put64(0x71000+uint64(l.CodeQualname), 0x72000)
	f.mem.put64(0x71000+uint64(l.CodeFilename), 0x60000)
	f.mem.str(l, 0x72000, "x", 1<<40)
	for _, addr := range []uint64{0x70000, 0x71000, 0x9990000} {
		frames, _ = resolve(f.tracker, 42, 5, stackOf(RawFrame{Code: addr, Check: 1}))
		if frames[0].Function != UnknownFunction {
			t.Errorf("bad code object 0x%x: %+v", addr, frames)
		}
	}
	if st := f.tracker.Stats(); st.CodeBad < 3 || st.CodeUnreadable != 3 {
		t.Errorf("bad code objects counted %d, unreadable frames %d, want 3 and 3", st.CodeBad, st.CodeUnreadable)
	}
}

// A short process's samples are resolved after it exits: a sample whose
// check differs then (a torn read, or another code object at the address)
// must not evict the code object the process's other samples saw.
func TestTrackerResolveAfterExit(t *testing.T) {
	f := newFakeProc(t, nil)
	f.notify(1)
	check := uint64(0x60000) ^ (0x61000<<1 | 0x61000>>63)
	good := RawFrame{Code: code0, Check: check}
	if frames, _ := resolve(f.tracker, 42, 5, stackOf(good)); frames[0].Function != "Model.forward" {
		t.Fatalf("alive: %+v", frames)
	}
	clear(f.mem.seg) // exited: nothing reads
	if frames, _ := resolve(f.tracker, 42, 5, stackOf(RawFrame{Code: code0, Check: check + 1})); frames[0].Function != UnknownFunction {
		t.Errorf("other check after exit: %+v", frames)
	}
	if frames, _ := resolve(f.tracker, 42, 5, stackOf(good)); frames[0].Function != "Model.forward" {
		t.Errorf("after exit, the code object read while alive is lost: %+v", frames)
	}
	if st := f.tracker.Stats(); st.CodeUnreadable != 1 {
		t.Errorf("unreadable frames %d, want 1", st.CodeUnreadable)
	}
}

// goneProcs is interp_procs once the process exited: Put finds it gone.
type goneProcs struct{ fakeProcs }

func (goneProcs) Put(p interp.Process, _ []byte) error {
	return fmt.Errorf("process %d: %w", p.PID, procfs.ErrGone)
}

// A set-up process announced again as it exits (its entry went at
// sched_process_exit; a sample during exit_mm found none) keeps its state:
// its last interval is drained after its exit and must keep its frames.
func TestTrackerExitingProcessKeepsItsFrames(t *testing.T) {
	f := newFakeProc(t, nil)
	f.notify(1)
	check := uint64(0x60000) ^ (0x61000<<1 | 0x61000>>63)
	good := RawFrame{Code: code0, Check: check}
	if frames, _ := resolve(f.tracker, 42, 5, stackOf(good)); len(frames) == 0 || frames[0].Function != "Model.forward" {
		t.Fatalf("alive: %+v", frames)
	}
	f.tracker.o.Procs = goneProcs{f.procs}
	f.maps.gone = true
	delete(f.maps.maps, 42)
	f.now = f.now.Add(time.Minute)
	f.notify(1)
	if frames, _ := resolve(f.tracker, 42, 5, stackOf(good)); len(frames) == 0 || frames[0].Function != "Model.forward" {
		t.Errorf("announced as it exits, its samples lost their frames: %+v (skipped %v)", frames, f.tracker.Stats().Skipped)
	}
}

func TestTrackerBounds(t *testing.T) {
	f := newFakeProc(t, nil)
	f.tracker.o.ReadBytesPerSecond = 4 << 10 // one code object per second, 4 burst
	f.tracker.o.MaxProcessCodeBytes = 200    // two entries of a failed read
	f.notify(1)
	if _, ok := f.procs[42]; !ok {
		t.Fatalf("not set up: %+v", f.tracker.Stats())
	}
	for i := uint64(0); i < 10; i++ {
		resolve(f.tracker, 42, 5, stackOf(RawFrame{Code: 0x100000 + i*0x1000, Check: 1}))
	}
	st := f.tracker.Stats()
	if st.ReadBudgetExceeded == 0 || st.CodeMisses > 5 {
		t.Errorf("read budget: %d misses, %d refused", st.CodeMisses, st.ReadBudgetExceeded)
	}
	if st.CodeEvicted == 0 || st.CodeBytes > 200 {
		t.Errorf("cache bound: %d bytes, %d evicted", st.CodeBytes, st.CodeEvicted)
	}
	frames, _ := resolve(f.tracker, 42, 5, stackOf(RawFrame{Code: 0x200000, Check: 1}))
	if frames[0].Function != BudgetFunction {
		t.Errorf("over budget: %+v", frames)
	}
	f.now = f.now.Add(time.Second)
	frames, _ = resolve(f.tracker, 42, 5, stackOf(RawFrame{Code: code0, Check: uint64(0x60000) ^ (0x61000 << 1)}))
	if frames[0].Function != "Model.forward" {
		t.Errorf("budget refilled: %+v", frames)
	}
}

var _ = errors.Is

// TestTrackerFork: a forked child (set up in BPF from its parent's entry)
// is set up here from the parent without reading anything, and its frames
// resolve from its own memory, or from its parent's once it is gone.
func TestTrackerFork(t *testing.T) {
	f := newFakeProc(t, nil)
	f.notify(1)
	child := &fakeMem{seg: map[uint64][]byte{}} // empty: the child is gone
	f.tracker.o.Memory = func(p interp.Process) Memory {
		if p.PID == 43 {
			return child
		}
		return f.mem
	}
	reads := f.maps.reads
	if f.tracker.Fork(interp.Process{PID: 44, StartNs: 9, MM: 3}, interp.Process{PID: 42, StartNs: 6}) {
		t.Error("a fork of another process under the parent's pid (wrong start time) was set up")
	}
	if !f.tracker.Fork(interp.Process{PID: 43, StartNs: 9, MM: 3}, interp.Process{PID: 42, StartNs: 5}) {
		t.Fatal("fork of a set-up parent refused")
	}
	if f.maps.reads != reads {
		t.Error("the fork was looked at in /proc")
	}
	check := uint64(0x60000) ^ (0x61000<<1 | 0x61000>>63)
	frames, _ := resolve(f.tracker, 43, 9, stackOf(RawFrame{Code: code0, Check: check, Lasti: int32(f.l.CodeAdaptive) + 2}))
	if len(frames) != 1 || frames[0].Function != "Model.forward" || frames[0].Line != 12 {
		t.Fatalf("child's frames %+v", frames)
	}
	if st := f.tracker.Stats(); st.Forked != 1 || st.ParentReads != 1 {
		t.Errorf("forked %d, parent reads %d; want 1 and 1", st.Forked, st.ParentReads)
	}
	// An object the parent no longer has either (another check): never a
	// name.
	frames, _ = resolve(f.tracker, 43, 9, stackOf(RawFrame{Code: code0, Check: check + 1}))
	if frames[0].Function != UnknownFunction {
		t.Errorf("replaced object in the parent: %+v", frames)
	}
	// The parent exits and is forgotten: the child keeps its own state.
	f.tracker.Forget(procfs.ID{PID: 42, Start: procfs.StartFromBoottime(5)})
	if frames, _ := resolve(f.tracker, 43, 9, stackOf(RawFrame{Code: 0x9990000, Check: 1})); len(frames) != 1 || frames[0].Function != UnknownFunction {
		t.Errorf("after the parent left: %+v", frames)
	}
	if n, ok := f.tracker.Start(43); !ok || n != 9 {
		t.Errorf("child start %d %v", n, ok)
	}
}

// Forked siblings share what one of them read: a pool's workers run their
// parent's code objects, and a worker that exits before its samples are
// resolved finds the object another worker read, through the parent.
func TestTrackerForkSiblingsShareCodes(t *testing.T) {
	f := newFakeProc(t, nil)
	f.notify(1)
	for _, pid := range []uint32{43, 45} {
		if !f.tracker.Fork(interp.Process{PID: pid, StartNs: 9, MM: 3}, interp.Process{PID: 42, StartNs: 5}) {
			t.Fatal("fork refused")
		}
	}
	check := uint64(0x60000) ^ (0x61000<<1 | 0x61000>>63)
	raw := stackOf(RawFrame{Code: code0, Check: check})
	if frames, _ := resolve(f.tracker, 43, 9, raw); frames[0].Function != "Model.forward" {
		t.Fatalf("first worker: %+v", frames)
	}
	clear(f.mem.seg) // every process is gone
	if frames, _ := resolve(f.tracker, 45, 9, raw); frames[0].Function != "Model.forward" {
		t.Errorf("second worker, after all exited: %+v", frames)
	}
	if st := f.tracker.Stats(); st.CodeMisses != 1 {
		t.Errorf("%d code objects read, want 1", st.CodeMisses)
	}
}

// An exiting task's event (no mm) is not a new process: the state stays.
func TestTrackerIgnoresExitingTask(t *testing.T) {
	f := newFakeProc(t, nil)
	f.notify(1)
	f.notify(0)
	if _, ok := f.procs[42]; !ok {
		t.Error("an exiting task's announce dropped the process")
	}
}

func TestTrackerTellsWhenReady(t *testing.T) {
	f := newFakeProc(t, nil)
	var ready []interp.Process
	f.tracker.o.Ready = func(p interp.Process) { ready = append(ready, p) }
	f.mem.put64(interp0+uint64(f.l.InterpThreadsHead), 0) // not initialised yet
	f.notify(1)
	if len(ready) != 0 {
		t.Fatalf("ready before its runtime was initialised: %+v", ready)
	}
	f.now = f.now.Add(time.Second)
	f.mem.put64(interp0+uint64(f.l.InterpThreadsHead), tstate0)
	f.tracker.Retry()
	delete(f.procs, 42)
	f.notify(1) // its entry lost and put back: not ready a second time
	f.tracker.Fork(interp.Process{PID: 43, StartNs: 9, MM: 3}, interp.Process{PID: 42, StartNs: 5})
	want := []interp.Process{{PID: 42, StartNs: 5, MM: 1}, {PID: 43, StartNs: 9, MM: 3}}
	if len(ready) != len(want) || ready[0] != want[0] || ready[1] != want[1] {
		t.Errorf("ready %+v, want %+v", ready, want)
	}
}

// A file read refused for its job's read allowance is not taken for one
// that holds no interpreter: the process is set up once it is looked at
// again.
func TestTrackerRetriesAFileOverTheAllowance(t *testing.T) {
	refused := true
	f := newFakeProc(t, nil)
	inspect := f.tracker.o.Inspect
	f.tracker.o.Inspect = func(r io.ReaderAt, name string, arch Arch) (*Interpreter, error) {
		if refused && strings.Contains(name, "libpython") {
			return nil, fmt.Errorf("read %s: %w", name, budget.ErrWorkLimit)
		}
		return inspect(r, name, arch)
	}
	f.notify(1)
	if _, ok := f.procs[42]; ok {
		t.Fatal("set up from a refused read")
	}
	if n := f.tracker.Stats().Skipped["read_allowance"]; n != 1 {
		t.Errorf("skipped for the allowance: %d, want 1 (%v)", n, f.tracker.Stats().Skipped)
	}
	refused = false
	f.now = f.now.Add(time.Second)
	f.tracker.Retry()
	if _, ok := f.procs[42]; !ok {
		t.Fatalf("not set up once the allowance allowed the read: %+v", f.tracker.Stats())
	}
}
