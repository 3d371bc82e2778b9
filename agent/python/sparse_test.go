package python

import (
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"runtime"
	"testing"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/elfcheck/elfchecktest"
)

// allocated runs fn and returns the bytes it allocated.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// pySymbols is a symbol table naming the runtime's symbols; the names
// are in the section after it.
func pySymbols(typ elf.SectionType, name string, link uint32, claim uint64) []elfchecktest.Section {
	strs, offs := elfchecktest.Strings("_PyRuntime", "Py_Version", "PyCode_Type")
	return []elfchecktest.Section{
		{Name: name, Type: typ, Link: link, Entsize: 24, Claim: claim, Data: elfchecktest.Symbols(
			elfchecktest.Symbol{Name: offs[0], Info: byte(elf.STT_OBJECT), Shndx: 1, Value: elfchecktest.Text + 0x200},
			elfchecktest.Symbol{Name: offs[2], Info: byte(elf.STT_OBJECT), Shndx: 1, Value: elfchecktest.Text + 0x300})},
		{Name: map[elf.SectionType]string{elf.SHT_SYMTAB: ".strtab", elf.SHT_DYNSYM: ".dynstr"}[typ], Type: elf.SHT_STRTAB, Data: strs},
	}
}

// TestSparseLibpython: a job maps a sparse file named like a libpython
// (a few KiB on disk) whose headers claim 256 MiB of section names,
// symbol names or symbols. Inspect refuses the names over their cap
// before debug/elf reads them, skips tables over its own caps and
// streams the symbols, so that looking at it costs next to nothing.
func TestSparseLibpython(t *testing.T) {
	const claim = 256 << 20
	withStrings := func(typ elf.SectionType, name string) elfchecktest.File {
		s := pySymbols(typ, name, 2, 0)
		s[1].Claim = claim
		return elfchecktest.File{Sections: s}
	}
	for _, tc := range []struct {
		name    string
		file    elfchecktest.File
		wantErr error
	}{
		{"section names", elfchecktest.File{Sections: pySymbols(elf.SHT_SYMTAB, ".symtab", 2, 0), NamesClaim: claim}, ErrBadInterpreter},
		{".strtab", withStrings(elf.SHT_SYMTAB, ".symtab"), ErrNotPython},
		{".dynstr", withStrings(elf.SHT_DYNSYM, ".dynsym"), ErrNotPython},
		// Its first entries name the runtime, found by streaming them; the
		// runtime found there is no runtime.
		{".symtab of holes, under the cap", elfchecktest.File{Sections: pySymbols(elf.SHT_SYMTAB, ".symtab", 2, maxSymtabBytes-4096)}, ErrBadInterpreter},
		// No Py_Version: the soname is looked for, in names over the cap.
		{".dynstr of the soname", elfchecktest.File{Sections: append(pySymbols(elf.SHT_SYMTAB, ".symtab", 2, 0),
			elfchecktest.Section{Name: ".dynamic", Type: elf.SHT_DYNAMIC, Link: 4, Data: make([]byte, 32)},
			elfchecktest.Section{Name: ".dynstr", Type: elf.SHT_STRTAB, Claim: claim - 4096})}, ErrBadInterpreter},
		{".symtab over elfcheck's cap", elfchecktest.File{Sections: pySymbols(elf.SHT_SYMTAB, ".symtab", 2, 1<<30)}, ErrBadInterpreter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.file.Write(t, t.TempDir(), "libpython3.13.so.1.0")
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			n := allocated(func() { _, err = Inspect(f, path, AMD64) })
			fi, _ := f.Stat()
			t.Logf("%d MiB file: allocated %d KiB, %v", fi.Size()>>20, n>>10, err)
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("%v, want %v", err, tc.wantErr)
			}
			if n > 4<<20 {
				t.Errorf("inspecting it allocated %d MiB", n>>20)
			}
		})
	}
}

// TestFindSymbols: the runtime's symbols are found in .dynsym, then
// .symtab; undefined and zero ones are not taken, and the first
// definition wins.
func TestFindSymbols(t *testing.T) {
	strs, offs := elfchecktest.Strings("_PyRuntime", "Py_Version", "PyCode_Type", "_PyRuntimeX")
	sym := func(name uint32, shndx uint16, value uint64) elfchecktest.Symbol {
		return elfchecktest.Symbol{Name: name, Info: byte(elf.STT_OBJECT), Shndx: shndx, Value: value}
	}
	file := elfchecktest.File{Sections: []elfchecktest.Section{
		{Name: ".dynsym", Type: elf.SHT_DYNSYM, Link: 2, Entsize: 24, Data: elfchecktest.Symbols(
			sym(offs[1], 0, 0x1000), // undefined
			sym(offs[3], 1, 0x5000), // a longer name
			sym(offs[0], 1, 0x2000), // found here first
			sym(offs[2], 1, 0))},    // zero
		{Name: ".dynstr", Type: elf.SHT_STRTAB, Data: strs},
		{Name: ".symtab", Type: elf.SHT_SYMTAB, Link: 4, Entsize: 24, Data: elfchecktest.Symbols(
			sym(offs[0], 1, 0x9000), sym(offs[1], 1, 0x3000), sym(offs[2], 1, 0x4000))},
		{Name: ".strtab", Type: elf.SHT_STRTAB, Data: strs},
	}}
	b, _, _ := file.Bytes()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	got, err := findSymbols(f, "_PyRuntime", "Py_Version", "PyCode_Type")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"_PyRuntime": 0x2000, "Py_Version": 0x3000, "PyCode_Type": 0x4000}
	if len(got) != len(want) {
		t.Errorf("%v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#x, want %#x", k, got[k], v)
		}
	}
}

// refusing reads through r until it has served n bytes, then refuses
// every read, as a job's used-up read allowance does.
type refusing struct {
	r    io.ReaderAt
	n    int64
	seen int64
}

func (f *refusing) ReadAt(b []byte, off int64) (int, error) {
	if f.seen+int64(len(b)) > f.n {
		return 0, budget.ErrWorkLimit
	}
	f.seen += int64(len(b))
	return f.r.ReadAt(b, off)
}

// TestRefusedReadIsAnError: a read refused anywhere in Inspect's reading
// of a real interpreter is its error (for the caller to try again later),
// never a result made of what was read before.
func TestRefusedReadIsAnError(t *testing.T) {
	var path string
	for _, p := range realInterpreters(t) {
		path = p
		break
	}
	if path == "" {
		t.Skip("no CPython here")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	count := &refusing{r: bytes.NewReader(b), n: 1 << 62}
	whole, err := Inspect(io.NewSectionReader(count, 0, int64(len(b))), path, AMD64)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for n := int64(0); n <= count.seen; n += max(count.seen/64, 1) {
		in, err := Inspect(io.NewSectionReader(&refusing{r: bytes.NewReader(b), n: n}, 0, int64(len(b))), path, AMD64)
		switch {
		case err == nil:
			if in.Runtime != whole.Runtime || in.Layout != whole.Layout || in.VersionFrom != whole.VersionFrom || in.LayoutFrom != whole.LayoutFrom {
				t.Errorf("refused after %d of %d bytes: %+v, want %+v", n, count.seen, in, whole)
			}
		case errors.Is(err, budget.ErrWorkLimit):
			refused++
		default:
			t.Errorf("refused after %d of %d bytes: %v, want budget.ErrWorkLimit in it", n, count.seen, err)
		}
	}
	if refused == 0 {
		t.Error("no read was ever refused: the test tests nothing")
	}
}
