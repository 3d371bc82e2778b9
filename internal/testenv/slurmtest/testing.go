package slurmtest

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// Needs is what clusters in modes need from the host (CheckPrerequisites),
// for testenv.RequireIntegration.
func Needs(modes ...Mode) testenv.Requirement {
	var names []string
	for _, m := range modes {
		names = append(names, m.String())
	}
	return testenv.Func("a cgroup "+strings.Join(names, " and ")+" SLURM (root, slurm-wlm, munge)", func() error {
		var errs []error
		for _, m := range modes {
			errs = append(errs, CheckPrerequisites(m))
		}
		return errors.Join(errs...)
	})
}

// StartT starts a cluster, logs to t, and stops it in t.Cleanup (also
// when the test fails). Unless o.WorkDir is set it uses a fresh directory
// in os.TempDir (not t.TempDir, whose parent the test users cannot enter),
// removed afterwards if the test passed and kept for post-mortems if not.
func StartT(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.WorkDir == "" {
		dir, err := os.MkdirTemp("", "slurmscope-e2e-")
		if err != nil {
			t.Fatal(err)
		}
		o.WorkDir = dir
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("slurmtest: work dir kept: %s", dir)
				return
			}
			os.RemoveAll(dir)
		})
	}
	if o.Log == nil {
		o.Log = tWriter{t}
	}
	c, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("slurmtest: logs were in %s:\n%s", c.LogDir(), c.logTails())
		}
		if err := c.Stop(); err != nil {
			t.Errorf("slurmtest: stop: %v", err)
		}
	})
	return c
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(trimNL(p)))
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && p[len(p)-1] == '\n' {
		p = p[:len(p)-1]
	}
	return p
}

var _ io.Writer = tWriter{}
