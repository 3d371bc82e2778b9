package procfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/budget"
)

// TestMappedChargesReads: what a reader of mapped files reads through
// File.Reader is charged to the process's owner in the read allowance:
// past it, reads fail with budget.ErrWorkLimit, and only that owner's.
func TestMappedChargesReads(t *testing.T) {
	proc, root := jobRoot(t, "7")
	lib := filepath.Join(root, "lib.so")
	mustDo(t, os.WriteFile(lib, make([]byte, 8192), 0o644))
	var st syscall.Stat_t
	mustDo(t, syscall.Stat(lib, &st))
	mustDo(t, os.WriteFile(filepath.Join(proc, "7", "status"), fmt.Appendf(nil, "Name:\tprog\nUid:\t%d\t%d\t%d\t%d\n", me(), me(), me(), me()), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(proc, "7", "stat"), []byte("7 (prog) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5000 0 0\n"), 0o644))
	m := Mapping{Start: 0x1000, End: 0x3000, Perms: "r-xp", Dev: st.Dev, Inode: st.Ino, Path: "/lib.so"}

	clock := time.Unix(1000, 0)
	work := budget.NewWork(budget.WorkOptions{Burst: 12 << 10, Rate: 1, Now: func() time.Time { return clock }})
	var asked ID
	mapped := Mapped{FS: FS{Root: proc}, Work: work, Owner: func(id ID) string { asked = id; return "job 42" }}
	f, err := mapped.OpenMapping(7, m)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if asked != (ID{PID: 7, Start: 5000}) {
		t.Errorf("owner asked for %v, want 7@5000", asked)
	}
	b, err := io.ReadAll(f.Reader())
	if err != nil || len(b) != 8192 {
		t.Fatalf("read %d bytes, %v: the allowance holds them", len(b), err)
	}
	if _, err := f.Reader().ReadAt(make([]byte, 8192), 0); !errors.Is(err, budget.ErrWorkLimit) {
		t.Errorf("past the allowance: %v, want ErrWorkLimit", err)
	}
	if !work.Take("job 43", 8192) {
		t.Error("another job's allowance was spent")
	}
	// Without Work, nothing is charged.
	g, err := Mapped{FS: FS{Root: proc}}.OpenMapping(7, m)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if b, err := io.ReadAll(g.Reader()); err != nil || len(b) != 8192 {
		t.Errorf("uncharged: %d bytes, %v", len(b), err)
	}
}
