package procfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An environment is read only when its pages are resident: a process that
// mapped a file of its own FUSE mount over its environment strings (pages
// not in its page tables) gets ErrNotResident, and nothing is read.
func TestEnvironOnlyWhenResident(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "42")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	page := uint64(os.Getpagesize())
	start := 100*page + 16
	end := start + 2*page // three pages
	// Fields 3 to 49 are zeros but start time; 50 and 51 the environment.
	fields := make([]string, 49)
	for i := range fields {
		fields[i] = "0"
	}
	fields[0] = "S"
	fields[47], fields[48] = fmt.Sprint(start), fmt.Sprint(end)
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("stat", []byte("42 (py) "+strings.Join(fields, " ")+"\n"))
	write("environ", []byte("SLURM_JOB_ID=7\x00"))
	pagemap := func(missing int) {
		b := make([]byte, 104*8)
		for p := 100; p <= 102; p++ {
			if p != missing {
				binary.LittleEndian.PutUint64(b[p*8:], 1<<63)
			}
		}
		write("pagemap", b)
	}
	p := FS{Root: root}
	pagemap(-1)
	if env, err := p.Environ(42, "SLURM_JOB_ID"); err != nil || env["SLURM_JOB_ID"] != "7" {
		t.Fatalf("resident: %v, %v", env, err)
	}
	pagemap(102)
	if env, err := p.Environ(42, "SLURM_JOB_ID"); !errors.Is(err, ErrNotResident) || env != nil {
		t.Errorf("last page not resident: %v, %v; want ErrNotResident", env, err)
	}
	// A live process: the test's own environment is resident.
	if env, err := New("").Environ(os.Getpid(), "PATH"); err != nil || env["PATH"] != os.Getenv("PATH") {
		t.Errorf("own environment: %v, %v", env, err)
	}
}
