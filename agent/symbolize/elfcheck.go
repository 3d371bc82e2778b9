package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Sizes lie. An ELF file's headers say how large its tables are, and a job
// writes those headers: a sparse file can claim a gigabyte of .symtab that
// reads as zeros, and would cost a gigabyte to hold. Every size and count
// the parser trusts is checked first, against the file's real size and
// against the hard caps below; a file over a cap is left unsymbolised
// (ErrTooLarge), whatever it would have cost the budget.
const (
	maxSectionHeaders = 1 << 16
	maxShstrtabBytes  = 1 << 20   // section names: a few KiB in real files
	maxSymtabBytes    = 256 << 20 // one .symtab or .dynsym: 11M symbols
	maxStrtabBytes    = 256 << 20 // the names of one of them
	maxPclntabBytes   = 256 << 20 // a Go pclntab (the largest binaries hold ~100 MiB)
)

// errTooLarge marks a file refused for a size or count over its real size
// or a cap.
var errTooLarge = errors.New("size over the file or a cap")

func tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errTooLarge, fmt.Sprintf(format, args...))
}

// checkELF reads the ELF header and section header table itself, before
// debug/elf does (which would read the section-name table whole, whatever
// size it claims), and checks every count and extent: program and section
// headers inside the file and under their caps, every section with file
// contents inside the file, the section-name table under its cap. It
// returns nil for a file too short or malformed to be ELF at all: then
// debug/elf reports that.
func checkELF(r io.ReaderAt, size int64) error {
	var ident [elf.EI_NIDENT]byte
	if _, err := r.ReadAt(ident[:], 0); err != nil || string(ident[:4]) != elf.ELFMAG {
		return nil
	}
	var order binary.ByteOrder
	switch elf.Data(ident[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		order = binary.LittleEndian
	case elf.ELFDATA2MSB:
		order = binary.BigEndian
	default:
		return nil
	}
	var phoff, shoff uint64
	var phentsize, phnum, shentsize, shnum, shstrndx uint64
	var shdrSize uint64
	switch elf.Class(ident[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		var h [64]byte
		if _, err := r.ReadAt(h[:], 0); err != nil {
			return nil
		}
		phoff, shoff = order.Uint64(h[32:]), order.Uint64(h[40:])
		phentsize, phnum = uint64(order.Uint16(h[54:])), uint64(order.Uint16(h[56:]))
		shentsize, shnum, shstrndx = uint64(order.Uint16(h[58:])), uint64(order.Uint16(h[60:])), uint64(order.Uint16(h[62:]))
		shdrSize = 64
	case elf.ELFCLASS32:
		var h [52]byte
		if _, err := r.ReadAt(h[:], 0); err != nil {
			return nil
		}
		phoff, shoff = uint64(order.Uint32(h[28:])), uint64(order.Uint32(h[32:]))
		phentsize, phnum = uint64(order.Uint16(h[42:])), uint64(order.Uint16(h[44:]))
		shentsize, shnum, shstrndx = uint64(order.Uint16(h[46:])), uint64(order.Uint16(h[48:])), uint64(order.Uint16(h[50:]))
		shdrSize = 40
	default:
		return nil
	}
	fsize := uint64(size) // #nosec G115 -- a file's size (fstat) is not negative
	within := func(off, n uint64) bool { return off <= fsize && n <= fsize-off }
	if phnum > maxProgHeaders {
		return tooLarge("%d program headers", phnum)
	}
	if phnum > 0 && (phentsize == 0 || !within(phoff, phnum*phentsize)) {
		return tooLarge("program headers at %#x beyond the file's %d bytes", phoff, size)
	}
	if shoff == 0 {
		return nil // no section headers: the program headers are all there is
	}
	if shentsize < shdrSize {
		return nil // malformed; debug/elf says so
	}
	readShdr := func(i uint64) (typ uint32, off, sz, link uint64, err error) {
		var b [64]byte
		at := int64(shoff + i*shentsize) // #nosec G115 -- within() held the headers inside the file before any read
		if _, err = r.ReadAt(b[:shdrSize], at); err != nil {
			return 0, 0, 0, 0, err
		}
		typ = order.Uint32(b[4:])
		if shdrSize == 64 {
			off, sz, link = order.Uint64(b[24:]), order.Uint64(b[32:]), uint64(order.Uint32(b[40:]))
		} else {
			off, sz, link = uint64(order.Uint32(b[16:])), uint64(order.Uint32(b[20:])), uint64(order.Uint32(b[24:]))
		}
		return typ, off, sz, link, nil
	}
	if !within(shoff, shdrSize) {
		return tooLarge("section headers at %#x beyond the file's %d bytes", shoff, size)
	}
	if shnum == 0 || shstrndx == uint64(elf.SHN_XINDEX) {
		// Extended numbering: section 0 holds the real count and index.
		_, _, sz, link, err := readShdr(0)
		if err != nil {
			return nil
		}
		if shnum == 0 {
			shnum = sz
		}
		if shstrndx == uint64(elf.SHN_XINDEX) {
			shstrndx = link
		}
	}
	if shnum > maxSectionHeaders {
		return tooLarge("%d section headers", shnum)
	}
	if !within(shoff, shnum*shentsize) {
		return tooLarge("%d section headers at %#x beyond the file's %d bytes", shnum, shoff, size)
	}
	for i := range shnum {
		typ, off, sz, _, err := readShdr(i)
		if err != nil {
			return nil
		}
		if elf.SectionType(typ) == elf.SHT_NOBITS || sz == 0 {
			continue
		}
		if !within(off, sz) {
			return tooLarge("section %d at %#x+%#x beyond the file's %d bytes", i, off, sz, size)
		}
		if i == shstrndx && sz > maxShstrtabBytes {
			return tooLarge("section names of %d bytes", sz)
		}
	}
	return nil
}

// checkSections holds the sections the parser reads to their caps, once
// debug/elf has parsed the headers that checkELF let through.
func checkSections(f *elf.File) error {
	for _, s := range f.Sections {
		switch {
		case s.Type == elf.SHT_SYMTAB || s.Type == elf.SHT_DYNSYM:
			if s.Size > maxSymtabBytes {
				return tooLarge("%s of %d bytes", s.Name, s.Size)
			}
			if int(s.Link) >= len(f.Sections) {
				continue // no names: skipped by the reader
			}
			if st := f.Sections[s.Link]; st.Size > maxStrtabBytes {
				return tooLarge("%s names (%s) of %d bytes", s.Name, st.Name, st.Size)
			}
		case s.Name == ".gopclntab" && s.Type != elf.SHT_NOBITS:
			if s.Size > maxPclntabBytes {
				return tooLarge(".gopclntab of %d bytes", s.Size)
			}
		}
	}
	return nil
}
