package replay_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/slurmscope/slurmscope/agent/unwind/replay"
	"github.com/slurmscope/slurmscope/agent/unwind/replay/recorder"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// TestLive records every workload on this machine now (its compiler, C
// library and interpreters, which may have changed since the committed
// snapshots were taken), round-trips each snapshot through its files, and
// replays it through the same checks: table rules, names, Python frames,
// and the BPF walk.
func TestLive(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("gdb", "gcc", "g++"))
	o := recorder.Options{
		WorkDir:      filepath.Join(t.TempDir(), "work"),
		Src:          filepath.Join("..", "..", "..", "internal", "testenv", "workloads"),
		DebianPython: "/usr/bin/python3.11",
	}
	if _, err := os.Stat(o.DebianPython); err != nil {
		t.Fatalf("Debian's python3.11: %v (scripts/deps.sh installs it)", err)
	}
	// pyenv's interpreters where this machine has all of them.
	if home, err := os.UserHomeDir(); err == nil {
		o.Pyenv = filepath.Join(home, ".pyenv")
		for _, minor := range []string{"9", "10", "11", "12", "13"} {
			if m, _ := filepath.Glob(filepath.Join(o.Pyenv, "versions", "3."+minor+".*", "bin", "python3."+minor)); len(m) == 0 {
				t.Logf("no pyenv CPython 3.%s: CPython is recorded from Debian's python3.11 only", minor)
				o.Pyenv = ""
				break
			}
		}
	}
	ws, err := recorder.Workloads(o)
	if err != nil {
		t.Fatal(err)
	}
	b := newBPFReplay(t)
	for _, w := range ws {
		t.Run(w.Name, func(t *testing.T) {
			rec, err := recorder.Record(w)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), w.Name)
			if err := rec.Save(dir); err != nil {
				t.Fatal(err)
			}
			s, err := replay.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			checkRules(t, s)
			checkSymbols(t, s)
			if s.Python != nil {
				checkPython(t, s)
			}
			b.check(t, s)
		})
	}
}
