package procfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// cgroupTree is a base with job_1/cpu.stat, and things a hostile or broken
// tree could hold instead of files.
func cgroupTree(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	job := filepath.Join(base, "job_1")
	mustDo(t, os.MkdirAll(filepath.Join(job, "step_0"), 0o755))
	mustDo(t, os.MkdirAll(filepath.Join(job, "step_batch"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(job, "cpu.stat"), []byte("usage_usec 42\n"), 0o444))
	mustDo(t, os.WriteFile(filepath.Join(job, "not-a-dir"), nil, 0o444))
	mustDo(t, syscall.Mkfifo(filepath.Join(job, "memory.peak"), 0o644))
	mustDo(t, os.Symlink("/etc/passwd", filepath.Join(job, "memory.max")))
	mustDo(t, os.Symlink(job, filepath.Join(base, "job_2")))
	return base
}

// beneathModes runs f with openat2 and with the component walk.
func beneathModes(t *testing.T, f func(t *testing.T)) {
	modes(t, func(t *testing.T, walk bool) {
		old := beneathWalkOnly
		beneathWalkOnly = walk
		t.Cleanup(func() { beneathWalkOnly = old })
		f(t)
	})
}

func TestReadFileBeneath(t *testing.T) { beneathModes(t, testReadFileBeneath) }
func TestReadDirBeneath(t *testing.T)  { beneathModes(t, testReadDirBeneath) }

func testReadFileBeneath(t *testing.T) {
	base := cgroupTree(t)
	b, err := ReadFileBeneath(base, "/job_1/cpu.stat", 64)
	if err != nil || string(b) != "usage_usec 42\n" {
		t.Fatalf("cpu.stat: %q, %v", b, err)
	}
	// The base may be reached through a link; nothing below it.
	link := filepath.Join(t.TempDir(), "cpu,cpuacct")
	mustDo(t, os.Symlink(base, link))
	if b, err := ReadFileBeneath(link, "job_1/cpu.stat", 64); err != nil || len(b) == 0 {
		t.Errorf("through a linked base: %q, %v", b, err)
	}
	for _, tc := range []struct {
		rel  string
		want error
	}{
		{"job_1/memory.peak", ErrNotRegular}, // a FIFO: never opened for reading, so never blocks
		{"job_1/memory.max", ErrLink},
		{"job_2/cpu.stat", ErrLink},
		{"job_1/missing", fs.ErrNotExist},
		{"../" + filepath.Base(base) + "/job_1/nothing", fs.ErrNotExist},
		{"job_1", ErrNotRegular},
	} {
		if _, err := ReadFileBeneath(base, tc.rel, 64); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.rel, err, tc.want)
		}
	}
	// What is read is bounded, whatever the size says (cgroupfs says 0).
	if _, err := ReadFileBeneath(base, "job_1/cpu.stat", 5); !errors.Is(err, ErrTooLarge) {
		t.Errorf("14 bytes with limit 5: %v", err)
	}
	if _, err := ReadFileBeneath(base, "job_1/cpu.stat", 0); err == nil {
		t.Error("no limit accepted")
	}
}

func TestReadFileBeneathOwner(t *testing.T) {
	base := cgroupTree(t)
	old := agentUID
	t.Cleanup(func() { agentUID = old })
	agentUID = os.Getuid() + 1 // the files are now some other user's
	if os.Getuid() == 0 {
		// Root's files are always accepted; make one that is not root's.
		p := filepath.Join(base, "job_1", "cpu.stat")
		mustDo(t, os.Chown(p, 4242, 4242))
		mustDo(t, os.Chown(filepath.Join(base, "job_1"), 4242, 4242))
	}
	if _, err := ReadFileBeneath(base, "job_1/cpu.stat", 64); !errors.Is(err, ErrOwner) {
		t.Errorf("another user's file: %v", err)
	}
	if _, err := ReadDirBeneath(base, "job_1", 8, -1); !errors.Is(err, ErrOwner) {
		t.Errorf("another user's directory: %v", err)
	}
	// The job's own user may own a directory (Slurm's v1 step
	// directories), not a file.
	owner := os.Getuid()
	if owner == 0 {
		owner = 4242
	}
	if _, err := ReadDirBeneath(base, "job_1", 8, owner); err != nil {
		t.Errorf("the job user's directory: %v", err)
	}
}

func testReadDirBeneath(t *testing.T) {
	base := cgroupTree(t)
	names, err := ReadDirBeneath(base, "job_1", 8, -1)
	slices.Sort(names)
	if err != nil || strings.Join(names, ",") != "step_0,step_batch" {
		t.Fatalf("job_1: %v, %v (want the two step directories, no files, FIFOs or links)", names, err)
	}
	if names, err := ReadDirBeneath(base, "", 8, -1); err != nil || strings.Join(names, ",") != "job_1" {
		t.Errorf("base: %v, %v (the linked job_2 is not a directory of it)", names, err)
	}
	if _, err := ReadDirBeneath(base, "job_1", 1, -1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("two directories, max 1: %v", err)
	}
	if _, err := ReadDirBeneath(base, "job_2", 8, -1); !errors.Is(err, ErrLink) {
		t.Errorf("a link to a directory: %v", err)
	}
	if _, err := ReadDirBeneath(base, "job_1/not-a-dir", 8, -1); !errors.Is(err, ErrNotDir) {
		t.Errorf("a file: %v", err)
	}
	if _, err := ReadDirBeneath(base, "job_9", 8, -1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}
