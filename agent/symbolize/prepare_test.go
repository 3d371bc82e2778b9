package symbolize

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// A process that exits before its samples are symbolised still resolves if
// it was prepared while it lived; without Prepare it cannot.
func TestPrepareOutlivesTheProcess(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "target")
	compile(t, "gcc", "-O1", "-pie", "-fPIE", "-o", bin, srcPath("target.c"))

	run := func(prepare bool) []Frame {
		pid, addr := startTarget(t, bin)
		id, err := procfs.New("").ID(pid)
		if err != nil {
			t.Fatal(err)
		}
		s := New(Options{})
		if prepare {
			s.Prepare(id)
		}
		syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 200; i++ { // wait until the kernel tears it down
			if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "maps")); err != nil {
				break
			}
			b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "maps"))
			if len(b) == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return s.User(id, leafAndReturn(addr))
	}
	checkResolves(t, run(true), "target_function")
	if f := run(false); f[0].Function != "" {
		t.Errorf("an unprepared, exited process resolved to %q: the test no longer shows what Prepare is for", f[0].Function)
	}
}
