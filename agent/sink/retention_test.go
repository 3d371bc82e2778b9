package sink

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/service"
)

// TestPrune: files past the age go, then the oldest while over the bytes;
// only *.pb.gz one level down, links not followed, empty job directories
// removed.
func TestPrune(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	mk := func(root, rel string, size int, age time.Duration) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	left := func(root string) []string {
		var out []string
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && p != root {
				rel, _ := filepath.Rel(root, p)
				out = append(out, rel)
			}
			return nil
		})
		slices.Sort(out)
		return out
	}
	setup := func(t *testing.T) string {
		root := t.TempDir()
		mk(root, "1/process_cpu-1.pb.gz", 100, 10*24*time.Hour)
		mk(root, "1/process_cpu-2.pb.gz", 100, 3*24*time.Hour)
		mk(root, "2/process_cpu-3.pb.gz", 100, 2*time.Hour)
		mk(root, "2/gpu-4.pb.gz", 100, time.Hour)
		mk(root, "2/notes.txt", 100, 30*24*time.Hour) // not the agent's: kept
		mk(root, "top.pb.gz", 100, 30*24*time.Hour)   // not in a job directory: kept
		outside := t.TempDir()
		mk(outside, "x.pb.gz", 100, 30*24*time.Hour)
		if err := os.Symlink(filepath.Join(outside, "x.pb.gz"), filepath.Join(root, "2", "link.pb.gz")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := os.Stat(filepath.Join(outside, "x.pb.gz")); err != nil {
				t.Errorf("a link's target was removed: %v", err)
			}
		})
		return root
	}
	for _, c := range []struct {
		name  string
		keep  Retention
		files int
		want  []string
	}{
		{"none", Retention{}, 0, []string{"1", "1/process_cpu-1.pb.gz", "1/process_cpu-2.pb.gz", "2", "2/gpu-4.pb.gz", "2/link.pb.gz", "2/notes.txt", "2/process_cpu-3.pb.gz", "top.pb.gz"}},
		{"age 7d", Retention{MaxAge: 7 * 24 * time.Hour}, 1, []string{"1", "1/process_cpu-2.pb.gz", "2", "2/gpu-4.pb.gz", "2/link.pb.gz", "2/notes.txt", "2/process_cpu-3.pb.gz", "top.pb.gz"}},
		{"age 1d empties job 1", Retention{MaxAge: 24 * time.Hour}, 2, []string{"2", "2/gpu-4.pb.gz", "2/link.pb.gz", "2/notes.txt", "2/process_cpu-3.pb.gz", "top.pb.gz"}},
		{"250 bytes, oldest first", Retention{MaxBytes: 250}, 2, []string{"2", "2/gpu-4.pb.gz", "2/link.pb.gz", "2/notes.txt", "2/process_cpu-3.pb.gz", "top.pb.gz"}},
		{"both", Retention{MaxAge: 7 * 24 * time.Hour, MaxBytes: 150}, 3, []string{"2", "2/gpu-4.pb.gz", "2/link.pb.gz", "2/notes.txt", "top.pb.gz"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := setup(t)
			n, b, err := prune(root, c.keep, now)
			if err != nil || n != c.files || b != int64(100*c.files) {
				t.Errorf("prune: %d files, %d bytes, %v; want %d files", n, b, err, c.files)
			}
			if got := left(root); !slices.Equal(got, c.want) {
				t.Errorf("left %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestRetentionFlags(t *testing.T) {
	k := parsedKind(t, "--output-retention=7d", "--output-max-bytes=2GiB")
	if k.keep.MaxAge != 7*24*time.Hour || k.keep.MaxBytes != 2<<30 {
		t.Errorf("got %+v", k.keep)
	}
	// The flags read sizes and durations with package units; a value it
	// refuses is a flag error, and the bounds are unchanged.
	for _, c := range []struct {
		arg  string
		want Retention
		ok   bool
	}{
		{"--output-max-bytes=0", Retention{}, true},
		{"--output-max-bytes=512MiB", Retention{MaxBytes: 512 << 20}, true},
		{"--output-max-bytes=10GB", Retention{MaxBytes: 10e9}, true},
		{"--output-max-bytes=10G", Retention{}, false},
		{"--output-max-bytes=-1", Retention{}, false},
		{"--output-max-bytes=5 MiB", Retention{}, false},
		{"--output-max-bytes=MiB", Retention{}, false},
		{"--output-max-bytes=99999999999TiB", Retention{}, false},
		{"--output-retention=0", Retention{}, true},
		{"--output-retention=36h", Retention{MaxAge: 36 * time.Hour}, true},
		{"--output-retention=7d", Retention{MaxAge: 7 * 24 * time.Hour}, true},
		{"--output-retention=1w", Retention{MaxAge: 7 * 24 * time.Hour}, true},
		{"--output-retention=1.5d", Retention{}, false},
		{"--output-retention=d", Retention{}, false},
	} {
		var k Kind
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		k.Flags(fs)
		err := fs.Parse([]string{c.arg})
		if (err == nil) != c.ok || k.keep != c.want {
			t.Errorf("%s: %+v, %v", c.arg, k.keep, err)
		}
	}
	// A negative age passes the flag (a Go duration may be negative) and
	// fails the check.
	if err := parsedKind(t, "--output-retention=-5s").Check(); err == nil || !strings.Contains(err.Error(), "--output-retention") {
		t.Errorf("--output-retention=-5s: check %v", err)
	}
	// The defaults, 0, are shown as the flags take them (and so not at all
	// in the help).
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	new(Kind).Flags(fs)
	if r, b := fs.Lookup("output-retention"), fs.Lookup("output-max-bytes"); r.DefValue != "0s" || b.DefValue != "0" {
		t.Errorf("defaults shown as %q, %q", r.DefValue, b.DefValue)
	}
}

// TestOutputDirMustBeWritable: a directory the agent cannot write fails at
// open, not silently later.
func TestOutputDirMustBeWritable(t *testing.T) {
	if os.Geteuid() == 0 {
		// Root writes through a 0555 directory; a file in its place
		// fails for root too.
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		k := parsedKind(t, "--output-dir="+filepath.Join(f, "sub"))
		if err := k.Check(); err == nil {
			t.Error("an output dir under a regular file passed Check")
		}
		if _, err := k.Open(service.Env{}); err == nil {
			t.Error("an output dir under a regular file opened")
		}
		return
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := parsedKind(t, "--output-dir="+dir).Check(); err == nil {
		t.Error("a read-only output dir passed Check")
	}
}

// TestWriteAfterPruneRemovedTheDir: a job directory the prune removed
// between Write's MkdirAll and its file is made again; the profile is
// written, not lost.
func TestWriteAfterPruneRemovedTheDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "4242")
	if err := writeNew(dir, "process_cpu-1", ".pb.gz", []byte("a")); err != nil {
		t.Fatalf("writeNew into a removed directory: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "process_cpu-1.pb.gz")); err != nil || string(b) != "a" {
		t.Errorf("%q, %v", b, err)
	}
}
