package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// unitBoundingSet is the packaged unit's CapabilityBoundingSet as
// setpriv's --bounding-set: "-all,+bpf,+perfmon,...".
func unitBoundingSet(t *testing.T) string {
	t.Helper()
	f, err := os.Open("../deploy/slurmscope-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "CapabilityBoundingSet="); ok {
			set := []string{"-all"}
			for _, c := range strings.Fields(v) {
				set = append(set, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
			return strings.Join(set, ",")
		}
	}
	t.Fatal("the unit has no CapabilityBoundingSet")
	return ""
}

// TestUnitCapabilities runs the real agent under exactly the packaged
// unit's capability bounding set (setpriv, as systemd would) against a
// job that spends its time in the kernel, and checks that kernel frames
// are named (CAP_SYSLOG: /proc/kallsyms reads as zeros without it) and
// that the table loaders' priority is set (CAP_SYS_NICE). Then, without
// CAP_SYSLOG, the agent says once at start that kernel symbols are
// hidden.
func TestUnitCapabilities(t *testing.T) {
	lane(t, &simLane)
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("setpriv", "dd"))
	agent := buildAgent(t)
	set := unitBoundingSet(t)
	// A kernel frame without a symbol is named for its module: "[kernel]".
	named := func(s sample) bool { return s.frames[0].fn != "" && !strings.HasPrefix(s.frames[0].fn, "[") }
	run := func(t *testing.T, set string) (*agentProc, []sample) {
		out := evidenceDir(t, "slurmscope-unitcaps-")
		r := newJobRunner(t, "slurmscope-e2e-unitcaps.slice")
		ag := startAgent(t, "setpriv", "--bounding-set="+set, "--inh-caps=-all", "--",
			agent, "run", "--output-dir", out, "--upload-interval", "2s", "--node-name", "unitcaps",
			"--sample-rate", "199", "--metrics-addr", "127.0.0.1:0", "--gpu-metrics=false",
			"--slurm-cgroup-v2-parent", "/"+r.slice, "--slurm-cgroup-v1-parent", "/"+r.slice)
		// 2 s of CPU, nearly all of it in the kernel (read_zero's
		// clearing of the user buffer).
		j := &stackJob{name: "dd", argv: []string{"sh", "-c", "echo ready; exec dd if=/dev/zero of=/dev/null bs=1M count=1000000000"}}
		rj := r.start(j)
		r.stopAfterCPU(rj, 2*time.Second)
		r.wait(rj)
		time.Sleep(3 * time.Second) // the last interval
		ag.stop(t)
		return ag, readSamples(t, filepath.Join(out, j.id), "process_cpu-")
	}

	t.Run("unit", func(t *testing.T) {
		ag, ss := run(t, set)
		kernel := where(ss, func(s sample) bool { return len(s.frames) > 0 && s.frames[0].module == "[kernel]" })
		n, share := shareOf(kernel, named)
		t.Logf("%d samples, %d with a kernel leaf, %d of them named", total(ss), total(kernel), n)
		logTop(t, "kernel samples", kernel)
		if total(kernel) < total(ss)/2 {
			t.Fatalf("%d of %d samples have a kernel leaf: dd's time is in the kernel", total(kernel), total(ss))
		}
		if share < 0.95 {
			t.Errorf("%.1f%% of kernel leaves named, want >= 95%%", 100*share)
			logTop(t, "kernel samples", kernel)
		}
		log := ag.log.String()
		for _, bad := range []string{"kernel symbols are hidden", "table loaders at the default priority"} {
			if strings.Contains(log, bad) {
				t.Errorf("under the unit's capabilities the agent logged %q:\n%s", bad, log)
			}
		}
	})

	t.Run("without CAP_SYSLOG", func(t *testing.T) {
		ag, ss := run(t, strings.Replace(set, ",+syslog", "", 1))
		if n := strings.Count(ag.log.String(), "kernel symbols are hidden"); n != 1 {
			t.Errorf("the agent said %d times that kernel symbols are hidden, want once:\n%s", n, ag.log.String())
		}
		kernel := where(ss, func(s sample) bool { return len(s.frames) > 0 && s.frames[0].module == "[kernel]" })
		if n, _ := shareOf(kernel, named); n != 0 || total(kernel) == 0 {
			t.Errorf("%d of %d kernel leaves named with kallsyms hidden: is the test's premise wrong?", n, total(kernel))
			logTop(t, "kernel samples", kernel)
		}
	})
}
