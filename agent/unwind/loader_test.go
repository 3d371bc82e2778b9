package unwind

import (
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// fakeProcs serves made-up processes whose executable mappings are real
// libraries, so that the loader builds real tables without real processes.
type fakeProcs struct {
	maps         map[int][]Mapping
	opens, stats int
}

var (
	_ MapsReader = (*fakeProcs)(nil)
	_ FileOpener = (*fakeProcs)(nil)
)

func (f *fakeProcs) Mappings(pid int) ([]Mapping, error) {
	ms, ok := f.maps[pid]
	if !ok {
		return nil, os.ErrNotExist
	}
	return ms, nil
}

func (f *fakeProcs) OpenMapping(pid int, m Mapping) (*procfs.File, error) {
	f.opens++
	if m.Path == "/nonexistent" {
		return nil, errors.New("refused")
	}
	return openPlain(m.Path)
}

func (f *fakeProcs) StatMapping(pid int, m Mapping) (procfs.FileInfo, error) {
	f.stats++
	if m.Path == "/nonexistent" {
		return procfs.FileInfo{}, errors.New("refused")
	}
	fl, err := openPlain(m.Path)
	if err != nil {
		return procfs.FileInfo{}, err
	}
	fl.Close()
	return fl.Info, nil
}

// openPlain opens a file as procfs.Open would describe it.
func openPlain(path string) (*procfs.File, error) {
	fl, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := fl.Stat()
	if err != nil {
		fl.Close()
		return nil, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return &procfs.File{File: fl, Info: procfs.FileInfo{ID: procfs.FileID{Dev: st.Dev, Ino: st.Ino}, Size: fi.Size(), MtimeNsec: fi.ModTime().UnixNano()}}, nil
}

// libMapping maps path's first executable segment at base.
func libMapping(t *testing.T, path string, base uint64) Mapping {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Skip(err)
	}
	return Mapping{Start: base, End: base + 0x100000, Offset: 0, Perms: "r-xp", Inode: fi.Sys().(*syscall.Stat_t).Ino, Path: path}
}

func lpmLen(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	n := 0
	var key [mappingKeySize]byte
	it := m.Iterate()
	var val [mappingValSize]byte
	for it.Next(&key, &val) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLoaderLifecycle: tables are shared by the processes that map a file,
// evicted by bytes over the budget, unloaded with the last process, and a
// reused pid starts afresh.
func TestLoaderLifecycle(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	cxx := "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
	fp := &fakeProcs{maps: map[int][]Mapping{
		100: {libMapping(t, libc, 0x7f0000000000), {Start: 0x7f1000000000, End: 0x7f1000001000, Perms: "r-xp"}, {Start: 0x7f2000000000, End: 0x7f2000001000, Perms: "r-xp", Inode: 1, Path: "/nonexistent"}},
		101: {libMapping(t, libc, 0x7f3000000000), libMapping(t, cxx, 0x7f4000000000)},
	}}
	// A budget that holds libc's table (~190 KB) or libstdc++'s, not both.
	// No idle tables: the last process's removal unloads (see
	// TestLoaderKeepsIdleTables).
	l, err := NewLoader(Options{MaxTableBytes: 300 << 10, IdleTableBytes: -1, Maps: fp, Opener: fp, NoVDSO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if changed, err := l.SyncProcess(100, 1); err != nil || !changed {
		t.Fatalf("first sync: changed %v, %v", changed, err)
	}
	s := l.Stats()
	if s.Tables != 1 || s.TablesBuilt != 1 || s.OpenErrors != 1 || s.Processes != 1 || s.TableBytes == 0 || s.TableBytes > s.TableBudgetBytes {
		t.Fatalf("after one process: %+v", s)
	}
	if got := lpmLen(t, l.maps.mappings); got != s.MappingEntries || got < 3 {
		t.Fatalf("%d LPM entries, stats say %d", got, s.MappingEntries)
	}
	libcBytes := s.TableBytes
	// Walks that met unknown code are reported for the process loaded
	// with that start time only (struct unwind_proc: start, alias, unknown).
	if u := l.UnknownFrames(); len(u) != 0 {
		t.Fatalf("unknown frames before any walk: %v", u)
	}
	for _, tc := range []struct {
		start uint64
		want  map[int]uint32
	}{{1, map[int]uint32{100: 3}}, {2, map[int]uint32{}}} {
		var pv [procValSize]byte
		binary.LittleEndian.PutUint64(pv[:], tc.start)
		binary.LittleEndian.PutUint32(pv[12:], 3)
		if err := l.maps.procs.Update(uint32(100), pv[:], 0); err != nil {
			t.Fatal(err)
		}
		if u := l.UnknownFrames(); !maps.Equal(u, tc.want) {
			t.Errorf("entry of start %d: unknown frames %v, want %v", tc.start, u, tc.want)
		}
	}
	// Again with the same mappings: nothing changed (the walker backs
	// off); with one more, something did.
	if changed, err := l.SyncProcess(100, 1); err != nil || changed {
		t.Fatalf("sync of the same mappings: changed %v, %v", changed, err)
	}
	dl := fp.maps[100]
	fp.maps[100] = append(slices.Clone(dl), Mapping{Start: 0x7f6000000000, End: 0x7f6000001000, Perms: "r-xp"})
	if changed, err := l.SyncProcess(100, 1); err != nil || !changed {
		t.Fatalf("sync after a new mapping: changed %v, %v", changed, err)
	}
	fp.maps[100] = dl
	if changed, err := l.SyncProcess(100, 1); err != nil || !changed {
		t.Fatalf("sync after an unmapping: changed %v, %v", changed, err)
	}
	// The second process shares libc's table and brings libstdc++'s, which
	// evicts libc's (least recently used... both are touched by this sync,
	// libc first) to stay within the budget.
	if _, err := l.SyncProcess(101, 1); err != nil {
		t.Fatal(err)
	}
	s = l.Stats()
	if s.TablesBuilt != 2 || s.TableBytes > s.TableBudgetBytes || s.TablesEvicted != 1 || s.Files != 2 {
		t.Fatalf("after two processes: %+v (libc %d bytes)", s, libcBytes)
	}
	// Removing both unloads everything.
	l.RemoveProcess(100)
	l.RemoveProcess(101)
	s = l.Stats()
	if s.Tables != 0 || s.Files != 0 || s.TableBytes != 0 || s.MappingEntries != 0 || s.TablesUnloaded != 1 {
		t.Fatalf("after removal: %+v", s)
	}
	if got := lpmLen(t, l.maps.mappings); got != 0 {
		t.Fatalf("%d LPM entries left", got)
	}
	var slot uint32
	var inner ebpf.MapID
	it := l.maps.tables.Iterate()
	for it.Next(&slot, &inner) {
		t.Errorf("table slot %d still loaded", slot)
	}

	// A reused pid (another start time) drops what the old process had.
	if _, err := l.SyncProcess(100, 1); err != nil {
		t.Fatal(err)
	}
	fp.maps[100] = []Mapping{libMapping(t, cxx, 0x7f5000000000)}
	if _, err := l.SyncProcess(100, 2); err != nil {
		t.Fatal(err)
	}
	s = l.Stats()
	if s.Files != 1 || s.Tables != 1 || s.TablesUnloaded != 2 {
		t.Fatalf("after pid reuse: %+v", s)
	}
	var pv [procValSize]byte
	if err := l.maps.procs.Lookup(uint32(100), &pv); err != nil || binary.LittleEndian.Uint64(pv[:]) != 2 {
		t.Fatalf("process entry %v %x", err, pv)
	}
}

// TestLoaderConcurrent: processes synced and removed at once share their
// tables, build each file once (a sync takes the build another is making),
// do not deadlock on files mapped in opposite orders, and leave nothing
// behind (run with -race).
func TestLoaderConcurrent(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	cxx := "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
	fp := &fakeProcs{maps: map[int][]Mapping{}}
	for pid := 200; pid < 208; pid++ {
		fp.maps[pid] = []Mapping{libMapping(t, libc, 0x7f0000000000), libMapping(t, cxx, 0x7f1000000000)}
		if pid%2 == 1 {
			fp.maps[pid] = []Mapping{libMapping(t, cxx, 0x7f0000000000), libMapping(t, libc, 0x7f1000000000)}
		}
	}
	l, err := NewLoader(Options{IdleTableBytes: -1, Maps: &lockedProcs{f: fp}, Opener: &lockedProcs{f: fp}, NoVDSO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error)
	for pid := 200; pid < 208; pid++ {
		go func() { _, err := l.SyncProcess(pid, 1); done <- err }()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if s := l.Stats(); s.Processes != 8 || s.Files != 2 || s.Tables != 2 || s.TablesBuilt != 2 {
		t.Fatalf("after 8 processes: %+v", s)
	}
	for pid := 200; pid < 208; pid++ {
		go func() { l.RemoveProcess(pid); done <- nil }()
	}
	for range 8 {
		<-done
	}
	if s := l.Stats(); s.Processes != 0 || s.Files != 0 || s.TableBytes != 0 || s.MappingEntries != 0 {
		t.Fatalf("after removal: %+v", s)
	}
}

// lockedProcs serialises a fakeProcs for concurrent use.
type lockedProcs struct {
	mu sync.Mutex
	f  *fakeProcs
}

func (p *lockedProcs) Mappings(pid int) ([]Mapping, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.f.Mappings(pid)
}

func (p *lockedProcs) OpenMapping(pid int, m Mapping) (*procfs.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.f.OpenMapping(pid, m)
}

func (p *lockedProcs) StatMapping(pid int, m Mapping) (procfs.FileInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.f.StatMapping(pid, m)
}

// A build that finds its job's read allowance spent is put off, not left
// to frame pointers: the file is built at a later sync, once the allowance
// has refilled.
func TestLoaderDefersBuildsOverTheAllowance(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	now := time.Unix(1000, 0)
	work := budget.NewWork(budget.WorkOptions{Burst: 1 << 20, Rate: 1 << 10, Now: func() time.Time { return now }})
	// The job has read all but 8 KiB of its allowance already.
	if !work.Take("job", 1<<20-8<<10) {
		t.Fatal("a fresh allowance refused its burst")
	}
	mapped := procfs.Mapped{FS: procfs.New(""), Work: work, Owner: func(procfs.ID) string { return "job" }}
	l, err := NewLoader(Options{Maps: mapped, Opener: mapped, NoVDSO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	self, err := procfs.New("").ID(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SyncProcess(self.PID, self.Start); err != nil {
		t.Fatal(err)
	}
	first := l.Stats()
	if first.BuildsDeferred == 0 {
		t.Fatalf("no build put off with 8 KiB of allowance left: %+v", first)
	}
	now = now.Add(time.Hour) // refilled
	if _, err := l.SyncProcess(self.PID, self.Start); err != nil {
		t.Fatal(err)
	}
	last := l.Stats()
	t.Logf("first sync: %d tables, %d builds put off; after refills: %d tables, %d put off in all, %d errors", first.Tables, first.BuildsDeferred, last.Tables, last.BuildsDeferred, last.BuildErrors)
	if last.Tables <= first.Tables || last.BuildsDeferred != first.BuildsDeferred || last.BuildErrors != first.BuildErrors {
		t.Errorf("after the allowance refilled: %+v; first sync %+v: want more tables, no more errors", last, first)
	}
}

// TestLoaderJobShares: a job that has loaded its share of processes, LPM
// entries or table bytes is refused more, counted by job, while another
// job still loads its own; the share comes back as its processes go.
func TestLoaderJobShares(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	cxx := "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
	owners := map[int]string{}
	fp := &fakeProcs{maps: map[int][]Mapping{}}
	// Every process maps one of the two libraries and 40 pages of
	// anonymous code: 41 LPM entries.
	proc := func(pid int, owner, lib string) {
		ms := []Mapping{libMapping(t, lib, 0x7f0000000000)}
		for i := range 40 {
			base := 0x7f1000000000 + uint64(i)*0x3000
			ms = append(ms, Mapping{Start: base, End: base + 0x1000, Perms: "r-xp"})
		}
		fp.maps[pid] = ms
		owners[pid] = owner
	}
	l, err := NewLoader(Options{Maps: fp, Opener: fp, NoVDSO: true,
		Owner:               func(id procfs.ID) string { return owners[id.PID] },
		MaxProcessesPerJob:  3,
		MaxMappingsPerJob:   100,
		MaxTableBytesPerJob: 250 << 10, // libc's table (~190 KB) or libstdc++'s, not both
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	entries := func(pid int) int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.procs[pid].keys)
	}
	proc(1, "job a", libc)
	proc(2, "job a", libc)
	proc(3, "job a", cxx)
	proc(4, "job a", libc)
	proc(10, "job b", cxx)
	for _, pid := range []int{1, 2, 3} {
		if _, err := l.SyncProcess(pid, 1); err != nil {
			t.Fatalf("process %d of job a: %v", pid, err)
		}
	}
	// Mappings: 41, 41 and the 18 left of a's 100; tables: libc's
	// loaded, libstdc++'s over a's share.
	if e1, e2, e3 := entries(1), entries(2), entries(3); e1 != 41 || e2 != 41 || e3 != 18 {
		t.Errorf("job a's LPM entries: %d, %d, %d; want 41, 41 and the 18 left of its 100", e1, e2, e3)
	}
	if _, err := l.SyncProcess(4, 1); !errors.Is(err, ErrJobShare) {
		t.Errorf("a fourth process of job a: %v, want ErrJobShare", err)
	}
	// Job b is not held back by a: its process, entries and table load.
	if _, err := l.SyncProcess(10, 1); err != nil {
		t.Fatal(err)
	}
	if entries(10) != 41 {
		t.Errorf("job b's process has %d LPM entries, want all its 41", entries(10))
	}
	s := l.Stats()
	if s.Tables != 2 || s.Processes != 4 {
		t.Errorf("tables %d (want libc's for a, libstdc++'s for b), processes %d", s.Tables, s.Processes)
	}
	got := l.ShareRefusals()
	if got[ShareKey{"job a", ShareProcesses}] != 1 || got[ShareKey{"job a", ShareMappings}] == 0 || got[ShareKey{"job a", ShareTables}] == 0 {
		t.Errorf("refusals %v: want job a's processes, mappings and table bytes", got)
	}
	for k := range got {
		if k.Owner != "job a" {
			t.Errorf("job b refused %v", k)
		}
	}
	// a's processes go: its share comes back, and its fourth loads in full.
	for _, pid := range []int{1, 2, 3} {
		l.RemoveProcess(pid)
	}
	if _, err := l.SyncProcess(4, 1); err != nil || entries(4) != 41 {
		t.Errorf("job a's process once the others went: %v, %d entries", err, entries(4))
	}
	l.RemoveProcess(4)
	l.RemoveProcess(10)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.jobs) != 0 {
		for o, j := range l.jobs {
			t.Errorf("job %q still holds %+v with no process loaded", o, *j)
		}
	}
}

// TestLoaderKeepsIdleTables: the table of a file no process maps any
// more stays loaded, charged to no job, and the next process that maps
// the file uses it without a build; idle tables go first when a new one
// needs room, and past Options.IdleTableBytes.
func TestLoaderKeepsIdleTables(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	cxx := "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
	fp := &fakeProcs{maps: map[int][]Mapping{
		100: {libMapping(t, libc, 0x7f0000000000)},
		101: {libMapping(t, libc, 0x7f3000000000)},
		102: {libMapping(t, cxx, 0x7f4000000000)},
	}}
	owners := map[int]string{100: "job a", 101: "job b", 102: "job b"}
	// libc's table (~190 KB) or libstdc++'s, not both; libc's fits idle.
	l, err := NewLoader(Options{MaxTableBytes: 300 << 10, MaxTableBytesPerJob: 300 << 10, IdleTableBytes: 250 << 10, Maps: fp, Opener: fp, NoVDSO: true,
		Owner: func(id procfs.ID) string { return owners[id.PID] }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	jobBytes := func(owner string) int64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		if j := l.jobs[owner]; j != nil {
			return j.bytes
		}
		return 0
	}
	if _, err := l.SyncProcess(100, 1); err != nil {
		t.Fatal(err)
	}
	libcBytes := l.Stats().TableBytes
	l.RemoveProcess(100)
	s := l.Stats()
	if s.Tables != 1 || s.IdleTables != 1 || s.IdleTableBytes != libcBytes || s.TablesUnloaded != 0 || s.Processes != 0 {
		t.Fatalf("after the last process mapping libc went: %+v, want its table loaded, idle", s)
	}
	if b := jobBytes("job a"); b != 0 {
		t.Errorf("job a's share still holds %d bytes of an idle table", b)
	}
	// Another job's process maps libc: no build, the table is its job's,
	// and the file is identified, not opened.
	opens := fp.opens
	if _, err := l.SyncProcess(101, 1); err != nil {
		t.Fatal(err)
	}
	if fp.opens != opens {
		t.Errorf("libc was opened %d times to reuse its idle table, want none", fp.opens-opens)
	}
	s = l.Stats()
	if s.TablesBuilt != 1 || s.IdleReused != 1 || s.IdleTables != 0 || s.Tables != 1 {
		t.Fatalf("a new process mapping libc: %+v, want the idle table reused, not built again", s)
	}
	if b := jobBytes("job b"); b != libcBytes {
		t.Errorf("job b's share holds %d bytes, want libc's %d", b, libcBytes)
	}
	var pv [procValSize]byte
	if err := l.maps.procs.Lookup(uint32(101), &pv); err != nil {
		t.Fatalf("the process reusing the table has no entry: %v", err)
	}
	// Idle again; libstdc++'s table needs the room: libc's goes, as an
	// unload (no process lost its table), not an eviction.
	l.RemoveProcess(101)
	if _, err := l.SyncProcess(102, 1); err != nil {
		t.Fatal(err)
	}
	s = l.Stats()
	if s.Tables != 1 || s.IdleTables != 0 || s.TablesUnloaded != 1 || s.TablesEvicted != 0 || s.TableBytes > s.TableBudgetBytes {
		t.Fatalf("after libstdc++'s table needed the room: %+v", s)
	}
	// Past IdleTableBytes: libstdc++'s table (larger than the 250 KiB
	// kept idle? then it goes at once) or libc's and it (the oldest goes).
	l.RemoveProcess(102)
	s = l.Stats()
	if s.IdleTableBytes > 250<<10 {
		t.Fatalf("idle tables hold %d bytes, over the 250 KiB kept", s.IdleTableBytes)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.jobs) != 0 {
		t.Errorf("jobs %v hold shares with no process loaded", l.jobs)
	}
	if len(l.files) != l.idle.Len() {
		t.Errorf("%d files known, %d idle: the others should be gone", len(l.files), l.idle.Len())
	}
}
