package symbolize

import (
	"os"
	"path/filepath"
	"testing"

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
	s := New(Options{Proc: procfs.New(root)})
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
	if fr := s.User(procfs.ID{PID: 4242}, []uint64{addr}); fr[0].Function != "" {
		t.Fatalf("partial line resolved: %+v", fr)
	}
	_, err = f.WriteString("_func\n")
	must(t, err)
	must(t, f.Close())
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
	pm := &perfMap{proc: procfs.New(dir), req: procfs.JobFile{PID: 1, Path: "/perf-1.map", UID: -1, MaxSize: maxPerfMapBytes}}
	must(t, pm.refresh())
	for addr, want := range map[uint64]string{0x1010: "new", 0x1085: "inner", 0x10a0: "new"} {
		if got, _ := pm.lookup(addr); got != want {
			t.Errorf("lookup(%#x) = %q, want %q", addr, got, want)
		}
	}
	// A rewritten (shorter) file is read from scratch.
	must(t, os.WriteFile(path, []byte("2000 10 only\n"), 0o644))
	must(t, pm.refresh())
	if got, ok := pm.lookup(0x1010); ok {
		t.Errorf("stale entry %q after rewrite", got)
	}
	if got, _ := pm.lookup(0x2000); got != "only" {
		t.Errorf("lookup after rewrite = %q", got)
	}
}
