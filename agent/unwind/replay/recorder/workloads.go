// Package recorder takes the unwinder's replay snapshots
// (agent/unwind/replay): it builds the C and C++ workloads of
// internal/testenv/workloads without frame pointers, runs each workload
// and each CPython interpreter under gdb to a fixed stop point (a
// breakpoint at a symbol, then a fixed number of instructions, or the
// workload's own SIGSTOP: never a timer), and takes the registers, the
// stack, the mappings, trimmed copies of the mapped code files (Trim) and
// gdb's own backtrace while gdb holds the process stopped. For CPython it
// also reads the thread's raw Python frames as the BPF walk does, and
// resolves them with agent/python, keeping the memory that reads.
//
// It needs gdb, gcc and g++, and for CPython pyenv's interpreters and
// Debian's python3.11; ptrace and process_vm_readv of its own
// descendants, so no root. The command agent/unwind/replay/record writes
// the committed snapshots; the replay's live test records on the fly.
package recorder

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

//go:embed gdbstop.py
var gdbScript []byte

//go:embed pyprog.py
var pyProg []byte

// DefaultWorkDir is where the committed snapshots are recorded: a fixed
// path, so that a recording does not differ from the last one by a
// random directory name in argv, the mappings and co_filename.
const DefaultWorkDir = "/tmp/slurmscope-replay"

var builtTime = time.Unix(1700000000, 0)

// Options says where the recorder finds what it runs.
type Options struct {
	WorkDir      string // the workloads, gdb's files; emptied first
	Src          string // internal/testenv/workloads
	Pyenv        string // pyenv's root (CPython 3.9-3.13 under versions/); "": none
	DebianPython string // Debian's python3.11; "": none
}

// Workload is one snapshot to record.
type Workload struct {
	Name  string
	Desc  string
	Argv  []string
	Setup []string // gdb commands before run (breakpoints, signal handling)
	After []string // gdb commands at the first stop (stepping into a body)
	// Signal: the stop is this signal, which the workload sends itself.
	Signal int
	// Python: the CPython minor version (0: not CPython).
	Python int

	workDir string
}

// Workloads prepares o.WorkDir (building the native workloads) and lists
// every snapshot: the native ones, then CPython for each interpreter
// found (an error if o names one that is missing).
func Workloads(o Options) ([]Workload, error) {
	if err := os.RemoveAll(o.WorkDir); err != nil {
		return nil, err
	}
	bin := filepath.Join(o.WorkDir, "bin")
	if err := os.MkdirAll(bin, 0o750); err != nil {
		return nil, err
	}
	for _, c := range [][]string{
		{"gcc", "-O2", "-fomit-frame-pointer", "-o", filepath.Join(bin, "unwindc"), filepath.Join(o.Src, "unwindc.c")},
		{"g++", "-O2", "-fomit-frame-pointer", "-o", filepath.Join(bin, "unwindcxx"), filepath.Join(o.Src, "unwindcxx.cc")},
	} {
		// #nosec G204 -- the recorder's own fixed compiler commands
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%v: %v\n%s", c, err, out)
		}
		// A fixed mtime: a file's identity is recorded, and a new one
		// at every recording is churn.
		if err := os.Chtimes(c[len(c)-2], builtTime, builtTime); err != nil {
			return nil, err
		}
	}
	c, cxx := filepath.Join(bin, "unwindc"), filepath.Join(bin, "unwindcxx")
	ws := []Workload{
		{Name: "c-split", Desc: "unwindc split: main -> run_split -> caller_a -> leaf, stopped 12 instructions into leaf",
			Argv: []string{c, "split", "60"}, Setup: []string{"break leaf"}, After: []string{"stepi 12"}},
		{Name: "c-qsort", Desc: "unwindc qsort: the comparator cmp_items at its first instruction, called back through glibc's qsort",
			Argv: []string{c, "qsort", "60"}, Setup: []string{"break cmp_items"}},
		// The SIGPROF is gdb's, sent at a fixed point in spin (the
		// workload's own timer first fires after a millisecond of CPU).
		{Name: "c-signal", Desc: "unwindc signal: the SIGPROF handler's leaf sig_leaf, through the kernel's signal frame into spin (interrupted 5 instructions in) and main",
			Argv: []string{c, "signal", "60"}, Setup: []string{"handle SIGPROF nostop noprint pass", "break spin"},
			After: []string{"delete", "stepi 5", "break sig_leaf", "signal SIGPROF", "stepi 4"}},
		{Name: "c-vdso", Desc: "unwindc vdso: clock_gettime in the vDSO (no file: its image is recorded from memory), called from clock_rounds",
			Argv: []string{c, "vdso", "60"}, Setup: []string{"break clock_rounds"}, After: []string{"break __vdso_clock_gettime", "continue", "stepi 6"}},
		{Name: "cxx-except-find-fde", Desc: "unwindcxx except: libgcc's _Unwind_Find_FDE during a throw: __cxa_throw -> _Unwind_RaiseException -> ... from thrower, catcher, main",
			Argv: []string{cxx, "except", "60"}, Setup: []string{"break _Unwind_Find_FDE"}},
		{Name: "cxx-except-personality", Desc: "unwindcxx except: libstdc++'s __gxx_personality_v0 called by the raise phase of a throw, 8 instructions in",
			Argv: []string{cxx, "except", "60"}, Setup: []string{"break __gxx_personality_v0"}, After: []string{"stepi 8"}},
		{Name: "cxx-deep", Desc: "unwindcxx deep: deep_leaf under 300 levels of recurse: more frames than the unwinder's 127",
			Argv: []string{cxx, "deep", "60"}, Setup: []string{"break deep_leaf"}, After: []string{"stepi 3"}},
	}
	script := filepath.Join(o.WorkDir, "pyprog.py")
	if err := os.WriteFile(script, pyProg, 0o600); err != nil {
		return nil, err
	}
	dump := filepath.Join(o.WorkDir, "pystack.txt")
	if o.Pyenv != "" {
		for _, minor := range []int{9, 10, 11, 12, 13} {
			exe, err := pyenvPython(o.Pyenv, minor)
			if err != nil {
				return nil, err
			}
			ws = append(ws, Workload{Name: fmt.Sprintf("py3.%d", minor),
				Desc: fmt.Sprintf("pyenv's CPython %s (libpython shared, with symbols): Worker.leaf <- Worker.key <- map (C) <- outer <- main <- <module>, stopped by its own SIGSTOP in os.kill", filepath.Base(filepath.Dir(filepath.Dir(exe)))),
				Argv: []string{exe, "-I", "-S", script, dump}, Signal: 19, Python: minor})
		}
	}
	if o.DebianPython != "" {
		ws = append(ws, Workload{Name: "debian-py3.11",
			Desc: "Debian's python3.11 (static, stripped, no frame pointers): the same script as the py3.* snapshots",
			Argv: []string{o.DebianPython, "-I", "-S", script, dump}, Signal: 19, Python: 11})
	}
	for i := range ws {
		ws[i].workDir = o.WorkDir
	}
	return ws, nil
}

// pyenvPython finds pyenv's newest CPython 3.minor.
func pyenvPython(root string, minor int) (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(root, "versions", fmt.Sprintf("3.%d.*", minor)))
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		exe := filepath.Join(dirs[i], "bin", fmt.Sprintf("python3.%d", minor))
		if _, err := os.Stat(exe); err == nil {
			return exe, nil
		}
	}
	return "", fmt.Errorf("no CPython 3.%d under %s/versions", minor, root)
}
