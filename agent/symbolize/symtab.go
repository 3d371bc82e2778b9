package symbolize

import (
	"bytes"
	"debug/elf"
	"io"
	"slices"
	"strings"
)

// symbol is one function-like ELF symbol.
type symbol struct {
	addr, size uint64
	name       string
}

// symTable is a sorted, deduplicated table of function symbols.
type symTable struct {
	syms []symbol
	// execEnd bounds lookups for zero-sized symbols: the highest end address
	// of any executable segment, so a trailing size-0 symbol does not claim
	// the rest of the address space.
	execEnd uint64
}

// symbolBytes is what one kept symbol costs, besides its name.
const symbolBytes = 40

// loadSymbols merges .symtab and .dynsym. A binary stripped of .symtab still
// has .dynsym for its exported functions. The tables are streamed, not read
// whole (debug/elf's Symbols would hold every entry, functions or not, at
// once); each one's string table is read whole, within its cap, and
// charged (grow) while it is held, as is every symbol kept. An error from
// reading or from grow ends the load.
func loadSymbols(f *elf.File, r io.ReaderAt, grow func(int64) error) (symTable, error) {
	var t symTable
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr+p.Memsz > t.execEnd {
			t.execEnd = p.Vaddr + p.Memsz
		}
	}
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		for _, sec := range f.Sections {
			if sec.Type != typ {
				continue
			}
			if err := readSymbolSection(f, r, sec, &t, grow); err != nil {
				return t, err
			}
		}
	}
	slices.SortFunc(t.syms, func(a, b symbol) int {
		switch {
		case a.addr != b.addr:
			if a.addr < b.addr {
				return -1
			}
			return 1
		case a.size != b.size: // larger first: keep the enclosing function
			if a.size > b.size {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	t.syms = slices.CompactFunc(t.syms, func(a, b symbol) bool { return a.addr == b.addr })
	t.syms = slices.Clip(t.syms)
	return t, nil
}

// symChunk is how many symbol entries are read at a time.
const symChunk = 4096

func readSymbolSection(f *elf.File, r io.ReaderAt, sec *elf.Section, t *symTable, grow func(int64) error) error {
	entSize := uint64(elf.Sym64Size)
	if f.Class == elf.ELFCLASS32 {
		entSize = elf.Sym32Size
	}
	if sec.Size < entSize || int(sec.Link) >= len(f.Sections) || sec.Link == 0 {
		return nil
	}
	strSec := f.Sections[sec.Link]
	if strSec.Type != elf.SHT_STRTAB || strSec.Size == 0 {
		return nil
	}
	// elfcheck held both inside the file and under their caps.
	strSize := int64(strSec.Size) // #nosec G115 -- elfcheck held it under its cap
	if err := grow(strSize); err != nil {
		return err
	}
	defer grow(-strSize)
	strtab := make([]byte, strSec.Size)
	strOff := int64(strSec.Offset) // #nosec G115 -- elfcheck held the section inside the file
	if _, err := r.ReadAt(strtab, strOff); err != nil {
		return err
	}
	n := sec.Size / entSize
	buf := make([]byte, symChunk*entSize)
	var kept int64
	for i := uint64(1); i < n && len(t.syms) < maxSymbols; { // entry 0 is all zeros
		c := min(n-i, symChunk)
		b := buf[:c*entSize]
		at := int64(sec.Offset + i*entSize) // #nosec G115 -- i < n: inside the section, which elfcheck held inside the file
		if _, err := r.ReadAt(b, at); err != nil {
			return err
		}
		for ; len(b) > 0 && len(t.syms) < maxSymbols; b = b[entSize:] {
			var nameOff uint32
			var info byte
			var shndx uint16
			var value, size uint64
			if entSize == elf.Sym64Size {
				nameOff, info, shndx = f.ByteOrder.Uint32(b), b[4], f.ByteOrder.Uint16(b[6:])
				value, size = f.ByteOrder.Uint64(b[8:]), f.ByteOrder.Uint64(b[16:])
			} else {
				nameOff, value, size = f.ByteOrder.Uint32(b), uint64(f.ByteOrder.Uint32(b[4:])), uint64(f.ByteOrder.Uint32(b[8:]))
				info, shndx = b[12], f.ByteOrder.Uint16(b[14:])
			}
			typ := elf.ST_TYPE(info)
			if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC && typ != elf.STT_NOTYPE {
				continue
			}
			sect := elf.SectionIndex(shndx)
			if sect == elf.SHN_UNDEF || sect >= elf.SHN_LORESERVE || value == 0 {
				continue
			}
			name := cString(strtab, nameOff)
			// Assembler-local labels (.L...) and mapping symbols ($x, $d) are
			// not functions.
			if len(name) == 0 || name[0] == '$' || len(name) > 1 && name[0] == '.' && name[1] == 'L' {
				continue
			}
			t.syms = append(t.syms, symbol{addr: value, size: size, name: string(name)})
			kept += symbolBytes + int64(len(name))
			if kept >= 1<<20 {
				if err := grow(kept); err != nil {
					return err
				}
				kept = 0
			}
		}
		i += c
	}
	return grow(kept)
}

// cString is the NUL-terminated string at off in tab; empty when off is
// outside it.
func cString(tab []byte, off uint32) []byte {
	if uint64(off) >= uint64(len(tab)) {
		return nil
	}
	s := tab[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// lookup returns the symbol covering addr. A sized symbol covers exactly its
// range; a zero-sized one (hand-written assembly) extends to the next symbol.
func (t *symTable) lookup(addr uint64) (string, bool) {
	i, found := slices.BinarySearchFunc(t.syms, addr, func(s symbol, a uint64) int {
		switch {
		case s.addr < a:
			return -1
		case s.addr > a:
			return 1
		}
		return 0
	})
	if !found {
		i-- // the last symbol starting below addr
	}
	if i < 0 {
		return "", false
	}
	s := &t.syms[i]
	if s.size > 0 {
		if addr-s.addr < s.size {
			return s.name, true
		}
		return "", false
	}
	if i+1 < len(t.syms) && addr >= t.syms[i+1].addr {
		return "", false
	}
	if addr >= t.execEnd {
		return "", false
	}
	return s.name, true
}

func (t *symTable) size() int64 {
	n := int64(len(t.syms)) * symbolBytes
	for _, s := range t.syms {
		n += int64(len(s.name))
	}
	return n
}
