package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// TestGoBinaries symbolises a Go function through the pclntab, including in
// binaries with no symbol table and binaries with no section headers at all.
func TestGoBinaries(t *testing.T) {
	dir := t.TempDir()
	wantLine := sourceLine(t, srcPath("gotarget/main.go"), "func targetFunction")
	cases := []struct {
		name      string
		flags     []string
		noSection bool // also erase the section header table
	}{
		{name: "plain"},
		{name: "stripped", flags: []string{"-ldflags=-s -w"}},
		{name: "stripped-pie", flags: []string{"-buildmode=pie", "-ldflags=-s -w"}},
		{name: "no-section-headers", flags: []string{"-ldflags=-s -w"}, noSection: true},
		{name: "no-section-headers-pie", flags: []string{"-buildmode=pie", "-ldflags=-s -w"}, noSection: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bin := buildGo(t, dir, tc.name, tc.flags...)
			if tc.noSection {
				eraseSectionHeaders(t, bin)
				if f := openELFForTest(t, bin); len(f.Sections) != 0 {
					t.Fatalf("still %d sections", len(f.Sections))
				}
			} else if len(tc.flags) > 0 {
				if f := openELFForTest(t, bin); f.Section(".symtab") != nil {
					t.Fatal("stripped binary has .symtab")
				}
			}
			pid, addr := startTarget(t, bin)
			s := New(Options{})
			frames := s.User(procfs.ID{PID: pid}, leafAndReturn(addr))
			checkResolves(t, frames, "main.targetFunction")
			for _, f := range frames {
				if !strings.HasSuffix(f.File, "main.go") || f.Line != wantLine {
					t.Errorf("file:line = %s:%d, want main.go:%d", f.File, f.Line, wantLine)
				}
			}
		})
	}
}

// eraseSectionHeaders zeroes e_shoff, e_shnum and e_shstrndx, as some
// packers and strippers do; the kernel loads the binary from program
// headers alone.
func eraseSectionHeaders(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if elf.Class(b[elf.EI_CLASS]) != elf.ELFCLASS64 {
		t.Fatal("test assumes ELF64")
	}
	binary.LittleEndian.PutUint64(b[0x28:], 0) // e_shoff
	binary.LittleEndian.PutUint16(b[0x3c:], 0) // e_shnum
	binary.LittleEndian.PutUint16(b[0x3e:], 0) // e_shstrndx
	tmp := path + ".tmp"
	must(t, os.WriteFile(tmp, b, 0o755))
	must(t, os.Rename(tmp, filepath.Clean(path)))
}

// sourceLine returns the 1-based line of the first line containing text.
func sourceLine(t *testing.T, path, text string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, text) {
			return i + 1
		}
	}
	t.Fatalf("%q not in %s", text, path)
	return 0
}
