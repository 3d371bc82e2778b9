// Package elfcheck is the one check of an ELF file a job can name (a
// mapped executable or library, a file named like a libpython) before any
// parser reads it. The job wrote the headers: a sparse file costs it no
// disk and can claim a gigabyte of section names, symbols or frame tables,
// which debug/elf and the agent's parsers would otherwise read and hold
// whole. Open reads the headers itself, holds every count and extent to
// the file's real size, and every table a reader reads to a hard cap by
// kind (decompressed sizes included, read from the compression headers),
// and only then hands debug/elf the headers it checked, not a second read
// that the job could have rewritten in between.
//
// Every reader of such files (the symbolizer, the unwinder's table
// builder, the interpreter readers) opens them through a Reader of its
// own, so that its refusals are counted under its name.
package elfcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"debug/elf"
)

// Limits are the caps on one file. A zero field takes its default
// (DefaultLimits); Unread marks a kind the reader never reads, which is
// then only held inside the file.
type Limits struct {
	Sections int   // section headers
	Progs    int   // program headers
	Names    int64 // the section-name table (.shstrtab), which debug/elf always reads
	// Strings: a string table (.strtab, .dynstr), and any section that a
	// symbol table, .dynamic or a version table names as its strings (it
	// is read with them, whatever its type).
	Strings  int64
	Symbols  int64 // .symtab, .dynsym
	Versions int64 // .gnu.version, .gnu.version_d, .gnu.version_r (debug/elf's DynamicSymbols reads them)
	Dynamic  int64 // .dynamic
	Frames   int64 // .eh_frame, .debug_frame
	Pclntab  int64 // .gopclntab
}

// Unread, as a Limits field, says the reader never reads that kind.
const Unread = -1

// DefaultLimits fit the largest real files (a CUDA library or an
// unstripped Chromium holds tens of MiB of symbols and names, a Go binary
// up to ~100 MiB of pclntab) with room to spare; the section-name table,
// the program headers and .dynamic are a few KiB in real files.
var DefaultLimits = Limits{
	Sections: 1 << 16,
	Progs:    4096,
	Names:    1 << 20,
	Strings:  256 << 20,
	Symbols:  256 << 20,
	Versions: 32 << 20,
	Dynamic:  1 << 20,
	Frames:   256 << 20,
	Pclntab:  256 << 20,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v, def int64) int64 {
		if v == 0 {
			return def
		}
		return v
	}
	if l.Sections > 0 {
		d.Sections = l.Sections
	}
	if l.Progs > 0 {
		d.Progs = l.Progs
	}
	if l.Names > 0 {
		d.Names = l.Names // debug/elf reads it whatever the reader says
	}
	d.Strings, d.Symbols, d.Versions = pick(l.Strings, d.Strings), pick(l.Symbols, d.Symbols), pick(l.Versions, d.Versions)
	d.Dynamic, d.Frames, d.Pclntab = pick(l.Dynamic, d.Dynamic), pick(l.Frames, d.Frames), pick(l.Pclntab, d.Pclntab)
	return d
}

// Errors of Open.
var (
	// ErrTooLarge: a count, extent or size over the file's real size or a
	// cap, or a size that cannot be known before decompressing. The file
	// is refused for good: it does not change by waiting.
	ErrTooLarge = errors.New("ELF size over the file or a cap")
	// ErrMalformed: not an ELF file, or one whose headers contradict
	// themselves.
	ErrMalformed = errors.New("malformed ELF")
	// ErrPanic: debug/elf panicked on headers that passed the checks.
	ErrPanic = errors.New("ELF parser panic")
)

func tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrTooLarge, fmt.Sprintf(format, args...))
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Open checks the ELF file r, whose real size (fstat's, not one the file
// claims) is size, and parses its headers with debug/elf. Every read goes
// through r, so a reader charged to a job's allowance charges the check
// too. It never panics.
func (c *Reader) Open(r io.ReaderAt, size int64, lim Limits) (*elf.File, error) {
	f, err := open(r, size, lim)
	switch {
	case errors.Is(err, ErrTooLarge):
		c.tooLarge.Add(1)
	case errors.Is(err, ErrPanic):
		c.panics.Add(1)
	}
	return f, err
}

func open(r io.ReaderAt, size int64, lim Limits) (f *elf.File, err error) {
	if size < 0 {
		return nil, malformed("size %d", size)
	}
	lim = lim.withDefaults()
	h, err := check(r, uint64(size), lim)
	if err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	f, err = elf.NewFile(h.snap)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	// debug/elf read the compression headers again, from the file: the
	// sizes it took from them must be the ones checked.
	if len(f.Sections) != len(h.secs) {
		return nil, malformed("%d sections parsed, %d checked", len(f.Sections), len(h.secs))
	}
	for i, s := range f.Sections {
		if s.Size != h.secs[i].size {
			return nil, tooLarge("section %d (%s) changed its size from %d to %d while it was read", i, s.Name, h.secs[i].size, s.Size)
		}
	}
	return f, nil
}

// section is one section header as checked; size is its data's size,
// decompressed.
type section struct {
	name              uint32
	typ               elf.SectionType
	flags             uint64
	off, fileSize     uint64
	size              uint64
	link              uint32
	compressed, bytes bool // bytes: occupies file bytes (not NOBITS, not empty)
}

// checked is what check read: the headers, which debug/elf then reads
// from the snapshot, and the sections.
type checked struct {
	snap *snapshot
	secs []section
}

// Sizes of the standard header entries.
const (
	ehdr64, ehdr32 = 64, 52
	phdr64, phdr32 = 56, 32
	shdr64, shdr32 = 64, 40
	chdr64, chdr32 = 24, 12
)

func check(r io.ReaderAt, fsize uint64, lim Limits) (*checked, error) {
	snap := &snapshot{r: r}
	maxProgs, maxSections, maxNames := uint64(lim.Progs), uint64(lim.Sections), uint64(lim.Names) // #nosec G115 -- positive: withDefaults
	within := func(off, n uint64) bool { return off <= fsize && n <= fsize-off }
	if fsize < elf.EI_NIDENT {
		return nil, malformed("%d bytes", fsize)
	}
	hsize := uint64(min(fsize, ehdr64))
	h, err := snap.read(0, hsize)
	if err != nil {
		return nil, err
	}
	if string(h[:4]) != elf.ELFMAG {
		return nil, malformed("bad magic")
	}
	var order binary.ByteOrder
	switch elf.Data(h[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		order = binary.LittleEndian
	case elf.ELFDATA2MSB:
		order = binary.BigEndian
	default:
		return nil, malformed("data encoding %d", h[elf.EI_DATA])
	}
	is64 := false
	switch elf.Class(h[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		is64 = true
		if hsize < ehdr64 {
			return nil, malformed("%d bytes", fsize)
		}
	case elf.ELFCLASS32:
		if hsize < ehdr32 {
			return nil, malformed("%d bytes", fsize)
		}
	default:
		return nil, malformed("class %d", h[elf.EI_CLASS])
	}
	var phoff, shoff, phentsize, phnum, shentsize, shnum, shstrndx uint64
	phStd, shStd, chStd := uint64(phdr32), uint64(shdr32), uint64(chdr32)
	if is64 {
		phStd, shStd, chStd = phdr64, shdr64, chdr64
		phoff, shoff = order.Uint64(h[32:]), order.Uint64(h[40:])
		phentsize, phnum = uint64(order.Uint16(h[54:])), uint64(order.Uint16(h[56:]))
		shentsize, shnum, shstrndx = uint64(order.Uint16(h[58:])), uint64(order.Uint16(h[60:])), uint64(order.Uint16(h[62:]))
	} else {
		phoff, shoff = uint64(order.Uint32(h[28:])), uint64(order.Uint32(h[32:]))
		phentsize, phnum = uint64(order.Uint16(h[42:])), uint64(order.Uint16(h[44:]))
		shentsize, shnum, shstrndx = uint64(order.Uint16(h[46:])), uint64(order.Uint16(h[48:])), uint64(order.Uint16(h[50:]))
	}

	// Program headers: debug/elf reads phnum entries of phentsize bytes,
	// whatever phentsize says (up to 64 KiB each).
	if phnum > 0 {
		if phnum > maxProgs {
			return nil, tooLarge("%d program headers", phnum)
		}
		if phentsize < phStd {
			return nil, malformed("program header entries of %d bytes", phentsize)
		}
		// Both under 2^16: no overflow.
		n := phnum * phentsize
		if n > maxProgs*phStd {
			return nil, tooLarge("%d program headers of %d bytes", phnum, phentsize)
		}
		if !within(phoff, n) {
			return nil, tooLarge("program headers at %#x beyond the file's %d bytes", phoff, fsize)
		}
		if _, err := snap.read(phoff, n); err != nil {
			return nil, err
		}
	}
	if shoff == 0 {
		if shnum != 0 {
			return nil, malformed("%d sections at offset 0", shnum)
		}
		return &checked{snap: snap}, nil // no sections: the program headers are all there is
	}
	if shentsize < shStd {
		return nil, malformed("section header entries of %d bytes", shentsize)
	}
	if !within(shoff, shStd) {
		return nil, tooLarge("section headers at %#x beyond the file's %d bytes", shoff, fsize)
	}
	if shnum == 0 || shstrndx == uint64(elf.SHN_XINDEX) {
		// Extended numbering: section 0 holds the real count and index.
		b, err := snap.read(shoff, shStd)
		if err != nil {
			return nil, err
		}
		s0 := parseSection(b, order, is64)
		if shnum == 0 {
			shnum = s0.fileSize
		}
		if shstrndx == uint64(elf.SHN_XINDEX) {
			shstrndx = uint64(s0.link)
		}
	}
	if shnum > maxSections {
		return nil, tooLarge("%d section headers", shnum)
	}
	// shnum is under the cap, shentsize under 2^16: no overflow.
	n := shnum * shentsize
	if n > maxSections*shStd {
		return nil, tooLarge("%d section headers of %d bytes", shnum, shentsize)
	}
	if !within(shoff, n) {
		return nil, tooLarge("%d section headers at %#x beyond the file's %d bytes", shnum, shoff, fsize)
	}
	if shnum > 0 && shstrndx >= shnum {
		return nil, malformed("section names in section %d of %d", shstrndx, shnum)
	}
	table, err := snap.read(shoff, n)
	if err != nil {
		return nil, err
	}
	secs := make([]section, shnum)
	for i := uint64(0); i < shnum; i++ {
		secs[i] = parseSection(table[i*shentsize:], order, is64)
	}

	// Sizes as debug/elf will take them: a compressed section's from its
	// compression header, which is read here first.
	for i := range secs {
		s := &secs[i]
		if s.bytes && !within(s.off, s.fileSize) {
			return nil, tooLarge("section %d at %#x+%#x beyond the file's %d bytes", i, s.off, s.fileSize, fsize)
		}
		if !s.compressed {
			continue
		}
		// debug/elf reads the header of every compressed section, even
		// NOBITS ones: a header past the section's end fails it there.
		if s.fileSize < chStd || !within(s.off, chStd) {
			continue
		}
		var ch [chdr64]byte
		if _, err := readFull(r, ch[:chStd], s.off); err != nil {
			return nil, err
		}
		if is64 {
			s.size = order.Uint64(ch[8:])
		} else {
			s.size = uint64(order.Uint32(ch[4:]))
		}
	}

	// The section names: debug/elf reads them whole.
	var names []byte
	if shnum > 0 && shstrndx != 0 {
		s := secs[shstrndx]
		if s.typ != elf.SHT_STRTAB {
			return nil, malformed("section names of type %s", s.typ)
		}
		if s.compressed {
			// No linker writes them; read, they would be decompressed from
			// the file, not from what was checked.
			return nil, tooLarge("compressed section names (%d bytes decompressed)", s.size)
		}
		if s.size > maxNames {
			return nil, tooLarge("section names of %d bytes", s.size)
		}
		if s.bytes {
			if names, err = snap.read(s.off, s.fileSize); err != nil {
				return nil, err
			}
		}
	}
	name := func(i uint64) string {
		off := uint64(secs[i].name)
		if off >= uint64(len(names)) {
			return ""
		}
		b := names[off:]
		if j := strings.IndexByte(string(b[:min(len(b), 64)]), 0); j >= 0 {
			return string(b[:j])
		}
		return string(b[:min(len(b), 64)])
	}

	// Every table a reader reads, under the cap of its kind (none: the
	// largest uint64).
	capOf := make([]uint64, len(secs))
	for i := range capOf {
		capOf[i] = math.MaxUint64
	}
	need := func(i uint64, c int64, kind string) error {
		if c == Unread {
			return nil
		}
		if i == 0 || i >= shnum {
			return nil // no such table: debug/elf says so when it is asked
		}
		uc := uint64(c) // #nosec G115 -- positive: withDefaults, and not Unread
		capOf[i] = min(capOf[i], uc)
		if strings.HasPrefix(name(i), ".zdebug") {
			// debug/elf decompresses any section so named that starts
			// with "ZLIB", to the size those bytes claim when read.
			return tooLarge("%s, read as %s, is a .zdebug section: its size is known only while decompressing", name(i), kind)
		}
		return nil
	}
	strs := lim.Strings
	if strs == Unread {
		strs = DefaultLimits.Strings
	}
	for ui := uint64(0); ui < shnum; ui++ {
		s := secs[ui]
		var err error
		switch s.typ {
		case elf.SHT_SYMTAB, elf.SHT_DYNSYM:
			err = need(ui, lim.Symbols, "symbols")
			if err == nil && lim.Symbols != Unread {
				err = need(uint64(s.link), strs, "strings")
			}
		case elf.SHT_DYNAMIC:
			err = need(ui, lim.Dynamic, "dynamic")
			if err == nil {
				err = need(uint64(s.link), strs, "strings")
			}
		case elf.SHT_GNU_VERSYM:
			err = need(ui, lim.Versions, "versions")
		case elf.SHT_GNU_VERDEF, elf.SHT_GNU_VERNEED:
			err = need(ui, lim.Versions, "versions")
			if err == nil && lim.Versions != Unread {
				err = need(uint64(s.link), strs, "strings")
			}
		case elf.SHT_STRTAB:
			if ui != shstrndx {
				err = need(ui, lim.Strings, "strings")
			}
		}
		if err != nil {
			return nil, err
		}
		switch name(ui) {
		case ".eh_frame", ".debug_frame":
			err = need(ui, lim.Frames, "frames")
		case ".gopclntab":
			err = need(ui, lim.Pclntab, "pclntab")
		}
		if err != nil {
			return nil, err
		}
	}
	for i := uint64(0); i < shnum; i++ {
		if secs[i].size > capOf[i] {
			return nil, tooLarge("section %d (%s) of %d bytes, over its cap of %d", i, name(i), secs[i].size, capOf[i])
		}
	}
	return &checked{snap: snap, secs: secs}, nil
}

func parseSection(b []byte, order binary.ByteOrder, is64 bool) section {
	var s section
	s.name, s.typ = order.Uint32(b), elf.SectionType(order.Uint32(b[4:]))
	if is64 {
		s.flags, s.off, s.fileSize, s.link = order.Uint64(b[8:]), order.Uint64(b[24:]), order.Uint64(b[32:]), order.Uint32(b[40:])
	} else {
		s.flags, s.off, s.fileSize, s.link = uint64(order.Uint32(b[8:])), uint64(order.Uint32(b[16:])), uint64(order.Uint32(b[20:])), order.Uint32(b[24:])
	}
	s.size = s.fileSize
	s.compressed = s.flags&uint64(elf.SHF_COMPRESSED) != 0
	s.bytes = s.typ != elf.SHT_NOBITS && s.fileSize > 0
	return s
}
