package python

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// stallMem is a process's memory whose reads of [lo, hi) do not return
// until released: a page of a file on the job's own FUSE mount whose
// daemon never answers.
type stallMem struct {
	Memory
	lo, hi  uint64
	release chan struct{}

	mu                  sync.Mutex
	inFlight, most, hit int
}

func (m *stallMem) ReadAt(p []byte, addr uint64) error {
	if addr >= m.hi || addr+uint64(len(p)) <= m.lo {
		return m.Memory.ReadAt(p, addr)
	}
	m.mu.Lock()
	m.inFlight++
	m.hit++
	m.most = max(m.most, m.inFlight)
	m.mu.Unlock()
	<-m.release
	m.mu.Lock()
	m.inFlight--
	m.mu.Unlock()
	return errors.New("EIO")
}

func (m *stallMem) counts() (hit, most int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hit, m.most
}

// goodCheck is the check of newFakeProc's code object.
const goodCheck = uint64(0x60000) ^ (0x61000<<1 | 0x61000>>63)

// twoJobs is newFakeProc's process (pid 42) in job "attacker", and a
// second one like it (pid 50) in job "innocent"; mem42 wraps 42's memory.
func twoJobs(t *testing.T, mem42 func(Memory) Memory) *fakeProc {
	f := newFakeProc(t, nil)
	f.maps.maps[50] = f.maps.maps[42]
	wrapped := mem42(f.mem)
	f.tracker.o.Memory = func(p interp.Process) Memory {
		if p.PID == 42 {
			return wrapped
		}
		return f.mem
	}
	f.tracker.o.Owner = func(p interp.Process) string {
		if p.PID == 42 {
			return "attacker"
		}
		return "innocent"
	}
	f.tracker.o.ReadTimeout = 20 * time.Millisecond
	f.tracker.gate.timeout = 20 * time.Millisecond
	f.notify(1)
	f.tracker.Announce(interp.Process{PID: 50, StartNs: 7, MM: 1})
	if _, ok := f.procs[50]; !ok {
		t.Fatalf("innocent process not set up: %+v", f.tracker.Stats().Skipped)
	}
	return f
}

// A read of one job's memory that never returns (the code object's name
// sits on a page the job's FUSE daemon does not answer for, mapped over
// memory that was anonymous when the maps were read) costs that job its
// frames and one parked goroutine: the tracker's lock is free, other jobs
// resolve and are set up, and further reads of the stuck job are refused
// without reading, however many callers ask.
func TestStuckReadStopsOnlyItsJob(t *testing.T) {
	stall := &stallMem{lo: 0x62000, hi: 0x63000, release: make(chan struct{})}
	f := twoJobs(t, func(m Memory) Memory { stall.Memory = m; return stall })
	good := stackOf(RawFrame{Code: code0, Check: goodCheck})

	st := f.tracker.Resolve(interp.Process{PID: 42, StartNs: 5}, good)
	if len(st.Frames) != 1 || st.Frames[0].Function != StalledFunction {
		t.Fatalf("the stuck job's frames: %+v", st.Frames)
	}
	// Meanwhile: the innocent job's frames, the metrics, a new process.
	if st := f.tracker.Resolve(interp.Process{PID: 50, StartNs: 7}, good); len(st.Frames) != 1 || st.Frames[0].Function != "Model.forward" {
		t.Errorf("the innocent job's frames while the other is stuck: %+v", st.Frames)
	}
	f.maps.maps[51] = f.maps.maps[42]
	f.tracker.Announce(interp.Process{PID: 51, StartNs: 8, MM: 1})
	if _, ok := f.procs[51]; !ok {
		t.Errorf("a new process not set up while a job is stuck: %+v", f.tracker.Stats().Skipped)
	}
	// The stuck job, again and from many callers at once.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.tracker.Resolve(interp.Process{PID: 42, StartNs: 5}, stackOf(RawFrame{Code: code0, Check: goodCheck}))
		}()
	}
	wg.Wait()
	if hit, most := stall.counts(); hit != 1 || most != 1 {
		t.Errorf("%d reads reached the stuck page (%d at once), want 1", hit, most)
	}
	s := f.tracker.Stats()
	if s.Stalled != 9 || s.ReadStalls != 1 || s.ReadsRefused != 8 || s.StuckJobs != 1 {
		t.Errorf("stalled frames %d, stalls %d, refused %d, stuck jobs %d; want 9, 1, 8, 1", s.Stalled, s.ReadStalls, s.ReadsRefused, s.StuckJobs)
	}
	if s.CodeBad != 0 {
		t.Errorf("a stall was taken for a bad code object: %+v", s)
	}
	// The daemon answers at last (or dies): the job is read again.
	close(stall.release)
	for deadline := time.Now().Add(10 * time.Second); f.tracker.Stats().StuckJobs != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the job stays stuck after its read returned")
		}
	}
	stall.lo, stall.hi = 0, 0
	if st := f.tracker.Resolve(interp.Process{PID: 42, StartNs: 5}, good); st.Frames[0].Function != "Model.forward" {
		t.Errorf("after the read returned: %+v", st.Frames)
	}
}

// blockingMaps is a maps reader whose read of one pid does not return
// until released: /proc/<pid>/maps waits on the mmap lock of a process
// stuck in such a fault.
type blockingMaps struct {
	*fakeMaps
	pid     int
	release chan struct{}
}

func (b *blockingMaps) Maps(pid int) ([]Mapping, error) {
	if pid == b.pid {
		<-b.release
		return nil, fmt.Errorf("gone")
	}
	return b.fakeMaps.Maps(pid)
}

// A set-up whose reads stall costs its job that process's set-up, counted,
// and the announce returns.
func TestStuckSetupStopsOnlyItsJob(t *testing.T) {
	f := newFakeProc(t, nil)
	bm := &blockingMaps{fakeMaps: f.maps, pid: 42, release: make(chan struct{})}
	defer close(bm.release)
	f.tracker.o.Maps = bm
	f.tracker.gate.timeout = 20 * time.Millisecond
	f.tracker.o.Owner = func(p interp.Process) string { return fmt.Sprint("job", p.PID) }
	f.maps.maps[50] = f.maps.maps[42]
	f.notify(1)
	if f.tracker.Stats().Skipped["stalled"] != 1 {
		t.Errorf("stalled set-up not counted: %+v", f.tracker.Stats().Skipped)
	}
	f.tracker.Announce(interp.Process{PID: 50, StartNs: 7, MM: 1})
	if _, ok := f.procs[50]; !ok {
		t.Errorf("another job's process not set up: %+v", f.tracker.Stats().Skipped)
	}
}

// Only anonymous memory and the interpreter's own data are read: a code
// object, or its names, in a mapping of any other file (one on the job's
// FUSE mount) is never read, even when the process holds the bytes there;
// an address the maps did not list at set-up is looked up in a fresh read
// of them (a new arena).
func TestOnlyAnonymousAndInterpreterMemoryIsRead(t *testing.T) {
	f := newFakeProc(t, nil)
	l := &f.l
	f.maps.maps[42] = append(f.maps.maps[42],
		Mapping{Start: 0x50000000, End: 0x50010000, Perms: "r--p", Inode: 77, Path: "/fuse/bait"},
		// A file's writable private mapping is the file's until written.
		Mapping{Start: 0x50010000, End: 0x50020000, Perms: "rw-p", Inode: 78, Path: "/fuse/data"})
	f.notify(1)
	rec := &recordMem{Memory: f.mem}
	f.tracker.o.Memory = func(interp.Process) Memory { return rec }
	f.tracker.procs[42].mem = rec

	// Code objects whose qualname is in the bait and in the data mapping,
	// and one whose object itself is in the bait.
	for i, name := range []uint64{0x50000100, 0x50010100} {
		code := uint64(0x80000 + i*0x1000)
		f.mem.put64(code+uint64(l.ObType), codeType)
		f.mem.put64(code+uint64(l.CodeFilename), 0x60000)
		f.mem.put64(code+uint64(l.CodeQualname), name)
		f.mem.str(l, name, "bait", 4)
	}
	f.mem.put64(0x50000800+uint64(l.ObType), codeType)
	for _, code := range []uint64{0x80000, 0x81000, 0x50000800} {
		st := f.tracker.Resolve(pyProc, stackOf(RawFrame{Code: code, Check: 1}))
		if st.Frames[0].Function != UnknownFunction {
			t.Errorf("code object 0x%x: %+v", code, st.Frames)
		}
	}
	if n := rec.readsIn(0x50000000, 0x50020000); n != 0 {
		t.Errorf("%d reads of file-backed mappings", n)
	}
	s := f.tracker.Stats()
	if s.CodeRefused != 3 {
		t.Errorf("refused frames %d, want 3", s.CodeRefused)
	}
	// Refused once for good: the maps are not read again for them.
	reads := f.maps.reads
	f.tracker.Resolve(pyProc, stackOf(RawFrame{Code: 0x80000, Check: 1}))
	if f.maps.reads != reads {
		t.Error("the maps were read again for an address refused after a fresh read")
	}

	// A new arena, mapped after set-up: found in a fresh read of the maps.
	arena := uint64(0x60000000)
	f.maps.maps[42] = append(f.maps.maps[42], Mapping{Start: arena, End: arena + 0x100000, Perms: "rw-p"})
	f.mem.put64(arena+uint64(l.ObType), codeType)
	f.mem.put64(arena+uint64(l.CodeFilename), 0x60000)
	f.mem.put64(arena+uint64(l.CodeName), 0x61000)
	f.mem.put64(arena+uint64(l.CodeQualname), 0x62000)
	if st := f.tracker.Resolve(pyProc, stackOf(RawFrame{Code: arena, Check: goodCheck})); st.Frames[0].Function != "Model.forward" {
		t.Errorf("code object in a new arena: %+v (maps read %d more times)", st.Frames, f.maps.reads-reads)
	}
}

// recordMem records the addresses read.
type recordMem struct {
	Memory
	mu    sync.Mutex
	addrs []uint64
}

func (m *recordMem) ReadAt(p []byte, addr uint64) error {
	m.mu.Lock()
	m.addrs = append(m.addrs, addr)
	m.mu.Unlock()
	return m.Memory.ReadAt(p, addr)
}

func (m *recordMem) readsIn(lo, hi uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, a := range m.addrs {
		if a >= lo && a < hi {
			n++
		}
	}
	return n
}

// panicMem panics on every read: a bug in a reader, or structures forged
// past every check.
type panicMem struct{}

func (panicMem) ReadAt([]byte, uint64) error { panic("reader bug") }

// A panic while reading one process marks that process unreadable,
// counted: its entry leaves the capture's table, it is never read again
// while it lives, and the tracker goes on with the others.
func TestPanicMarksTheProcessUnreadable(t *testing.T) {
	f := newFakeProc(t, nil)
	f.maps.maps[50] = f.maps.maps[42]
	f.notify(1)
	f.tracker.Announce(interp.Process{PID: 50, StartNs: 7, MM: 1})
	f.tracker.procs[42].mem = panicMem{}
	if st := f.tracker.Resolve(pyProc, stackOf(RawFrame{Code: code0, Check: goodCheck})); len(st.Frames) != 0 {
		t.Errorf("frames of a process whose reading panicked: %+v", st.Frames)
	}
	if _, ok := f.procs[42]; ok || f.tracker.Stats().Skipped["read_panic"] != 1 {
		t.Errorf("in the table %v, skipped %+v", ok, f.tracker.Stats().Skipped)
	}
	reads := f.maps.reads
	f.notify(1)
	f.tracker.Retry()
	if _, ok := f.procs[42]; ok || f.maps.reads != reads {
		t.Error("an unreadable process was looked at again")
	}
	if st := f.tracker.Resolve(interp.Process{PID: 50, StartNs: 7}, stackOf(RawFrame{Code: code0, Check: goodCheck})); st.Frames[0].Function != "Model.forward" {
		t.Errorf("another process after the panic: %+v", st.Frames)
	}
	// A panic while setting a process up: the same.
	g := newFakeProc(t, nil)
	g.tracker.o.Memory = func(interp.Process) Memory { return panicMem{} }
	g.notify(1)
	if _, ok := g.procs[42]; ok || g.tracker.Stats().Skipped["read_panic"] != 1 {
		t.Errorf("panic in set-up: in the table %v, skipped %+v", ok, g.tracker.Stats().Skipped)
	}
	// A process that exits is forgotten; its pid may be a new process.
	g.tracker.Forget(procfs.ID{PID: 42, Start: procfs.StartFromBoottime(5)})
	g.tracker.o.Memory = func(interp.Process) Memory { return g.mem }
	g.notify(1)
	if _, ok := g.procs[42]; !ok {
		t.Errorf("a new process under the pid: %+v", g.tracker.Stats().Skipped)
	}
}

// clockMem advances the fake clock at each read, as reads cost time.
type clockMem struct {
	Memory
	now  *time.Time
	cost time.Duration
}

func (m *clockMem) ReadAt(p []byte, addr uint64) error {
	*m.now = m.now.Add(m.cost)
	return m.Memory.ReadAt(p, addr)
}

// A job of deep stacks through functions with huge code objects: each line
// table is decoded once, not at every resolve; and once the job has spent
// its allowance of resolution time, its frames stay unresolved (counted)
// while another job's still resolve.
func TestResolutionIsMeteredPerJob(t *testing.T) {
	f := newFakeProc(t, nil)
	f.tracker.o.ReadBytesPerSecond = 1 << 40
	f.tracker.o.MaxProcessCodeBytes, f.tracker.o.MaxCodeBytes = 1<<30, 1<<30
	f.maps.maps[50] = f.maps.maps[42]
	f.tracker.o.Owner = func(p interp.Process) string { return fmt.Sprint("job", p.PID) }
	f.notify(1)
	f.tracker.Announce(interp.Process{PID: 50, StartNs: 7, MM: 1})
	deep := deepStack(f, 0x1000000, 64, maxLineTable)

	// Decoded once: resolving the stack again decodes nothing.
	for range 5 {
		if st := f.tracker.Resolve(pyProc, deep); st.Frames[63].Function != "deep_function" || st.Frames[63].Line < 1000 {
			t.Fatalf("deep stack: %+v", st.Frames[63])
		}
	}
	if got, want := f.tracker.Stats().LineTableBytes, uint64(64*maxLineTable); got != want {
		t.Errorf("decoded %d bytes of line tables over 5 resolves, want %d (each once)", got, want)
	}

	// Reads that cost time: 1 ms each, 7 for each code object.
	g := newFakeProc(t, nil)
	g.tracker.o.ReadBytesPerSecond = 1 << 40
	g.tracker.o.MaxProcessCodeBytes, g.tracker.o.MaxCodeBytes = 1<<30, 1<<30
	g.maps.maps[50] = g.maps.maps[42]
	g.tracker.o.Owner = func(p interp.Process) string { return fmt.Sprint("job", p.PID) }
	slow := &clockMem{Memory: g.mem, now: &g.now, cost: time.Millisecond}
	g.tracker.o.Memory = func(interp.Process) Memory { return slow }
	g.notify(1)
	g.tracker.Announce(interp.Process{PID: 50, StartNs: 7, MM: 1})
	stacks := 0
	for ; stacks < 100; stacks++ {
		st := g.tracker.Resolve(pyProc, deepStack(g, 0x1000000+uint64(stacks)*0xc00000, 64, 1024)) // new code objects each time
		if st.Frames[0].Function == CPUBudgetFunction {
			break
		}
	}
	if stacks == 0 || stacks == 100 {
		t.Fatalf("the job was refused after %d stacks of 64 new code objects (about 450 ms each); want after its 200 ms burst", stacks)
	}
	if st := g.tracker.Resolve(interp.Process{PID: 50, StartNs: 7}, stackOf(RawFrame{Code: code0, Check: goodCheck})); st.Frames[0].Function != "Model.forward" {
		t.Errorf("the other job's frames while the first is over its share: %+v", st.Frames)
	}
	if n := g.tracker.Stats().CPUBudgetExceeded; n != 64 {
		t.Errorf("cpu_budget frames %d, want 64", n)
	}
	// The allowance refills with time.
	g.now = g.now.Add(10 * time.Second)
	if st := g.tracker.Resolve(pyProc, deepStack(g, 0x30000000, 2, 1024)); st.Frames[0].Function != "deep_function" {
		t.Errorf("after the allowance refilled: %+v", st.Frames[0])
	}
}

// While a read of one job's memory is in the kernel (its deadline far
// off), the tracker's lock is free: the other job resolves, a new process
// is set up, the metrics are read. Were the read under the lock, these
// would wait for it, here forever.
func TestNoReadUnderTheLock(t *testing.T) {
	stall := &stallMem{lo: 0x62000, hi: 0x63000, release: make(chan struct{})}
	f := twoJobs(t, func(m Memory) Memory { stall.Memory = m; return stall })
	f.tracker.gate.timeout = time.Hour
	good := stackOf(RawFrame{Code: code0, Check: goodCheck})
	done := make(chan interp.Stack)
	go func() { done <- f.tracker.Resolve(interp.Process{PID: 42, StartNs: 5}, good) }()
	for hit, _ := stall.counts(); hit == 0; hit, _ = stall.counts() {
		time.Sleep(time.Millisecond)
	}
	if st := f.tracker.Resolve(interp.Process{PID: 50, StartNs: 7}, good); st.Frames[0].Function != "Model.forward" {
		t.Errorf("the other job's frames: %+v", st.Frames)
	}
	f.maps.maps[51] = f.maps.maps[42]
	f.tracker.Announce(interp.Process{PID: 51, StartNs: 8, MM: 1})
	f.tracker.Stats()
	close(stall.release)
	if st := <-done; st.Frames[0].Function != UnknownFunction {
		t.Errorf("the stuck job's frame, once its read failed: %+v", st.Frames)
	}
}

// residentMem is memory whose pages in [lo, hi) are not resident: as
// pages of a file on the job's FUSE mount, mapped over memory that was
// anonymous when the maps were read, and never touched.
type residentMem struct {
	*recordMem
	lo, hi uint64
}

func (m residentMem) pager() (pager, error) { return m, nil }
func (m residentMem) close()                {}
func (m residentMem) resident(addr uint64, n int) (bool, error) {
	return addr >= m.hi || addr+uint64(n) <= m.lo, nil
}

// A page that is not resident is never read: reading it would make the
// kernel fetch it from its file, which the job may serve itself and never
// answer for, even where the maps said the memory was anonymous. The frame
// stays unresolved, counted, and is read once the page is in memory.
func TestOnlyResidentPagesAreRead(t *testing.T) {
	f := newFakeProc(t, nil)
	f.notify(1)
	mem := residentMem{recordMem: &recordMem{Memory: f.mem}, lo: 0x62000, hi: 0x63000}
	f.tracker.procs[42].mem = mem
	good := stackOf(RawFrame{Code: code0, Check: goodCheck})
	if st := f.tracker.Resolve(pyProc, good); st.Frames[0].Function != UnknownFunction {
		t.Errorf("a name on a page not resident: %+v", st.Frames)
	}
	if n := mem.readsIn(0x62000, 0x63000); n != 0 {
		t.Errorf("%d reads of a page not resident", n)
	}
	if n := f.tracker.Stats().CodeNotResident; n != 1 {
		t.Errorf("not_resident frames %d, want 1", n)
	}
	mem.lo, mem.hi = 0, 0
	f.tracker.procs[42].mem = mem
	if st := f.tracker.Resolve(pyProc, good); st.Frames[0].Function != "Model.forward" {
		t.Errorf("once resident: %+v", st.Frames)
	}
}

// The pager of a live process: an anonymous page is resident once
// touched, a page of a mapped file that nobody touched is not (reading it
// would fetch it from the file), and reads of the process's own memory
// through the checks give what it holds.
func TestPagemapOfALiveProcess(t *testing.T) {
	pm, err := ProcessMemory(os.Getpid()).pager()
	if err != nil {
		t.Skipf("no pagemap: %v", err)
	}
	defer pm.close()
	anon, err := unix.Mmap(-1, 0, 4*int(pageSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(anon)
	addr := uint64(uintptr(unsafe.Pointer(&anon[0])))
	if ok, err := pm.resident(addr, 8); err != nil || ok {
		t.Errorf("an untouched anonymous page: resident %v, %v", ok, err)
	}
	copy(anon, "resident")
	if ok, err := pm.resident(addr, 8); err != nil || !ok {
		t.Errorf("a touched anonymous page: resident %v, %v", ok, err)
	}
	if ok, _ := pm.resident(addr, 2*int(pageSize)); ok {
		t.Error("a range whose second page is untouched: resident")
	}
	file := filepath.Join(t.TempDir(), "mapped")
	if err := os.WriteFile(file, make([]byte, 8*pageSize), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	fm, err := unix.Mmap(int(fd.Fd()), 0, 8*int(pageSize), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(fm)
	faddr := uint64(uintptr(unsafe.Pointer(&fm[0])))
	if ok, err := pm.resident(faddr+4*pageSize, 8); err != nil || ok {
		t.Errorf("an untouched page of a mapped file: resident %v, %v", ok, err)
	}
	spans := []span{{addr, addr + 4*pageSize}, {faddr, faddr + 8*pageSize}}
	if faddr < addr {
		spans[0], spans[1] = spans[1], spans[0]
	}
	mem := &checkedMemory{mem: ProcessMemory(os.Getpid()), ranges: &readable{spans: spans}}
	defer mem.done()
	b := make([]byte, 8)
	if err := mem.ReadAt(b, addr); err != nil || string(b) != "resident" {
		t.Errorf("reading a resident page: %q, %v", b, err)
	}
	if err := mem.ReadAt(b, faddr+4*pageSize); !errors.Is(err, errNotResident) {
		t.Errorf("reading an untouched page of a file: %v, want errNotResident", err)
	}
}
