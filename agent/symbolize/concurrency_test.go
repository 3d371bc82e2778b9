package symbolize

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// holdParses makes the parse for process pid wait until the returned
// release is called (as a file on a hung file system would), and tells on
// started when it begins.
func holdParses(t *testing.T, pid int) (started <-chan struct{}, release func()) {
	t.Helper()
	st := make(chan struct{}, 16)
	gate := make(chan struct{})
	var once sync.Once
	testHookParse = func(p int) {
		if p != pid {
			return
		}
		st <- struct{}{}
		<-gate
	}
	rel := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { rel(); testHookParse = nil })
	return st, rel
}

// TestAHungFileCostsOnlyItsJob: a job's file that does not answer holds
// its own caller for the guard's timeout, refuses the job's further file
// I/O at once while it hangs, and never holds any other job.
func TestAHungFileCostsOnlyItsJob(t *testing.T) {
	root := t.TempDir()
	hung := lieELF{sections: goodSymtab()}.write(t, root, "hung")
	other := lieELF{sections: goodSymtab()}.write(t, root, "other") // another inode
	mapFile(t, root, 100, hung)
	mapFile(t, root, 101, hung) // same job, same file
	mapFile(t, root, 200, other)
	clock := &fakeClock{t: time.Unix(1000, 0)}
	s := New(Options{Proc: procfs.New(root), Now: clock.now,
		Guard: &procfs.Guard{Timeout: 50 * time.Millisecond},
		Owner: func(id procfs.ID) string { return fmt.Sprintf("job %d", id.PID/100) }})
	started, release := holdParses(t, 100)

	f := s.User(procfs.ID{PID: 100}, []uint64{lieText + 0x100})
	<-started
	if f[0].Function != "" || s.Stats().Errors[ErrStalledIO] != 1 {
		t.Fatalf("the hung job's frame: %+v, errors %v", f, s.Stats().Errors)
	}
	// The other job is not held by it at all (its own parse, its own locks).
	if f := s.User(procfs.ID{PID: 200}, []uint64{lieText + 0x100}); f[0].Function != "lie_function" {
		t.Fatalf("another job while one hangs: %+v", f)
	}
	// The hung job's next process is refused at once, without waiting.
	if f := s.User(procfs.ID{PID: 101}, []uint64{lieText + 0x100}); f[0].Function != "" {
		t.Fatalf("the hung job's other process: %+v", f)
	}
	if st := s.guard.Stats(); st.Stalls != 1 || st.Refused < 1 {
		t.Errorf("guard stats %+v, want one stall and refusals", st)
	}
	release()
	for deadline := time.Now().Add(10 * time.Second); s.guard.Stats().Stuck > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the released parse never finished")
		}
	}
	// Once it answers, the file was parsed once, for everybody.
	clock.advance(retryTransient)
	if f := s.User(procfs.ID{PID: 101}, []uint64{lieText + 0x100}); f[0].Function != "lie_function" {
		t.Fatalf("after the hang: %+v", f)
	}
	if m := s.Stats().FileCacheMisses; m != 2 {
		t.Errorf("parsed %d times, want twice (each file once)", m)
	}
}

// TestOneParsePerFile: processes that need the same file at once wait for
// one parse of it instead of parsing it each.
func TestOneParsePerFile(t *testing.T) {
	root := t.TempDir()
	path := lieELF{sections: goodSymtab()}.write(t, root, "shared")
	const n = 8
	for i := range n {
		mapFile(t, root, 100+i, path)
	}
	s := New(Options{Proc: procfs.New(root)})
	started, release := holdParses(t, 100)
	var wg sync.WaitGroup
	results := make([]string, n)
	wg.Add(1)
	go func() {
		defer wg.Done()
		results[0] = s.User(procfs.ID{PID: 100}, []uint64{lieText + 0x100})[0].Function
	}()
	<-started
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = s.User(procfs.ID{PID: 100 + i}, []uint64{lieText + 0x100})[0].Function
		}()
	}
	time.Sleep(20 * time.Millisecond) // let them queue behind the parse
	release()
	wg.Wait()
	for i, r := range results {
		if r != "lie_function" {
			t.Errorf("process %d: %q", 100+i, r)
		}
	}
	if m := s.Stats().FileCacheMisses; m != 1 {
		t.Errorf("parsed %d times, want once", m)
	}
}

// TestProcfsRefusalsAreCountedByReason: a perf map that is a FIFO, or a
// symbolic link, is refused with its reason, and the lookup goes on.
func TestProcfsRefusalsAreCountedByReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(path string) error
		want ErrorKind
	}{
		{"fifo", func(p string) error { return mkfifo(p) }, ErrNotRegular},
		{"symlink", func(p string) error { return symlink("/etc/shadow", p) }, ErrLink},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := copyTree(t, filepath.Join("testdata", "proc"))
			path := filepath.Join(root, "4242", "root", "tmp", "perf-7.map")
			must(t, removeFile(path))
			must(t, tc.make(path))
			s := New(Options{Proc: procfs.New(root)})
			f := s.User(procfs.ID{PID: 4242}, []uint64{0x7f0000001000})
			if f[0].Function != "" {
				t.Fatalf("resolved through a %s: %+v", tc.name, f)
			}
			if got := s.Stats().Errors[tc.want]; got != 1 {
				t.Errorf("%s = %d, want 1 (errors %v)", tc.want, got, s.Stats().Errors)
			}
		})
	}
}
