package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"testing"

	"github.com/slurmscope/slurmscope/agent/budget"
)

// FuzzOpenELF: hostile ELF bytes must never panic, in parsing or in lookups.
// The committed corpus holds a tiny static ELF (testdata/fuzz/FuzzOpenELF)
// and truncations of it.
func FuzzOpenELF(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, err := openObj(bytes.NewReader(data), int64(len(data)), func(int64) error { return nil })
		if err != nil {
			return
		}
		for _, s := range obj.loads {
			for _, off := range []uint64{s.off, s.off + s.filesz/2, s.off + s.filesz - 1} {
				if va, ok := obj.vaddr(off); ok {
					obj.resolve(va)
				}
			}
		}
		for i := range obj.syms.len() {
			obj.resolve(obj.syms.addrAt(i))
		}
	})
}

// TestFuzzCorpusPresent keeps the seed corpus from silently disappearing.
func TestFuzzCorpusPresent(t *testing.T) {
	for _, dir := range []string{"testdata/fuzz/FuzzOpenELF", "testdata/fuzz/FuzzLyingELFOnDisk"} {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) == 0 {
			t.Errorf("seed corpus %s missing: %v", dir, err)
		}
	}
}

// FuzzLyingELFOnDisk: section headers that claim sizes (of .symtab, its
// names, .gopclntab and the section names), a pclntab that claims a
// function count, and whatever bytes for the pclntab, written to disk as a
// sparse file as large as the claims, the way a job plants one. Parsing
// must never panic, never allocate past what the budget allows, and a
// file whose claims pass a cap or its real size must be refused as such.
// The seeds (testdata/fuzz/FuzzLyingELFOnDisk) are the claims of
// TestSizesThatLie.
func FuzzLyingELFOnDisk(f *testing.F) {
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, symClaim, strClaim, pclnClaim, shstrClaim, nfunc uint64, short bool, pcln []byte) {
		const maxClaim = 4 << 30 // sparse: no disk, but keep the file system's limits out of it
		secs := goodSymtab()
		secs[0].claim, secs[1].claim = symClaim%maxClaim, strClaim%maxClaim
		if len(pcln) >= 16 {
			pcln = bytes.Clone(pcln)
			binary.LittleEndian.PutUint64(pcln[8:], nfunc)
		}
		if len(pcln) > 0 || pclnClaim > 0 {
			secs = append(secs, lieSection{name: ".gopclntab", typ: elf.SHT_PROGBITS, data: pcln, claim: pclnClaim % maxClaim})
		}
		path := lieELF{sections: secs, short: short, shstrClaim: shstrClaim % maxClaim}.write(t, dir, "lie")
		defer os.Remove(path)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		file, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		const share = 64 << 20
		b := budget.New(budget.Options{JobShare: share})
		charge, err := b.Charge("job fuzz", budget.Symbols, 0, func() {})
		if err != nil {
			t.Fatal(err)
		}
		var held int64
		grow := func(n int64) error {
			if err := charge.Resize(held + n); err != nil {
				return err
			}
			held += n
			return nil
		}
		var obj *objFile
		n := allocated(func() { obj, err = openObj(file, fi.Size(), grow) })
		if n > share+16<<20 {
			t.Errorf("allocated %d MiB with a share of %d MiB", n>>20, share>>20)
		}
		if err != nil {
			return
		}
		// Parsed: then every table it reads was inside the file and its
		// cap (a claim in a section it does not read costs nothing).
		ef, ferr := elf.NewFile(file)
		if ferr != nil {
			t.Fatalf("parsed by openObj, not by debug/elf: %v", ferr)
		}
		for _, sec := range ef.Sections {
			read := sec.Type == elf.SHT_SYMTAB || sec.Type == elf.SHT_DYNSYM || sec.Name == ".gopclntab"
			if read && sec.Type != elf.SHT_NOBITS && (sec.Size > maxSymtabBytes || sec.Offset+sec.Size > uint64(fi.Size())) {
				t.Errorf("parsed a file whose %s claims %d bytes at %d (file %d bytes)", sec.Name, sec.Size, sec.Offset, fi.Size())
			}
		}
		for i := range obj.syms.len() {
			obj.resolve(obj.syms.addrAt(i))
		}
	})
}
