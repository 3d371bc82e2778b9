package symbolize

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/procfs/procfstest"
)

func copyTree(t *testing.T, src string) string { return procfstest.CopyTree(t, src) }

func TestPerfMap(t *testing.T) {
	s := New(Options{Proc: procfs.New(filepath.Join("testdata", "proc"))})
	// The map is found under the namespace pid (7), not the host pid.
	frames := s.User(procfs.ID{PID: 4242}, []uint64{
		0x7f0000001000, // leaf at the entry
		0x7f0000002080, // return address just past step: looked up as ...207f
		0x7f0000004005,
		0x7f0000003000, // zero-sized entry is rejected
	})
	want := []string{"py::main:/app/train.py", "py::step:/app/train.py", "jit stub with spaces", ""}
	if len(frames) != len(want) {
		t.Fatalf("frames = %+v", frames)
	}
	for i, w := range want {
		if frames[i].Function != w {
			t.Errorf("frame %d = %q, want %q", i, frames[i].Function, w)
		}
	}
}

func TestPerfMapGrowth(t *testing.T) {
	root := copyTree(t, filepath.Join("testdata", "proc"))
	clock := &fakeClock{t: time.Unix(1000, 0)}
	s := New(Options{Proc: procfs.New(root), Now: clock.now})
	const addr = 0x7f0000005010
	if f := s.User(procfs.ID{PID: 4242}, []uint64{addr}); f[0].Function != "" {
		t.Fatalf("before growth: %+v", f)
	}
	path := filepath.Join(root, "4242", "root", "tmp", "perf-7.map")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A partial line must wait until the writer finishes it.
	_, err = f.WriteString("7f0000005000 100 new_jit")
	must(t, err)
	clock.advance(minPerfMapRefresh)
	if fr := s.User(procfs.ID{PID: 4242}, []uint64{addr}); fr[0].Function != "" {
		t.Fatalf("partial line resolved: %+v", fr)
	}
	_, err = f.WriteString("_func\n")
	must(t, err)
	must(t, f.Close())
	// Read again at most once per minPerfMapRefresh: a miss sooner is a
	// miss.
	if fr := s.User(procfs.ID{PID: 4242}, []uint64{addr}); fr[0].Function != "" {
		t.Fatalf("read again within %v: %+v", minPerfMapRefresh, fr)
	}
	clock.advance(minPerfMapRefresh)
	if fr := s.User(procfs.ID{PID: 4242}, []uint64{addr}); fr[0].Function != "new_jit_func" {
		t.Fatalf("after growth: %+v", fr)
	}
	// Older entries are still there.
	if fr := s.User(procfs.ID{PID: 4242}, []uint64{0x7f0000001000}); fr[0].Function != "py::main:/app/train.py" {
		t.Fatalf("old entry lost: %+v", fr)
	}
}

func TestPerfMapNewerEntryWins(t *testing.T) {
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "1", "root"), 0o755))
	path := filepath.Join(dir, "1", "root", "perf-1.map")
	must(t, os.WriteFile(path, []byte("1000 100 old\n1000 100 new\n1080 10 inner\n"), 0o644))
	req := procfs.JobFile{PID: 1, Path: "/perf-1.map", UID: -1, MaxSize: maxPerfMapBytes}
	var pm *perfMap
	refresh := func() {
		t.Helper()
		var from perfFrom
		if pm != nil {
			from = perfFrom{file: pm.file, readOff: pm.readOff}
		}
		res := readPerfMap(procfs.New(dir), req, from, nil, "test", func() {})
		must(t, res.err)
		pm = pm.merged(res)
	}
	refresh()
	for addr, want := range map[uint64]string{0x1010: "new", 0x1085: "inner", 0x10a0: "new"} {
		if got, _ := pm.lookup(addr); got != want {
			t.Errorf("lookup(%#x) = %q, want %q", addr, got, want)
		}
	}
	// A rewritten (shorter) file is read from scratch.
	must(t, os.WriteFile(path, []byte("2000 10 only\n"), 0o644))
	refresh()
	if got, ok := pm.lookup(0x1010); ok {
		t.Errorf("stale entry %q after rewrite", got)
	}
	if got, _ := pm.lookup(0x2000); got != "only" {
		t.Errorf("lookup after rewrite = %q", got)
	}
}

// fakeClock is a symbolizer's clock that only moves when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
