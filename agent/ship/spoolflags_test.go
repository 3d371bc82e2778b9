package ship

import (
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/spool"
)

// TestSpoolFlags: the two flags take the backend's prefix and defaults
// (the bound shown and read with a unit), land in Dir and MaxBytes, and Open's errors name the directory's flag.
func TestSpoolFlags(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var s SpoolFlags
	s.Register(fs, "x-", "/var/lib/x", 1<<20, "x batches")
	if f := fs.Lookup("x-spool-dir"); f == nil || f.DefValue != "/var/lib/x" {
		t.Fatalf("--x-spool-dir: %+v", f)
	}
	if f := fs.Lookup("x-spool-max-bytes"); f == nil || f.DefValue != "1MiB" {
		t.Fatalf("--x-spool-max-bytes: %+v", f)
	}
	dir := filepath.Join(t.TempDir(), "x")
	if err := fs.Parse([]string{"--x-spool-dir=" + dir, "--x-spool-max-bytes=4KiB"}); err != nil {
		t.Fatal(err)
	}
	sp, err := s.Open(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if sp.Dir() != dir || sp.MaxBytes() != 4096 {
		t.Errorf("opened %s with bound %d", sp.Dir(), sp.MaxBytes())
	}
	if _, err := s.Open(nil); !errors.Is(err, spool.ErrLocked) || !strings.HasPrefix(err.Error(), "--x-spool-dir: ") {
		t.Errorf("second Open: %v, want ErrLocked named by --x-spool-dir", err)
	}
}
