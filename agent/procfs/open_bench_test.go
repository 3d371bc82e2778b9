package procfs

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkOpen compares Open (openat2 or the walk, each with its O_PATH
// check and reopen) with a plain os.Open and Stat of the same file: what
// the rules cost. Run: go test -bench Open ./agent/procfs/
func BenchmarkOpen(b *testing.B) {
	proc := b.TempDir()
	root := filepath.Join(proc, "7", "root")
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(root, "tmp", "perf-7.map")
	if err := os.WriteFile(path, []byte("1000 10 f\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	req := JobFile{PID: 7, Path: "/tmp/perf-7.map", UID: os.Getuid(), MaxSize: 1 << 20}
	b.Run("os.Open", func(b *testing.B) {
		for b.Loop() {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			f.Stat()
			f.Close()
		}
	})
	for _, walk := range []bool{false, true} {
		name := "openat2"
		if walk {
			name = "walk"
		} else if !haveOpenat2() {
			continue
		}
		p := FS{Root: proc, walkOnly: walk}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				f, err := p.Open(req)
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}
