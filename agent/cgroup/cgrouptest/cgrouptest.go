// Package cgrouptest builds fixture cgroup trees for tests that attribute
// processes from fixture proc trees: the directories the processes'
// cgroup files name, owned by the test's own user.
package cgrouptest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/cgroup"
)

// Mirror makes, in a temporary directory laid out as a hybrid host's
// /sys/fs/cgroup (v2 in unified/, each v1 hierarchy in its own directory),
// every cgroup directory the cgroup files under procRoot name, and returns
// a Tree of it that expects the test's uid as the owner, as a node expects
// root.
func Mirror(tb testing.TB, procRoot string) *cgroup.Tree {
	tb.Helper()
	t := &cgroup.Tree{Root: tb.TempDir(), Owner: os.Getuid()}
	files, err := filepath.Glob(filepath.Join(procRoot, "*", "cgroup"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		for _, line := range bytes.Split(b, []byte{'\n'}) {
			parts := strings.SplitN(string(line), ":", 3)
			if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
				continue
			}
			Add(tb, t, parts[0] == "0" && parts[1] == "", parts[1], parts[2])
		}
	}
	return t
}

// Add makes one cgroup directory, path as /proc/<pid>/cgroup shows it, in
// the v2 hierarchy or in the v1 one of controllers.
func Add(tb testing.TB, t *cgroup.Tree, v2 bool, controllers, path string) string {
	tb.Helper()
	mnt := filepath.Join(t.Root, "unified")
	if !v2 {
		mnt = filepath.Join(t.Root, strings.TrimPrefix(controllers, "name="))
	}
	dir := filepath.Join(mnt, filepath.Clean("/"+path))
	if !strings.HasPrefix(dir, t.Root) || strings.ContainsRune(controllers, '/') {
		tb.Fatalf("cgroup path %q escapes the fixture", path)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}
