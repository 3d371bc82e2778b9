package stackwalk_test

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/agent/stackwalk"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// manyStacks runs Python through ever new stacks: random chains of 200
// functions, so that nearly every sample is a stack of its own.
const manyStacks = `import random, sys
fs = []
for i in range(200):
    exec(f"def f{i}(d, r):\n    if d == 0:\n        return sum(range(50))\n    return fs[r.randrange(200)](d - 1, r)", globals())
    fs.append(globals()[f"f{i}"])
r = random.Random(1)
print("ready", flush=True)
while True:
    fs[r.randrange(200)](r.randrange(1, 12), r)
`

// TestIntegrationInterpShare: one job whose processes run through more
// distinct Python stacks than the interpreter stacks map holds fills only
// its share (an eighth) of it in a drain interval, and another job's
// samples keep their Python frames.
func TestIntegrationInterpShare(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("python3.11"))
	var mu sync.Mutex
	jobs := map[int]string{}
	owner := func(id procfs.ID) string { mu.Lock(); defer mu.Unlock(); return jobs[id.PID] }
	w, err := stackwalk.New(stackwalk.Options{Tables: true, Interpreters: []interp.Interpreter{python.CPython{}}, Owner: owner,
		Profiled: func(id procfs.ID) bool { return owner(id) != "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// A small map, so that job a alone could fill it in the interval.
	const entries = 512
	s, err := cpu.New(cpu.Options{SampleRate: 499, Stacks: w, MaxInterpStackEntries: entries})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	start := func(job string, args ...string) int {
		cmd := exec.Command("python3.11", args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		jobs[cmd.Process.Pid] = job
		mu.Unlock()
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		if sc := bufio.NewScanner(out); !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("%v did not start", args)
		}
		return cmd.Process.Pid
	}
	split, err := filepath.Abs("../../internal/testenv/workloads/python/split.py")
	if err != nil {
		t.Fatal(err)
	}
	a1 := start("job-a", "-c", manyStacks)
	a2 := start("job-a", "-c", manyStacks)
	b := start("job-b", split, "1000")

	// Set up, then one long interval: two busy processes of job a take
	// about 10000 samples in it, nearly all distinct stacks.
	time.Sleep(3 * time.Second)
	if _, _, err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	samples, st, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	stacksOf := map[int]map[*bpf.InterpStack]bool{a1: {}, a2: {}, b: {}}
	var bAll, bPy uint64
	for _, smp := range samples {
		if m := stacksOf[smp.Proc.PID]; m != nil && smp.Interp != nil {
			m[smp.Interp] = true
		}
		if smp.Proc.PID == b && smp.Setup == bpf.SetupNative|bpf.SetupInterp {
			bAll += smp.Count
			if smp.Interp != nil {
				bPy += smp.Count
			}
		}
	}
	aStored := len(stacksOf[a1]) + len(stacksOf[a2])
	t.Logf("job a stored %d interpreter stacks (share %d), %d refused, map full %d; job b: %d of %d set-up samples with Python frames",
		aStored, entries/8, st.InterpShare, st.InterpStackMapFull, bPy, bAll)
	if aStored > entries/8 || int(st.InterpShare) < entries {
		t.Errorf("job a stored %d interpreter stacks, %d refused: want at most its share, %d, and more than the whole map (%d) refused", aStored, st.InterpShare, entries/8, entries)
	}
	if bAll < 200 || float64(bPy) < 0.99*float64(bAll) {
		t.Errorf("job b: %d of %d set-up samples kept their Python frames, want 99%% of at least 200", bPy, bAll)
	}
}
