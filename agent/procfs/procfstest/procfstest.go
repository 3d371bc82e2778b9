// Package procfstest builds synthetic proc trees for tests and benchmarks.
package procfstest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// SyntheticNode writes n processes under a temporary proc root: jobs of 16
// processes each (owned by uid 1001, each a task with its rank), with one
// process in ten in no job, as a busy shared node looks. It returns the
// root.
func SyntheticNode(tb testing.TB, n int) string {
	tb.Helper()
	root := tb.TempDir()
	for pid := 1000; pid < 1000+n; pid++ {
		job := pid / 16
		cg := fmt.Sprintf("12:pids:/\n11:freezer:/\n0::/system.slice/slurmstepd.scope/job_%d/step_0/user/task_%d\n", job, pid%16)
		if pid%10 == 0 {
			cg = "0::/user.slice/user-1001.slice/session-1.scope\n"
		}
		files := map[string]string{
			"stat":    fmt.Sprintf("%d (python3) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, pid),
			"cgroup":  cg,
			"status":  "Name:\tpython3\nUid:\t1001\t1001\t1001\t1001\n",
			"environ": fmt.Sprintf("PATH=/usr/bin\x00SLURM_JOB_ID=%d\x00SLURM_JOB_NAME=train-%d\x00SLURM_JOB_ACCOUNT=a\x00SLURM_JOB_PARTITION=gpu\x00SLURM_PROCID=%d\x00SLURM_NODEID=0\x00", job, job, pid%16),
		}
		d := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return root
}

// CopyTree copies a fixture tree into a temporary directory, so a test can
// change it, and returns the copy.
func CopyTree(tb testing.TB, src string) string {
	tb.Helper()
	dst := tb.TempDir()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		tb.Fatal(err)
	}
	return dst
}
