package e2e

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// testForgedDebugOffsets is TestHostileJobs/ForgedDebugOffsets, the
// issue's recipe: the attacker copies CPython 3.13's libpython, changes 8
// bytes of _PyRuntime's _Py_DebugOffsets (the length offset of a str,
// beyond the str header the agent reads), and runs a loop under its copy.
// The interpreter runs as before (it never reads its own debug offsets);
// an agent that trusted them indexed past what it read and died. The agent
// must refuse the layout (bad_interpreter), keep the process's native
// stacks, and go on profiling the innocent job.
func testForgedDebugOffsets(t *testing.T, s *hostileSetup) {
	root := pyenvVersion(t, "3.13")
	dir := filepath.Join(s.work, "py313")
	for _, d := range []string{"bin", "lib"} {
		must(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	copyFile(t, filepath.Join(root, "bin", "python3.13"), filepath.Join(dir, "bin", "python3.13"), 0o755)
	lib := filepath.Join(dir, "lib", "libpython3.13.so.1.0")
	copyFile(t, filepath.Join(root, "lib", "libpython3.13.so.1.0"), lib, 0o644)
	// What the interpreter imports to start with -S (no site): its
	// encodings, and linecache (measured: nothing else).
	stdlib := filepath.Join(dir, "lib", "python3.13")
	must(t, os.MkdirAll(stdlib, 0o755))
	if out, err := exec.Command("cp", "-r", filepath.Join(root, "lib", "python3.13", "encodings"), stdlib).CombinedOutput(); err != nil {
		t.Fatalf("copying encodings: %v\n%s", err, out)
	}
	copyFile(t, filepath.Join(root, "lib", "python3.13", "linecache.py"), filepath.Join(stdlib, "linecache.py"), 0o644)
	if out, err := exec.Command("chmod", "-R", "a+rX", dir).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v\n%s", err, out)
	}
	forgeDebugOffsets(t, lib)

	h := s.start(t)
	h.spawnPython(h.attackerJob, s.attacker, "/usr/bin/env", "LD_LIBRARY_PATH="+filepath.Join(dir, "lib"), "PYTHONHOME="+dir,
		filepath.Join(dir, "bin", "python3.13"), "-S", "-c", "print('ready', flush=True)\nwhile True:\n    pass\n")
	h.run()
	h.wantCounted("agent_interpreter_skipped_total", `interpreter="python",reason="bad_interpreter"`)
	h.stop()
}

// doUnicodeLength is where _Py_DebugOffsets (3.13) keeps the offset of a
// str's length (agent/python's doUnicodeLength).
const doUnicodeLength = 552

// forgeDebugOffsets sets the str length offset in lib's _PyRuntime to
// 4096, as the attacker does.
func forgeDebugOffsets(t *testing.T, lib string) {
	t.Helper()
	f, err := elf.Open(lib)
	must(t, err)
	syms, err := f.DynamicSymbols()
	if err != nil || len(syms) == 0 {
		syms, err = f.Symbols()
	}
	must(t, err)
	var off int64 = -1
	for _, sym := range syms {
		if sym.Name != "_PyRuntime" {
			continue
		}
		for _, sec := range f.Sections {
			if sec.Type == elf.SHT_PROGBITS && sec.Flags&elf.SHF_ALLOC != 0 && sym.Value >= sec.Addr && sym.Value < sec.Addr+sec.Size {
				off = int64(sec.Offset + sym.Value - sec.Addr) // #nosec G115 -- a small file's offsets
			}
		}
	}
	f.Close()
	if off < 0 {
		t.Fatalf("%s: no _PyRuntime in initialised data", lib)
	}
	fd, err := os.OpenFile(lib, os.O_RDWR, 0)
	must(t, err)
	defer fd.Close()
	head := make([]byte, 8)
	if _, err := fd.ReadAt(head, off); err != nil || string(head) != "xdebugpy" {
		t.Fatalf("%s: _PyRuntime at %#x opens with %q, not the debug offsets' cookie (%v)", lib, off, head, err)
	}
	var v [8]byte
	binary.LittleEndian.PutUint64(v[:], 4096)
	if _, err := fd.WriteAt(v[:], off+doUnicodeLength); err != nil {
		t.Fatal(err)
	}
}

// pyenvVersion is the newest pyenv CPython of a minor version; the test
// skips without one (the stack tests run the same interpreters).
func pyenvVersion(t *testing.T, minor string) string {
	t.Helper()
	home := os.Getenv("PYENV_ROOT")
	if home == "" {
		home = "/root/.pyenv"
	}
	m, _ := filepath.Glob(filepath.Join(home, "versions", minor+".*"))
	for i := len(m) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(m[i], "lib", "libpython"+minor+".so.1.0")); err == nil {
			return m[i]
		}
	}
	t.Skipf("no pyenv CPython %s with a shared libpython", minor)
	return ""
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: %v", from, err)
	}
	must(t, err)
	must(t, os.WriteFile(to, b, mode))
}
