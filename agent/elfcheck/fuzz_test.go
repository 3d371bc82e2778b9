package elfcheck

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/slurmscope/slurmscope/agent/elfcheck/elfchecktest"
)

// fuzzLimits are small, so that what passes costs little to read whole.
var fuzzLimits = Limits{Names: 64 << 10, Strings: 1 << 20, Symbols: 1 << 20, Versions: 1 << 20, Dynamic: 64 << 10, Frames: 1 << 20, Pclntab: 1 << 20}

// fuzzBound is the most one check and the reads after it may allocate:
// the headers (a 64K-entry section table is 4 MiB, debug/elf's sections
// as much again) and the tables under fuzzLimits, with debug/elf's
// copies of them.
const fuzzBound = 48 << 20

// FuzzCheckOnDisk: a file whose headers claim sizes (section names,
// .symtab, its names, .eh_frame plain or compressed, .gopclntab,
// .dynamic), written to disk as a sparse file as large as the claims the
// way a job plants one, with any bytes written over its headers. The
// check must never panic nor allocate past its bound, and a file it lets
// through must hold every table a reader reads inside the file and under
// its cap, so that reading them (debug/elf's own readers included) costs
// no more than the caps. The seeds (testdata/fuzz/FuzzCheckOnDisk) are
// the claims of TestSizesThatLie and real-looking files.
func FuzzCheckOnDisk(f *testing.F) {
	dir := f.TempDir()
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(bytes.Repeat([]byte{0x14, 0, 0, 0}, 64))
	w.Close()
	zdata := z.Bytes()
	f.Fuzz(func(t *testing.T, names, syms, strs, frames, pcln, dynamic uint64, compressed bool, chdr uint64, short bool, patchOff uint16, patch []byte) {
		const maxClaim = 4 << 30 // sparse: no disk, but keep the file system's limits out of it
		strtab, offs := elfchecktest.Strings("f")
		frame := elfchecktest.Section{Name: ".eh_frame", Type: elf.SHT_PROGBITS, Claim: frames % maxClaim, Data: []byte{0, 0, 0, 0}}
		if compressed {
			frame = elfchecktest.Section{Name: ".debug_frame", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Chdr: chdr, Data: zdata}
		}
		file := elfchecktest.File{NamesClaim: names % maxClaim, Short: short, Sections: []elfchecktest.Section{
			{Name: ".symtab", Type: elf.SHT_SYMTAB, Link: 2, Entsize: 24, Claim: syms % maxClaim,
				Data: elfchecktest.Symbols(elfchecktest.Symbol{Name: offs[0], Info: byte(elf.STT_FUNC), Shndx: 1, Value: elfchecktest.Text + 0x100})},
			{Name: ".strtab", Type: elf.SHT_STRTAB, Claim: strs % maxClaim, Data: strtab},
			frame,
			{Name: ".gopclntab", Type: elf.SHT_PROGBITS, Claim: pcln % maxClaim},
			{Name: ".dynamic", Type: elf.SHT_DYNAMIC, Link: 2, Claim: dynamic % maxClaim, Data: make([]byte, 32)},
			{Name: ".dynsym", Type: elf.SHT_DYNSYM, Link: 2, Entsize: 24, Data: elfchecktest.Symbols()},
		}}
		head, chunks, size := file.Bytes()
		if len(patch) > 0 {
			at := int(patchOff) % len(head)
			copy(head[at:], patch)
		}
		path := filepath.Join(dir, "lie")
		writeSparse(t, path, head, chunks, size)
		defer os.Remove(path)
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		fi, err := fh.Stat()
		if err != nil {
			t.Fatal(err)
		}
		var ef *elf.File
		n := allocated(func() {
			ef, err = testReader.Open(fh, fi.Size(), fuzzLimits)
			if err != nil {
				return
			}
			readAll(ef)
		})
		if n > fuzzBound {
			t.Errorf("allocated %d MiB (%v)", n>>20, err)
		}
		if err != nil {
			if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrPanic) {
				t.Errorf("an error of no kind: %v", err)
			}
			return
		}
		lim := fuzzLimits.withDefaults()
		if len(ef.Progs) > lim.Progs || len(ef.Sections) > lim.Sections {
			t.Errorf("%d program headers, %d sections let through", len(ef.Progs), len(ef.Sections))
		}
		for i, s := range ef.Sections {
			if s.Type != elf.SHT_NOBITS && s.FileSize > 0 && (s.Offset > uint64(fi.Size()) || s.FileSize > uint64(fi.Size())-s.Offset) {
				t.Errorf("section %d (%s) at %#x+%#x let through, beyond the file's %d bytes", i, s.Name, s.Offset, s.FileSize, fi.Size())
			}
			c := int64(-1)
			switch {
			case s.Type == elf.SHT_SYMTAB || s.Type == elf.SHT_DYNSYM:
				c = lim.Symbols
			case s.Type == elf.SHT_STRTAB:
				c = lim.Strings // and the section names' cap, which is smaller here
			case s.Type == elf.SHT_DYNAMIC:
				c = lim.Dynamic
			case s.Name == ".eh_frame" || s.Name == ".debug_frame":
				c = lim.Frames
			case s.Name == ".gopclntab":
				c = lim.Pclntab
			}
			if c >= 0 && s.Size > uint64(c) {
				t.Errorf("section %d (%s, %s) of %d bytes let through, over its cap of %d", i, s.Name, s.Type, s.Size, c)
			}
			// A table's strings are read with it, whatever their type.
			if l := int(s.Link); (s.Type == elf.SHT_SYMTAB || s.Type == elf.SHT_DYNSYM || s.Type == elf.SHT_DYNAMIC) &&
				l > 0 && l < len(ef.Sections) && ef.Sections[l].Size > uint64(lim.Strings) {
				t.Errorf("section %d (%s) names %d bytes of strings in section %d, over their cap", i, s.Name, ef.Sections[l].Size, l)
			}
		}
	})
}

// readAll reads what the readers read, as they read it, the standard
// library's panics aside (they are not the check's to prevent).
func readAll(f *elf.File) {
	try := func(fn func()) {
		defer func() { recover() }()
		fn()
	}
	try(func() { f.Symbols() })
	try(func() { f.DynamicSymbols() })
	try(func() { f.DynString(elf.DT_SONAME) })
	for _, name := range []string{".eh_frame", ".debug_frame", ".gopclntab"} {
		if s := f.Section(name); s != nil {
			try(func() { Data(s, fuzzLimits.Frames) })
		}
	}
}

func writeSparse(t *testing.T, path string, head []byte, chunks []elfchecktest.Chunk, size int64) {
	t.Helper()
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write(head); err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if _, err := fh.WriteAt(c.Data, c.Off); err != nil {
			t.Fatal(err)
		}
	}
	if err := fh.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// TestFuzzCorpusPresent keeps the seed corpus from silently disappearing.
func TestFuzzCorpusPresent(t *testing.T) {
	entries, err := os.ReadDir("testdata/fuzz/FuzzCheckOnDisk")
	if err != nil || len(entries) == 0 {
		t.Errorf("seed corpus missing: %v", err)
	}
}
