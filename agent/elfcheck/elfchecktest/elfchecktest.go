// Package elfchecktest writes small ELF files whose headers may lie about
// sizes, to disk as sparse files (as a job plants them: the file is as
// large as its claims and costs no disk), for the tests of the readers of
// job files.
package elfchecktest

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// Text is the virtual address of the file's one executable segment,
// which maps the file's first page.
const Text = 0x400000

// Section is one section after the null one. A section with Claim > 0
// says it is Claim bytes long: its Data (if any) starts at a page of its
// own, and the rest of the claim is a hole.
type Section struct {
	Name    string
	Type    elf.SectionType
	Flags   elf.SectionFlag
	Data    []byte
	Link    uint32 // a section index: 1 is the first of File.Sections
	Claim   uint64
	Entsize uint64
	// Chdr, when set with SHF_COMPRESSED in Flags, prefixes Data with an
	// ELF64 compression header claiming Chdr bytes decompressed (zlib).
	Chdr uint64
}

// File is an ELF64 little-endian x86-64 shared object: the ELF header,
// one PT_LOAD (read, execute) of the first page at Text, the sections
// and then .shstrtab, the last section.
type File struct {
	Sections   []Section
	NamesClaim uint64 // what .shstrtab claims, when set
	Short      bool   // do not extend the file: claims run past its end
}

// Chunk is data at an offset past the headers.
type Chunk struct {
	Off  int64
	Data []byte
}

// Bytes returns the file as written: its first bytes (the headers and
// the unclaimed sections), the data of the claimed sections, each at a
// page of its own, and the size the file is extended to (holes).
func (l File) Bytes() ([]byte, []Chunk, int64) {
	le := binary.LittleEndian
	secs := append([]Section{{}}, l.Sections...)
	names := []byte{0}
	nameOff := make([]uint32, len(secs)+1)
	for i, s := range secs[1:] {
		nameOff[i+1] = uint32(len(names)) // #nosec G115 -- a test's few names
		names = append(append(names, s.Name...), 0)
	}
	nameOff[len(secs)] = uint32(len(names)) // #nosec G115 -- a test's few names
	names = append(append(names, ".shstrtab"...), 0)
	secs = append(secs, Section{Name: ".shstrtab", Type: elf.SHT_STRTAB, Data: names, Claim: l.NamesClaim})

	buf := make([]byte, 0x1000) // headers, then code: the mapped page
	for i := 0x100; i < 0x1000; i++ {
		buf[i] = 0xc3 // ret
	}
	type placed struct{ off, size uint64 }
	pos := make([]placed, len(secs))
	size := uint64(len(buf))
	var tail [][]byte // data of claimed sections, each at a page of its own
	var tailOff []uint64
	for i, s := range secs[1:] {
		data := s.Data
		if s.Flags&elf.SHF_COMPRESSED != 0 && s.Chdr > 0 {
			var ch [24]byte
			le.PutUint32(ch[0:], uint32(elf.COMPRESS_ZLIB))
			le.PutUint64(ch[8:], s.Chdr)
			le.PutUint64(ch[16:], 1)
			data = append(ch[:], data...)
		}
		if s.Claim > 0 {
			tail, tailOff = append(tail, data), append(tailOff, 0)
			pos[i+1] = placed{0, s.Claim}
			continue
		}
		pos[i+1] = placed{uint64(len(buf)), uint64(len(data))}
		buf = append(buf, data...)
	}
	shoff := (uint64(len(buf)) + 7) &^ 7
	end := shoff + uint64(len(secs))*64
	size = max(size, end)
	// Claimed sections after the headers, page aligned.
	next := (end + 0xfff) &^ 0xfff
	ti := 0
	for i, s := range secs {
		if i == 0 || s.Claim == 0 {
			continue
		}
		pos[i].off = next
		tailOff[ti] = next
		size = max(size, next+s.Claim)
		next = (next + max(s.Claim, uint64(len(tail[ti]))) + 0xfff) &^ 0xfff
		ti++
	}
	buf = append(buf, make([]byte, shoff-uint64(len(buf)))...)
	for i, s := range secs {
		var sh [64]byte
		le.PutUint32(sh[0:], nameOff[i])
		le.PutUint32(sh[4:], uint32(s.Type))
		le.PutUint64(sh[8:], uint64(s.Flags))
		if i > 0 {
			le.PutUint64(sh[24:], pos[i].off)
			le.PutUint64(sh[32:], pos[i].size)
		}
		le.PutUint32(sh[40:], s.Link)
		le.PutUint64(sh[48:], 1)
		le.PutUint64(sh[56:], s.Entsize)
		buf = append(buf, sh[:]...)
	}
	var chunks []Chunk
	for i, d := range tail {
		if len(d) > 0 {
			chunks = append(chunks, Chunk{int64(tailOff[i]), d}) // #nosec G115 -- a test's claims, under 2^63
		}
	}
	copy(buf, elf.ELFMAG)
	buf[elf.EI_CLASS], buf[elf.EI_DATA], buf[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), 1
	le.PutUint16(buf[16:], uint16(elf.ET_DYN))
	le.PutUint16(buf[18:], uint16(elf.EM_X86_64))
	le.PutUint32(buf[20:], 1)
	le.PutUint64(buf[24:], Text+0x100)
	le.PutUint64(buf[32:], 64)    // e_phoff
	le.PutUint64(buf[40:], shoff) // e_shoff
	le.PutUint16(buf[52:], 64)
	le.PutUint16(buf[54:], 56)
	le.PutUint16(buf[56:], 1)
	le.PutUint16(buf[58:], 64)
	le.PutUint16(buf[60:], uint16(len(secs)))   // #nosec G115 -- a test's few sections
	le.PutUint16(buf[62:], uint16(len(secs)-1)) // #nosec G115 -- a test's few sections
	ph := buf[64:]
	le.PutUint32(ph[0:], uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_X))
	le.PutUint64(ph[16:], Text)
	le.PutUint64(ph[24:], Text)
	le.PutUint64(ph[32:], 0x1000)
	le.PutUint64(ph[40:], 0x1000)
	le.PutUint64(ph[48:], 0x1000)
	if l.Short {
		size = uint64(len(buf))
		chunks = nil
	}
	return buf, chunks, int64(max(size, uint64(len(buf)))) // #nosec G115 -- a test's claims, under 2^63
}

// Write writes the file at dir/name, extended with holes to hold its
// claims, and returns its path.
func (l File) Write(t testing.TB, dir, name string) string {
	t.Helper()
	b, chunks, size := l.Bytes()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if _, err := f.WriteAt(c.Data, c.Off); err != nil {
			t.Fatal(err)
		}
	}
	// Holes: the file is as large as it claims and costs no disk.
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// Symbol is one ELF64 symbol.
type Symbol struct {
	Name  uint32 // offset in the string table
	Info  byte
	Shndx uint16
	Value uint64
	Size  uint64
}

// Symbols encodes a symbol table: the null symbol, then syms.
func Symbols(syms ...Symbol) []byte {
	out := make([]byte, elf.Sym64Size)
	for _, s := range syms {
		var b [elf.Sym64Size]byte
		binary.LittleEndian.PutUint32(b[0:], s.Name)
		b[4] = s.Info
		binary.LittleEndian.PutUint16(b[6:], s.Shndx)
		binary.LittleEndian.PutUint64(b[8:], s.Value)
		binary.LittleEndian.PutUint64(b[16:], s.Size)
		out = append(out, b[:]...)
	}
	return out
}

// Strings encodes a string table of names and returns each one's offset.
func Strings(names ...string) ([]byte, []uint32) {
	out := []byte{0}
	var offs []uint32
	for _, n := range names {
		offs = append(offs, uint32(len(out))) // #nosec G115 -- a test's few names
		out = append(append(out, n...), 0)
	}
	return out, offs
}
