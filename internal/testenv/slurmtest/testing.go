package slurmtest

import (
	"context"
	"io"
	"os"
	"testing"
)

// IntegrationEnv is the variable that turns the real-SLURM tests on.
const IntegrationEnv = "SLURMSCOPE_INTEGRATION"

// RequireIntegration skips t unless SLURMSCOPE_INTEGRATION=1. Once it is
// set, a missing prerequisite for mode is a failure, not a skip: CI that
// asked for these tests must not pass without running them.
func RequireIntegration(t testing.TB, mode Mode) {
	t.Helper()
	if os.Getenv(IntegrationEnv) != "1" {
		t.Skipf("set %s=1 (as root, with slurm-wlm and munge installed) to run against a real SLURM", IntegrationEnv)
	}
	if err := CheckPrerequisites(mode); err != nil {
		t.Fatal(err)
	}
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
