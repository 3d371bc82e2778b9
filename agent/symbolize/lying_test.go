package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Files whose headers lie about sizes, written to disk as sparse files so
// that the lie is backed by a real file size (reads return zeros), the
// way a job plants them: the checks must hold against the caps, not only
// against the file's end.

// lieELF describes a small ELF64 file with one executable PT_LOAD segment
// (at vaddr 0x400000, holding the whole first page) and the sections
// below. A section with claim > 0 says it is claim bytes long; its data
// then starts at a page of its own and the file is extended (sparse) to
// hold it unless short is set.
type lieELF struct {
	sections   []lieSection
	short      bool   // do not extend the file: the claim runs past its end
	shstrClaim uint64 // what .shstrtab claims, when set
}

type lieSection struct {
	name    string
	typ     elf.SectionType
	data    []byte
	link    uint32
	claim   uint64
	entsize uint64
}

const lieText = 0x400000

// write writes the file and returns its path.
func (l lieELF) write(t testing.TB, dir, name string) string {
	t.Helper()
	le := binary.LittleEndian
	// Section 0 is null; the last is .shstrtab.
	secs := append([]lieSection{{}}, l.sections...)
	shstr := []byte{0}
	nameOff := make([]uint32, len(secs)+1)
	for i, s := range secs[1:] {
		nameOff[i+1] = uint32(len(shstr))
		shstr = append(append(shstr, s.name...), 0)
	}
	nameOff[len(secs)] = uint32(len(shstr))
	shstr = append(append(shstr, ".shstrtab"...), 0)
	secs = append(secs, lieSection{name: ".shstrtab", typ: elf.SHT_STRTAB, data: shstr, claim: l.shstrClaim})

	buf := make([]byte, 0x1000) // ehdr, phdr, then code bytes: the mapped page
	for i := 0x100; i < 0x1000; i++ {
		buf[i] = 0x90 // nop
	}
	type placed struct{ off, size uint64 }
	pos := make([]placed, len(secs))
	var sparse []placed
	end := uint64(len(buf))
	for i, s := range secs {
		if i == 0 {
			continue
		}
		if s.claim > 0 {
			off := (end + 0xfff) &^ 0xfff
			end = off + 0x1000
			pos[i] = placed{off, s.claim}
			sparse = append(sparse, placed{off, s.claim})
			continue
		}
		pos[i] = placed{uint64(len(buf)), uint64(len(s.data))}
		buf = append(buf, s.data...)
	}
	shoff := (uint64(len(buf)) + 7) &^ 7
	buf = append(buf, make([]byte, shoff-uint64(len(buf)))...)
	for i, s := range secs {
		var sh [64]byte
		le.PutUint32(sh[0:], nameOff[i])
		le.PutUint32(sh[4:], uint32(s.typ))
		if i > 0 {
			le.PutUint64(sh[24:], pos[i].off)
			le.PutUint64(sh[32:], pos[i].size)
		}
		le.PutUint32(sh[40:], s.link)
		le.PutUint64(sh[48:], 8)
		le.PutUint64(sh[56:], s.entsize)
		buf = append(buf, sh[:]...)
	}
	// Headers.
	copy(buf, elf.ELFMAG)
	buf[elf.EI_CLASS], buf[elf.EI_DATA], buf[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), 1
	le.PutUint16(buf[16:], uint16(elf.ET_EXEC))
	le.PutUint16(buf[18:], uint16(elf.EM_X86_64))
	le.PutUint32(buf[20:], 1)
	le.PutUint64(buf[24:], lieText+0x100)
	le.PutUint64(buf[32:], 64)    // e_phoff
	le.PutUint64(buf[40:], shoff) // e_shoff
	le.PutUint16(buf[52:], 64)
	le.PutUint16(buf[54:], 56)
	le.PutUint16(buf[56:], 1)
	le.PutUint16(buf[58:], 64)
	le.PutUint16(buf[60:], uint16(len(secs)))
	le.PutUint16(buf[62:], uint16(len(secs)-1))
	ph := buf[64:]
	le.PutUint32(ph[0:], uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_X))
	le.PutUint64(ph[8:], 0)
	le.PutUint64(ph[16:], lieText)
	le.PutUint64(ph[24:], lieText)
	le.PutUint64(ph[32:], 0x1000)
	le.PutUint64(ph[40:], 0x1000)
	le.PutUint64(ph[48:], 0x1000)

	path := filepath.Join(dir, name)
	must(t, os.WriteFile(path, buf, 0o755))
	if !l.short {
		size := uint64(len(buf))
		for _, s := range sparse {
			size = max(size, s.off+s.size)
		}
		// Holes: the file is as large as it claims and costs no disk.
		must(t, os.Truncate(path, int64(size)))
	}
	return path
}

// syms encodes ELF64 symbols: each a function of 16 bytes at addr, named
// by its offset in strtab.
func syms(entries ...[2]uint64) []byte {
	out := make([]byte, 24) // the null symbol
	for _, e := range entries {
		var s [24]byte
		binary.LittleEndian.PutUint32(s[0:], uint32(e[1]))
		s[4] = byte(elf.STB_GLOBAL)<<4 | byte(elf.STT_FUNC)
		binary.LittleEndian.PutUint16(s[6:], 1)
		binary.LittleEndian.PutUint64(s[8:], e[0])
		binary.LittleEndian.PutUint64(s[16:], 16)
		out = append(out, s[:]...)
	}
	return out
}

// goodSymtab is a .symtab (section 1) naming "lie_function" at 0x400100,
// its names in section 2.
func goodSymtab() []lieSection {
	return []lieSection{
		{name: ".symtab", typ: elf.SHT_SYMTAB, data: syms([2]uint64{lieText + 0x100, 1}), link: 2, entsize: 24},
		{name: ".strtab", typ: elf.SHT_STRTAB, data: []byte("\x00lie_function\x00")},
	}
}

// mapFile makes <root>/<pid> a process that maps path's first page at
// lieText, with path (a hard link: the same device and inode) at /bin/prog
// in its root.
func mapFile(t *testing.T, root string, pid int, path string) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	must(t, os.MkdirAll(filepath.Join(dir, "root", "bin"), 0o755))
	prog := filepath.Join(dir, "root", "bin", "prog")
	must(t, os.Link(path, prog))
	fi, err := os.Stat(prog)
	must(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	maps := fmt.Sprintf("%x-%x r-xp 00000000 %02x:%02x %d    /bin/prog\n",
		lieText, lieText+0x1000, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	must(t, os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(fmt.Sprintf("%d (prog) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5000 0 0\n", pid)), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "status"), []byte(fmt.Sprintf("Name:\tprog\nUid:\t%d\t%d\t%d\t%d\n", os.Getuid(), os.Getuid(), os.Getuid(), os.Getuid())), 0o644))
}

// allocated runs fn and returns the bytes it allocated.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestSizesThatLie: each file claims more than it holds or than a cap
// allows; each is left unsymbolised with its reason counted, having cost
// next to nothing to look at.
func TestSizesThatLie(t *testing.T) {
	const gib = 1 << 30
	withClaim := func(i int, claim uint64) lieELF {
		s := goodSymtab()
		s[i].claim = claim
		return lieELF{sections: s}
	}
	pcln := make([]byte, 4096)
	copy(pcln, pclntabMagics[0])
	pcln[6], pcln[7] = 1, 8
	binary.LittleEndian.PutUint64(pcln[8:], 100_000_000) // nfunc
	for w := 3; w <= 7; w++ {
		binary.LittleEndian.PutUint64(pcln[8+w*8:], 64)
	}
	cases := []struct {
		name  string
		file  lieELF
		share int64
		want  ErrorKind
	}{
		{"symtab claims a GiB", withClaim(0, gib), 0, ErrTooLarge},
		{"strtab claims a GiB", withClaim(1, gib), 0, ErrTooLarge},
		{"dynsym claims a GiB", lieELF{sections: []lieSection{
			{name: ".dynsym", typ: elf.SHT_DYNSYM, link: 2, entsize: 24, claim: gib},
			{name: ".dynstr", typ: elf.SHT_STRTAB, data: []byte("\x00x\x00")}}}, 0, ErrTooLarge},
		{"gopclntab claims a GiB", lieELF{sections: append(goodSymtab(),
			lieSection{name: ".gopclntab", typ: elf.SHT_PROGBITS, claim: gib})}, 0, ErrTooLarge},
		{"section names claim a GiB", lieELF{sections: goodSymtab(), shstrClaim: gib}, 0, ErrTooLarge},
		{"symtab runs past the end of the file", lieELF{sections: withClaim(0, 64<<20).sections, short: true}, 0, ErrTooLarge},
		{"pclntab claims 100 million functions", lieELF{sections: append(goodSymtab(),
			lieSection{name: ".gopclntab", typ: elf.SHT_PROGBITS, data: pcln})}, 0, ErrTooLarge},
		// Under the caps, but more than the job's share: over_budget, and
		// the names are never read.
		{"strtab over the job's share", withClaim(1, 200<<20), 64 << 20, ErrOverBudget},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			mapFile(t, root, 100+i, tc.file.write(t, root, "lie"))
			// The file is root's when the test runs as root: the shared
			// owner's then.
			b := budget.New(budget.Options{JobShare: tc.share, SharedShare: tc.share})
			s := New(Options{Proc: procfs.New(root), Budget: b})
			var frames []Frame
			n := allocated(func() { frames = s.User(procfs.ID{PID: 100 + i}, []uint64{lieText + 0x100}) })
			if frames[0].Function != "" {
				t.Errorf("resolved to %q", frames[0].Function)
			}
			if got := s.Stats().Errors[tc.want]; got != 1 {
				t.Errorf("%s = %d, want 1; errors %v", tc.want, got, s.Stats().Errors)
			}
			if n > 16<<20 {
				t.Errorf("looking at it allocated %d MiB", n>>20)
			}
		})
	}
}

// TestSparseTablesAreStreamed: a .symtab of 128 MiB of zeros (under the
// cap) is read through, not held: what is kept is what is a function.
func TestSparseTablesAreStreamed(t *testing.T) {
	root := t.TempDir()
	s := goodSymtab()
	s = append(s, lieSection{name: ".dynsym", typ: elf.SHT_DYNSYM, link: 2, entsize: 24, claim: 128 << 20})
	mapFile(t, root, 100, lieELF{sections: s}.write(t, root, "lie"))
	sym := New(Options{Proc: procfs.New(root)})
	var frames []Frame
	n := allocated(func() { frames = sym.User(procfs.ID{PID: 100}, []uint64{lieText + 0x100}) })
	checkResolves(t, frames, "lie_function")
	if n > 16<<20 {
		t.Errorf("streaming 128 MiB of symbols allocated %d MiB", n>>20)
	}
}

// TestAFileIsLeftForGoodOrRetried: a file over a cap is not looked at
// again; one over the job's share is, once the wait is over.
func TestAFileIsLeftForGoodOrRetried(t *testing.T) {
	root := t.TempDir()
	s := goodSymtab()
	s[1].data = append(bytes.Repeat([]byte{0}, 1), []byte("lie_function\x00")...)
	s = append(s, lieSection{name: ".dynstr", typ: elf.SHT_STRTAB, claim: 40 << 20},
		lieSection{name: ".dynsym", typ: elf.SHT_DYNSYM, link: 3, entsize: 24, data: syms()})
	mapFile(t, root, 100, lieELF{sections: s}.write(t, root, "lie"))
	clock := &fakeClock{t: time.Unix(1000, 0)}
	b := budget.New(budget.Options{JobShare: 32 << 20, SharedShare: 32 << 20})
	sym := New(Options{Proc: procfs.New(root), Budget: b, Now: clock.now})
	look := func() string { return sym.User(procfs.ID{PID: 100}, []uint64{lieText + 0x100})[0].Function }
	if f := look(); f != "" {
		t.Fatalf("resolved over the share: %q", f)
	}
	look()
	if n := sym.Stats().Errors[ErrOverBudget]; n != 1 {
		t.Errorf("over_budget = %d, want 1 (counted when found, not per frame)", n)
	}
	if m := sym.Stats().FileCacheMisses; m != 1 {
		t.Errorf("parsed %d times before the retry time, want once", m)
	}
	// A bigger share: the retry after retryTransient succeeds.
	sym.budget = budget.New(budget.Options{})
	clock.advance(retryTransient)
	if f := look(); f != "lie_function" {
		t.Errorf("after the retry time: %q", f)
	}
}
