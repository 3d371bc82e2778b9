package walktest

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/python"
)

// Sampling rate of the tests: higher than the agent's 97 Hz for tighter
// statistics in a few seconds; the walk is the same at any rate.
const testHz = 499

// eachInterpreter runs fn per real interpreter, and with venvs also in a
// venv of Debian's and of pyenv's 3.12 (a venv changes only discovery).
func eachInterpreter(t *testing.T, withVenvs bool, fn func(t *testing.T, py interp)) {
	needIntegration(t)
	ins := interpreters(t)
	var venvs []interp
	for _, in := range ins {
		if withVenvs && (in.name == "debian-3.11" || in.name == "pyenv-3.12") {
			venvs = append(venvs, in)
		}
	}
	for _, in := range ins {
		t.Run(in.name, func(t *testing.T) { fn(t, in) })
	}
	for _, base := range venvs {
		t.Run(base.name+"-venv", func(t *testing.T) { fn(t, venv(t, base)) })
	}
}

// defLines returns the line of each "def NAME" in a script, and the line
// after its body.
func defLines(t *testing.T, path string) map[string][2]int {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][2]int{}
	var cur string
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		if cur != "" && line != "" && line[0] != ' ' && line[0] != '\t' {
			r := out[cur]
			r[1] = n
			out[cur] = r
			cur = ""
		}
		if strings.HasPrefix(line, "def ") || strings.HasPrefix(line, "async def ") {
			name := strings.TrimPrefix(strings.TrimPrefix(line, "async "), "def ")
			cur = name[:strings.IndexByte(name, '(')]
			out[cur] = [2]int{n, 1 << 30}
		}
	}
	return out
}

// TestSplit: a 70/30 split between two pure-Python functions, started
// before the probe (as a process started before the agent is): within 5
// points, and at least 90% of the process's samples under those functions,
// with the right file and lines.
func TestSplit(t *testing.T) {
	eachInterpreter(t, true, func(t *testing.T, py interp) {
		s := newSession(t, testHz)
		script := workload("split.py")
		cmd, _ := s.start(py, script, "4")
		s.wait(cmd)
		defs := defLines(t, script)
		var a, b, total, evalSeen, startup int
		for _, g := range s.samples() {
			if g.pid != uint32(cmd.Process.Pid) {
				continue
			}
			if len(g.py) > 0 && g.py[len(g.py)-1].File != script {
				// Interpreter start-up (site, imports): Python frames,
				// rightly not under the script.
				startup++
				continue
			}
			total++
			if g.evalSeen {
				evalSeen++
			}
			if len(g.py) == 0 {
				continue
			}
			leaf := g.py[0]
			switch leaf.Function {
			case "hot_a":
				a++
			case "hot_b":
				b++
			default:
				continue
			}
			// The def line itself is the function's prologue (RESUME on 3.11+).
			r := defs[leaf.Function]
			if leaf.File != script || leaf.Line < r[0] || leaf.Line >= r[1] {
				t.Errorf("%s at %s:%d, want %s lines %d-%d", leaf.Function, leaf.File, leaf.Line, script, r[0], r[1]-1)
			}
			if names := g.pyNames(); len(names) != 3 || names[1] != "main" || names[2] != "<module>" {
				t.Errorf("stack %q, want [%s main <module>]", names, leaf.Function)
			}
			if g.spliced[len(g.spliced)-1].Module != python.Module && len(g.spliced) > 0 && !g.evalSeen {
				t.Errorf("spliced stack %v: Python frames missing", g.spliced)
			}
		}
		s.logStats()
		if a+b == 0 {
			t.Fatalf("no samples under hot_a or hot_b (of %d)", total)
		}
		share := float64(a) / float64(a+b)
		under := float64(a+b) / float64(total)
		t.Logf("%s: hot_a %.1f%% (%d of %d), %.1f%% of %d samples under the two (and %d in start-up); native stack reached the eval loop in %d",
			py.name, 100*share, a, a+b, 100*under, total, startup, evalSeen)
		if share < 0.65 || share > 0.75 {
			t.Errorf("hot_a share %.1f%%, want 70 +- 5", 100*share)
		}
		if under < 0.9 {
			t.Errorf("%.1f%% of the samples under hot_a/hot_b, want >= 90%%", 100*under)
			logStacks(t, s.samples(), func(g got) bool {
				return g.pid == uint32(cmd.Process.Pid) && !g.has("hot_a") && !g.has("hot_b")
			})
		}
	})
}

// TestThreads: one thread in pure Python, one in hashlib with the GIL
// released; each thread's samples carry only its own Python frames.
func TestThreads(t *testing.T) {
	eachInterpreter(t, false, func(t *testing.T, py interp) {
		s := newSession(t, testHz)
		script := workload("threads.py")
		cmd, lines := s.start(py, script, "2")
		tids := map[string]uint32{}
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) == 2 {
				n, _ := strconv.Atoi(f[1])
				tids[f[0]] = uint32(n)
			}
		}
		s.wait(cmd)
		own := map[string]string{"main": "spin_main", "worker": "hash_worker"}
		other := map[string]string{"main": "hash_worker", "worker": "spin_main"}
		for who, tid := range tids {
			var n, mine, wrong int
			for _, g := range s.samples() {
				if g.tid != tid || (g.tid == uint32(cmd.Process.Pid) && !g.hasIn("main", script)) {
					// Not this thread, or the main thread before the
					// script's main (start-up, imports).
					continue
				}
				n++
				if g.has(own[who]) {
					mine++
				}
				if g.has(other[who]) {
					wrong++
					t.Errorf("%s thread sample with %s: %q", who, other[who], g.pyNames())
				}
			}
			t.Logf("%s thread %d: %d samples, %d under %s, %d under %s", who, tid, n, mine, own[who], wrong, other[who])
			if n < 50 || float64(mine) < 0.9*float64(n) {
				t.Errorf("%s thread: %d of %d samples under %s, want >= 90%% of at least 50", who, mine, n, own[who])
				logStacks(t, s.samples(), func(g got) bool { return g.tid == tid && !g.has(own[who]) })
			}
		}
		if len(tids) != 2 {
			t.Fatalf("thread ids: %v", tids)
		}
		s.logStats()
	})
}

// TestRecursion: a stack deeper than MaxFrames keeps its innermost frames,
// is cut cleanly at the outer end, and says so.
func TestRecursion(t *testing.T) {
	eachInterpreter(t, false, func(t *testing.T, py interp) {
		s := newSession(t, testHz)
		cmd, _ := s.start(py, workload("recurse.py"), "1.5")
		s.wait(cmd)
		var n int
		for _, g := range s.samples() {
			if g.pid != uint32(cmd.Process.Pid) || len(g.py) == 0 || g.py[0].Function != "spin" {
				continue
			}
			n++
			if !g.truncated || g.rawLen != python.MaxFrames {
				t.Errorf("stack of %d frames, truncated %v; want %d, truncated", g.rawLen, g.truncated, python.MaxFrames)
			}
			for _, f := range g.py[1:] {
				if f.Function != "recurse" {
					t.Fatalf("frame %q below spin, want only recurse: %q", f.Function, g.pyNames())
				}
			}
			found := false
			for _, f := range g.spliced {
				found = found || f.Function == python.TruncatedFunction
			}
			if !found {
				t.Errorf("spliced stack lacks %q", python.TruncatedFunction)
			}
		}
		_, _, truncated, _ := s.probe.Stats()
		t.Logf("%d samples in spin; %d truncated walks", n, truncated)
		if n < 30 || truncated < uint64(n) {
			t.Errorf("%d samples in spin, %d truncated walks: want >= 30, all truncated", n, truncated)
		}
	})
}

// TestAsyncio: coroutines unwind through the event loop: crunch under
// worker_a or worker_b, under asyncio's run loop.
func TestAsyncio(t *testing.T) {
	eachInterpreter(t, false, func(t *testing.T, py interp) {
		s := newSession(t, testHz)
		cmd, _ := s.start(py, workload("asyncio_prog.py"), "2")
		s.wait(cmd)
		var crunch, ok int
		callers := map[string]int{}
		for _, g := range s.samples() {
			if g.pid != uint32(cmd.Process.Pid) || len(g.py) < 2 || g.py[0].Function != "crunch" {
				continue
			}
			crunch++
			callers[g.py[1].Function]++
			loop := false
			for _, f := range g.py {
				loop = loop || (strings.Contains(f.File, "asyncio") && strings.Contains(f.Function, "run_forever"))
			}
			if loop && g.py[len(g.py)-1].Function == "<module>" {
				ok++
			}
		}
		s.logStats()
		t.Logf("%d samples in crunch, %d of them under the event loop and <module>; callers %v", crunch, ok, callers)
		if callers["worker_a"] == 0 || callers["worker_b"] == 0 || len(callers) != 2 {
			t.Errorf("crunch called from %v, want worker_a and worker_b only", callers)
		}
		if crunch < 100 || float64(ok) < 0.95*float64(crunch) {
			t.Errorf("%d of %d samples in crunch under run_forever and <module>, want >= 95%% of at least 100", ok, crunch)
			logStacks(t, s.samples(), func(g got) bool { return len(g.py) > 0 && g.py[0].Function == "crunch" })
		}
	})
}

// TestPool: 16 forked, short-lived workers, each found when first sampled.
func TestPool(t *testing.T) {
	eachInterpreter(t, false, func(t *testing.T, py interp) {
		s := newSession(t, testHz)
		cmd, _ := s.start(py, workload("pool.py"), "1000000")
		s.wait(cmd)
		workers := map[uint32]int{}
		all := map[uint32]int{}
		var total, withPy int
		for _, g := range s.samples() {
			if g.pid == uint32(cmd.Process.Pid) {
				continue
			}
			all[g.pid]++
			if g.status == python.StatusOK && len(g.py) == 0 {
				// A thread state with no frame: the worker runs no
				// Python now (start-up, shutdown after the pool's end).
				continue
			}
			total++
			if len(g.py) > 0 {
				withPy++
			}
			if g.has("work_item") {
				workers[g.pid]++
			}
		}
		s.logStats()
		t.Logf("%d worker processes sampled, %d with work_item; %d of %d worker samples (not counting those with a thread state but no frame) with Python frames", len(all), len(workers), withPy, total)
		if len(workers) < 14 {
			t.Errorf("%d workers with work_item frames, want >= 14 of 16", len(workers))
		}
		// Samples between a fork and its discovery (milliseconds; more on
		// a loaded machine) have native stacks only, counted as not_python.
		if float64(withPy) < 0.8*float64(total) {
			t.Errorf("%d of %d worker samples with Python frames, want >= 80%%", withPy, total)
			logStacks(t, s.samples(), func(g got) bool { return g.pid != uint32(cmd.Process.Pid) && len(g.py) == 0 })
		}
	})
}

// TestShortCommand: a 2 s `python -c`, started after the probe, gets its
// Python frames.
func TestShortCommand(t *testing.T) {
	eachInterpreter(t, false, func(t *testing.T, py interp) {
		s := newSession(t, testHz)
		code := "import time\ndef burn(end):\n    x = 0\n    while time.monotonic() < end:\n        x += 1\nprint('ready', flush=True)\nburn(time.monotonic() + 2)\n"
		cmd, _ := s.start(py, "-c", code)
		s.wait(cmd)
		var total, under int
		for _, g := range s.samples() {
			if g.pid != uint32(cmd.Process.Pid) {
				continue
			}
			if len(g.py) > 0 && g.py[len(g.py)-1].File != "<string>" {
				continue // interpreter start-up
			}
			total++
			if len(g.py) > 0 && g.py[0].Function == "burn" && g.py[0].File == "<string>" && g.py[0].Line >= 3 && g.py[0].Line <= 5 {
				under++
			}
		}
		s.logStats()
		t.Logf("%d of %d samples in burn", under, total)
		if total < 100 || float64(under) < 0.9*float64(total) {
			t.Errorf("%d of %d samples in burn (<string>:3-5), want >= 90%% of at least 100", under, total)
			logStacks(t, s.samples(), func(g got) bool {
				return g.pid == uint32(cmd.Process.Pid) && (len(g.py) == 0 || g.py[0].Function != "burn")
			})
		}
	})
}

// logStacks logs the commonest Python stacks of the samples that match, to
// show what a failing test saw instead.
func logStacks(t *testing.T, samples []got, match func(got) bool) {
	t.Helper()
	count := map[string]int{}
	for _, g := range samples {
		if match(g) {
			k := fmt.Sprintf("%s %q", g.status, g.pyNames())
			if len(k) > 300 {
				k = k[:300] + "..."
			}
			count[k]++
		}
	}
	type kv struct {
		k string
		n int
	}
	var top []kv
	for k, n := range count {
		top = append(top, kv{k, n})
	}
	sort.Slice(top, func(i, j int) bool { return top[i].n > top[j].n })
	for i, e := range top {
		if i == 10 {
			break
		}
		t.Logf("%5d %s", e.n, e.k)
	}
}
