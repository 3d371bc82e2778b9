package stackwalk

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// forker is a Python program that, once told on stdin, forks: "storm N"
// forks N children that _exit at once, one after the other; "spawn N" runs
// /bin/true N times (fork, exec); "hold N" forks N children that wait for
// stdin to close. It prints "done" after each.
const forker = `import os, sys
print("ready", flush=True)
held = []
for line in sys.stdin:
    cmd, n = line.split()
    for _ in range(int(n)):
        if cmd == "spawn":
            os.spawnv(os.P_WAIT, "/bin/true", ["true"])
        elif cmd == "storm":
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        else:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(w)
                for _, hw in held:
                    os.close(hw)
                os.read(r, 1)
                os._exit(0)
            os.close(r)
            held.append((pid, w))
    if cmd == "release":
        for pid, w in held:
            os.close(w)
            os.waitpid(pid, 0)
        held = []
    print("done", flush=True)
`

// TestIntegrationForkStorm: forked children get their set-up parent's
// unwinder and interpreter entries at their fork, and give them back when
// they exit, so that a fork storm of children that never exec leaves the
// shared tables as it found them; at most STACK_FORK_SHARE (256) live
// descendants of one process are handed over, the rest counted.
func TestIntegrationForkStorm(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("python3.11"))
	var target atomic.Int64
	w, err := New(Options{Tables: true, Interpreters: []interp.Interpreter{python.CPython{}},
		Profiled: func(id procfs.ID) bool { return int64(id.PID) == target.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s, err := cpu.New(cpu.Options{SampleRate: 499, Stacks: w})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	cmd := exec.Command("python3.11", "-c", forker)
	// Its own process group: the children it holds go with it, however
	// the test ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	target.Store(int64(cmd.Process.Pid))
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	out := bufio.NewScanner(outp)
	expect := func(want string) {
		t.Helper()
		if !out.Scan() || out.Text() != want {
			t.Fatalf("forker said %q, want %q", out.Text(), want)
		}
	}
	expect("ready")
	do := func(cmd string, n int) {
		t.Helper()
		if _, err := io.WriteString(in, fmt.Sprintf("%s %d\n", cmd, n)); err != nil {
			t.Fatal(err)
		}
		expect("done")
	}
	deadline := time.Now().Add(30 * time.Second)
	// Loaded, and its entries written (the loader records a process
	// before it writes its kernel entry).
	for !w.loader.Loaded(cmd.Process.Pid, mustStart(t, cmd.Process.Pid)) || entries(t, w)[0] == 0 || !hasInterpEntry(w, cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("the forker was never set up")
		}
		do("storm", 20) // its forks make it run, and so be sampled and announced
	}
	before := entries(t, w)

	do("storm", 5000)
	after := entries(t, w)
	t.Logf("entries (unwind_procs, interp_procs): %v before, %v after 5000 fork+_exit", before, after)
	// Exact: a child sampled as it exits is announced, and its tables
	// were loaded after its exit hook had run, until Walker.sync checked
	// for that (2 runs of 15 left one entry, under four busy loops).
	if after != before {
		t.Errorf("entries %v after 5000 forks that exited, %v before: the exit hook did not free them, or a sync wrote one after it", after, before)
		logEntries(t, w)
	}

	do("hold", 300)
	held := entries(t, w)
	refused := forksRefused(t, w)
	t.Logf("with 300 live children: entries %v, forks refused %d", held, refused)
	if held[0] != after[0]+256 || held[1] != after[1]+256 || refused != 2*(300-256) {
		t.Errorf("300 live children: entries %v (before %v), refused %d; want 256 more of each and %d refused (44 per table)",
			held, after, refused, 2*(300-256))
	}
	// A rescan finds the held children: they are unwound through the
	// forker's tables, and not loaded on their own (which took away the
	// entry that gives the forker's share back at their exit).
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(kids)) {
		pid, _ := strconv.Atoi(f)
		if id, err := procfs.New("").ID(pid); err == nil {
			w.AttachProcess(id)
		}
	}
	time.Sleep(500 * time.Millisecond) // the syncers
	do("release", 0)
	if e := entries(t, w); e != after {
		t.Errorf("entries %v once the children exited, %v before", e, after)
		logEntries(t, w)
	}
	// Children that exec give their place back at the exec.
	do("spawn", 300)
	// The share is given back in full: 300 new children, 256 handed over.
	do("hold", 300)
	if e, r := entries(t, w), forksRefused(t, w); e[0] != after[0]+256 || e[1] != after[1]+256 || r != 2*refused {
		t.Errorf("after the release, 300 rescanned and 300 spawned: 300 new children got entries %v (want %v + 256), refused %d (want %d)",
			e, after, r-refused, refused)
	}
	do("release", 0)
}

func mustStart(t *testing.T, pid int) uint64 {
	id, err := procfs.New("").ID(pid)
	if err != nil {
		t.Fatal(err)
	}
	return id.Start
}

// hasInterpEntry reports whether pid has an interp_procs entry.
func hasInterpEntry(w *Walker, pid int) bool {
	var v bpf.InterpProc
	return w.shared["interp_procs"].Lookup(uint32(pid), &v) == nil // #nosec G115 -- a test's child pid
}

func entries(t *testing.T, w *Walker) [2]int {
	t.Helper()
	u, err := w.loader.ProcessEntries()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := bpf.EachEntry(w.shared["interp_procs"], false, func(*uint32, *bpf.InterpProc) { n++ }); err != nil {
		t.Fatal(err)
	}
	return [2]int{len(u), n}
}

// logEntries logs the tables' entries, and what /proc says of each pid.
func logEntries(t *testing.T, w *Walker) {
	t.Helper()
	u, _ := w.loader.ProcessEntries()
	for _, e := range u {
		st, err := procfs.New("").Stat(e.PID)
		t.Logf("unwind_procs %d: start %d alias %d forks %d; /proc: %+v %v", e.PID, e.StartTicks, e.AliasPID, e.Forks, st, err)
	}
	bpf.EachEntry(w.shared["interp_procs"], false, func(k *uint32, v *bpf.InterpProc) {
		st, err := procfs.New("").Stat(int(*k))
		t.Logf("interp_procs %d: start %d origin %d forks %d; /proc: %+v %v", *k, v.StartBoottime, v.Origin, v.Forks, st, err)
	})
}

// hasUnwindEntry reports whether pid has an unwind_procs entry of its own
// (no alias), for the process that runs now.
func hasUnwindEntry(t *testing.T, w *Walker, pid int) bool {
	t.Helper()
	u, err := w.loader.ProcessEntries()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range u {
		if e.PID == pid && e.AliasPID == 0 && e.StartTicks == mustStart(t, pid) {
			return true
		}
	}
	return false
}

func forksRefused(t *testing.T, w *Walker) uint64 {
	t.Helper()
	return stackStat(t, w, bpf.StackStatForkShare)
}

func stackStat(t *testing.T, w *Walker, idx uint32) uint64 {
	t.Helper()
	var perCPU []uint64
	if err := w.shared["stack_stats"].Lookup(idx, &perCPU); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n
}

// TestIntegrationForkJobShare: two set-up processes of one job hold 200
// forked children each; the job's share (300 here) is handed over, the
// rest refused and counted as the job's, and the share comes back as the
// children exit.
func TestIntegrationForkJobShare(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF, testenv.Tools("python3.11"))
	var mu sync.Mutex
	forkers := map[int]bool{}
	owner := func(id procfs.ID) string {
		mu.Lock()
		defer mu.Unlock()
		if forkers[id.PID] {
			return "job 7"
		}
		return ""
	}
	w, err := New(Options{Tables: true, Interpreters: []interp.Interpreter{python.CPython{}}, Owner: owner, ForkJobShare: 300,
		Profiled: func(id procfs.ID) bool { return owner(id) != "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s, err := cpu.New(cpu.Options{SampleRate: 499, Stacks: w})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	type forkerProc struct {
		pid int
		in  io.Writer
		out *bufio.Scanner
	}
	start := func() *forkerProc {
		cmd := exec.Command("python3.11", "-c", forker)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		in, _ := cmd.StdinPipe()
		outp, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		mu.Lock()
		forkers[cmd.Process.Pid] = true
		mu.Unlock()
		f := &forkerProc{pid: cmd.Process.Pid, in: in, out: bufio.NewScanner(outp)}
		if !f.out.Scan() || f.out.Text() != "ready" {
			t.Fatal("the forker did not start")
		}
		return f
	}
	do := func(f *forkerProc, cmd string, n int) {
		t.Helper()
		if _, err := io.WriteString(f.in, fmt.Sprintf("%s %d\n", cmd, n)); err != nil {
			t.Fatal(err)
		}
		if !f.out.Scan() || f.out.Text() != "done" {
			t.Fatalf("forker said %q, want done", f.out.Text())
		}
	}
	a, b := start(), start()
	deadline := time.Now().Add(30 * time.Second)
	for _, f := range []*forkerProc{a, b} {
		// Its own entry in the kernel's table (python3.11 may be pyenv's
		// shim, loaded before it exec'd the interpreter).
		for !hasUnwindEntry(t, w, f.pid) || !hasInterpEntry(w, f.pid) {
			if time.Now().After(deadline) {
				t.Fatal("the forkers were never set up")
			}
			do(f, "storm", 20)
		}
	}
	before := entries(t, w)
	do(a, "hold", 200)
	do(b, "hold", 200)
	held, job, proc := entries(t, w), stackStat(t, w, bpf.StackStatForkJobShare), forksRefused(t, w)
	t.Logf("two processes of one job holding 200 children each: entries %v (before %v), refused %d for the job, %d for a process", held, before, job, proc)
	if held[0] != before[0]+300 || held[1] != before[1]+300 || job != 2*100 || proc != 0 {
		t.Errorf("entries %v (before %v), refused %d for the job and %d for a process; want 300 more of each, 200 (100 a table) for the job", held, before, job, proc)
	}
	do(a, "release", 0)
	do(b, "release", 0)
	if e := entries(t, w); e != before {
		t.Errorf("entries %v once the children exited, %v before", e, before)
	}
	// The job's share came back: b holds 250, all handed over.
	do(b, "hold", 250)
	if e, j := entries(t, w), stackStat(t, w, bpf.StackStatForkJobShare); e[0] != before[0]+250 || e[1] != before[1]+250 || j != job {
		t.Errorf("after the release, 250 children: entries %v (before %v), job refusals %d (was %d)", e, before, j, job)
	}
	do(b, "release", 0)
}
