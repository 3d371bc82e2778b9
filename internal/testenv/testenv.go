// Package testenv decides whether a test may run on this host: the one
// integration gate (RequireIntegration) and the prerequisites tests name
// (Root, BTF, Tools, Func). One rule holds everywhere: with
// SLURMSCOPE_INTEGRATION=1 a missing prerequisite fails the test, so CI
// cannot pass by not testing; without it the test is skipped, saying what
// it needs.
//
// The subdirectories are the test environments themselves: a real SLURM
// (slurmtest), Prometheus (promtest), the Pyroscope and CUDA stand-ins
// (pyrostandin, cudastandin), simulated jobs (simjob, memcg), the cgroup v2
// shim and the workloads.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Env is the variable that turns the integration tier on.
const Env = "SLURMSCOPE_INTEGRATION"

// Integration reports whether the integration tier was asked for.
func Integration() bool { return os.Getenv(Env) == "1" }

// Requirement is something a test needs from the host.
type Requirement struct {
	// What names it in a skip message: "root", "prometheus".
	What string
	// Check returns nil when the host has it, else what is missing.
	Check func() error
}

// Func is a requirement named what, met when check returns nil.
func Func(what string, check func() error) Requirement {
	return Requirement{What: what, Check: check}
}

// Root is met when the test runs as root.
var Root = Func("root", func() error {
	if os.Geteuid() != 0 {
		return errors.New("not running as root")
	}
	return nil
})

// btfPath is where the kernel publishes its own BTF, which CO-RE programs
// are relocated against.
const btfPath = "/sys/kernel/btf/vmlinux"

// BTF is met when the kernel has BTF, as the CO-RE eBPF programs need.
var BTF = Func("kernel BTF", func() error {
	if _, err := os.Stat(btfPath); err != nil {
		return fmt.Errorf("no kernel BTF (%v; a kernel built with CONFIG_DEBUG_INFO_BTF)", err)
	}
	return nil
})

// Tools is met when every named program is on PATH.
func Tools(names ...string) Requirement {
	return Func(strings.Join(names, ", "), func() error {
		var missing []string
		for _, n := range names {
			if _, err := exec.LookPath(n); err != nil {
				missing = append(missing, n)
			}
		}
		if missing != nil {
			return fmt.Errorf("%s not on PATH (scripts/deps.sh installs the suite's dependencies)", strings.Join(missing, ", "))
		}
		return nil
	})
}

// RequireIntegration gates an integration test: it skips t unless
// SLURMSCOPE_INTEGRATION=1, saying what the test needs, and then fails t
// unless every requirement is met.
func RequireIntegration(t testing.TB, reqs ...Requirement) {
	t.Helper()
	if !Integration() {
		msg := "integration test: set " + Env + "=1"
		if len(reqs) > 0 {
			msg += "; it needs " + names(reqs)
		}
		t.Skip(msg)
		return
	}
	Require(t, reqs...)
}

// Require runs t only where every requirement is met: a test that needs a
// tool but is no integration test (promtool's lint, a C compiler). An unmet
// one fails t under SLURMSCOPE_INTEGRATION=1 and skips it otherwise.
func Require(t testing.TB, reqs ...Requirement) {
	t.Helper()
	var unmet []string
	for _, r := range reqs {
		if err := r.Check(); err != nil {
			unmet = append(unmet, r.What+": "+err.Error())
		}
	}
	if unmet != nil {
		Unmet(t, "needs "+strings.Join(unmet, "; "))
	}
}

// Unmet reports a prerequisite t lacks, described by why: a failure under
// SLURMSCOPE_INTEGRATION=1, a skip otherwise.
func Unmet(t testing.TB, why string) {
	t.Helper()
	if Integration() {
		t.Fatal(Env + "=1, but the test " + why)
		return
	}
	t.Skip(why)
}

func names(reqs []Requirement) string {
	n := make([]string, len(reqs))
	for i, r := range reqs {
		n[i] = r.What
	}
	return strings.Join(n, ", ")
}
