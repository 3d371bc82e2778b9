package python

import (
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// realInterpreters lists the CPython files on this machine, by the version
// their name promises: Debian's static python3.11 and pyenv's libpythons.
func realInterpreters(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	if _, err := os.Stat("/usr/bin/python3.11"); err == nil {
		out["debian-3.11"] = "/usr/bin/python3.11"
	}
	for _, minor := range SupportedVersions() {
		m, _ := filepath.Glob(filepath.Join(pyenvRoot(), "3."+itoa(minor)+".*", "lib", "libpython3."+itoa(minor)+".so.1.0"))
		if len(m) > 0 {
			out["pyenv-3."+itoa(minor)] = m[len(m)-1]
		}
	}
	return out
}

func pyenvRoot() string {
	if r := os.Getenv("PYENV_ROOT"); r != "" {
		return filepath.Join(r, "versions")
	}
	return "/root/.pyenv/versions"
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestInspectReal finds the runtime and version of every real interpreter
// here; a version that is not installed is skipped by name.
func TestInspectReal(t *testing.T) {
	files := realInterpreters(t)
	for _, name := range []string{"debian-3.11", "pyenv-3.9", "pyenv-3.10", "pyenv-3.11", "pyenv-3.12", "pyenv-3.13"} {
		t.Run(name, func(t *testing.T) {
			path, ok := files[name]
			if !ok {
				t.Skipf("%s not installed", name)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			in, err := Inspect(f, path, AMD64)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: 3.%d from %s, layout from %s, _PyRuntime 0x%x, PyCode_Type 0x%x", path, in.Minor, in.VersionFrom, in.LayoutFrom, in.Runtime, in.CodeType)
			want := name[strings.LastIndexByte(name, '.')+1:]
			if itoa(in.Minor) != want || in.Major != 3 {
				t.Errorf("version %d.%d, want 3.%s", in.Major, in.Minor, want)
			}
			if in.CodeType == 0 {
				t.Error("no PyCode_Type")
			}
			if in.Minor >= 11 && in.VersionFrom != "Py_Version" {
				t.Errorf("version from %s, want Py_Version", in.VersionFrom)
			}
			if in.Minor == 13 && in.LayoutFrom != "_Py_DebugOffsets" {
				t.Errorf("3.13 layout from %s, want _Py_DebugOffsets", in.LayoutFrom)
			}
			if in.Minor == 13 && in.Layout != layouts[13] {
				t.Errorf("3.13 _Py_DebugOffsets disagree with the table:\n%+v\n%+v", in.Layout, layouts[13])
			}
		})
	}
	// The pyenv executables link libpython: they hold no runtime.
	for _, exe := range []string{"3.12.1/bin/python3.12"} {
		p := filepath.Join(pyenvRoot(), exe)
		if f, err := os.Open(p); err == nil {
			if _, err := Inspect(f, p, AMD64); !errors.Is(err, ErrNotPython) {
				t.Errorf("%s: %v, want ErrNotPython", p, err)
			}
			f.Close()
		}
	}
}

func TestVersionString(t *testing.T) {
	for s, want := range map[string]int{
		"\x00x\x003.9.18\x00%.80s (%.80s)\x00": 9,
		"\x003.11.2+\x00":                      11,
		"\x003.10.0rc1\x00lib/python3.10\x00":  10,
		"\x003.9.1\x00\x003.10.2\x00":          -1, // two versions: neither
		"lib/python3.9\x00":                    -1, // not PY_VERSION
	} {
		in := &Interpreter{}
		seen := map[string]bool{}
		for _, m := range versionString.FindAllStringSubmatch(s, -1) {
			seen[m[1]+"."+m[2]] = true
		}
		got := -1
		if len(seen) == 1 {
			for v := range seen {
				in.versionFromName("python"+v, "version string")
			}
			got = in.Minor
		}
		if got != want {
			t.Errorf("%q: minor %d, want %d", s, got, want)
		}
	}
}

// readAtLog records the offsets it is asked for.
type readAtLog []int64

func (l *readAtLog) ReadAt(b []byte, off int64) (int, error) {
	*l = append(*l, off)
	return len(b), nil
}

// TestReadHostileSegments: program headers near 2^64, where the sums in
// the bounds check could wrap, and a file offset that is a negative int64.
func TestReadHostileSegments(t *testing.T) {
	var b [8]byte
	cases := []struct {
		name  string
		load  elf.ProgHeader
		vaddr uint64
	}{
		// 8 bytes at the top of the address space, past the segment's end.
		{"end wraps", elf.ProgHeader{Vaddr: 1<<64 - 0x100, Filesz: 0x100, Off: 0x1000}, 1<<64 - 4},
		// A segment that wraps around 2^64 holds no low address.
		{"segment wraps", elf.ProgHeader{Vaddr: 1<<64 - 0x10, Filesz: 0x100, Off: 0x1000}, 0x20},
		// In range, but the file offset is past MaxInt64: a negative int64.
		{"offset", elf.ProgHeader{Vaddr: 0x1000, Filesz: 0x100, Off: 1<<63 + 0x10}, 0x1000},
	}
	for _, c := range cases {
		var log readAtLog
		in := &Interpreter{loads: []elf.ProgHeader{c.load}}
		if found, err := in.read(&log, b[:], c.vaddr); found || err != nil || len(log) != 0 {
			t.Errorf("%s: found %v, err %v, reads at %v", c.name, found, err, log)
		}
	}
	var log readAtLog
	in := &Interpreter{loads: []elf.ProgHeader{{Vaddr: 0x1000, Filesz: 0x100, Off: 0x5000}}}
	if found, err := in.read(&log, b[:], 0x10f8); !found || err != nil || len(log) != 1 || log[0] != 0x50f8 {
		t.Errorf("in range: found %v, err %v, reads at %v", found, err, log)
	}
}
