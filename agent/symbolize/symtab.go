package symbolize

import (
	"bytes"
	"debug/elf"
	"io"
	"math"
	"slices"

	"github.com/klauspost/compress/s2"
)

// symTable is a sorted, deduplicated table of function symbols, compact:
// what libtorch_cpu's hundreds of thousands of C++ names cost must not be
// a Go string and a slice header each. Addresses and sizes are arrays
// (no pointers for the collector to scan); the names are NUL-terminated
// in address order, compressed in blocks of namesPerBlock, and a block is
// decompressed on a lookup (the file's results cache keeps what was
// found).
type symTable struct {
	addrs []uint64
	sizes []uint32 // clamped: a function is far below 4 GiB
	// names holds the compressed blocks back to back; block i starts at
	// blocks[i] and ends at blocks[i+1] (or the end).
	names  []byte
	blocks []uint32
	// execEnd bounds lookups for zero-sized symbols: the highest end address
	// of any executable segment, so a trailing size-0 symbol does not claim
	// the rest of the address space.
	execEnd uint64
}

// namesPerBlock trades a lookup's decompression (a few KiB) against the
// compression ratio.
const namesPerBlock = 32

// symbolBytes is what one kept symbol costs, besides its (compressed) name.
const symbolBytes = 12

// rawSym is a symbol while the table is built: its name still in the
// string table it was read from.
type rawSym struct {
	addr, size uint64
	name       []byte
}

// rawSymBytes is what one symbol costs while the table is built.
const rawSymBytes = 40

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
	var raw []rawSym
	var held int64 // charged while building: string tables and raw symbols
	defer func() { grow(-held) }()
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		for _, sec := range f.Sections {
			if sec.Type != typ {
				continue
			}
			if err := readSymbolSection(f, r, sec, &raw, &held, grow); err != nil {
				return symTable{}, err
			}
		}
	}
	t = buildTable(raw, t.execEnd)
	return t, grow(t.size())
}

// buildTable sorts raw by address, keeps one symbol per address (the
// largest, then the first name) and packs them.
func buildTable(raw []rawSym, execEnd uint64) symTable {
	t := symTable{execEnd: execEnd}
	slices.SortFunc(raw, func(a, b rawSym) int {
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
		return bytes.Compare(a.name, b.name)
	})
	raw = slices.CompactFunc(raw, func(a, b rawSym) bool { return a.addr == b.addr })
	t.addrs = make([]uint64, len(raw))
	t.sizes = make([]uint32, len(raw))
	var block []byte
	for i, s := range raw {
		t.addrs[i] = s.addr
		t.sizes[i] = uint32(min(s.size, math.MaxUint32)) // #nosec G115 -- clamped
		block = append(append(block, s.name...), 0)
		if (i+1)%namesPerBlock == 0 || i == len(raw)-1 {
			t.blocks = append(t.blocks, uint32(len(t.names))) // #nosec G115 -- names are bounded by the string tables' caps, far below 4 GiB
			t.names = append(t.names, s2.EncodeBetter(nil, block)...)
			block = block[:0]
		}
	}
	t.names = slices.Clip(t.names)
	return t
}

// symChunk is how many symbol entries are read at a time.
const symChunk = 4096

func readSymbolSection(f *elf.File, r io.ReaderAt, sec *elf.Section, raw *[]rawSym, held *int64, grow func(int64) error) error {
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
	*held += strSize
	strtab := make([]byte, strSec.Size)
	strOff := int64(strSec.Offset) // #nosec G115 -- elfcheck held the section inside the file
	if _, err := r.ReadAt(strtab, strOff); err != nil {
		return err
	}
	n := sec.Size / entSize
	buf := make([]byte, symChunk*entSize)
	var kept int64
	for i := uint64(1); i < n && len(*raw) < maxSymbols; { // entry 0 is all zeros
		c := min(n-i, symChunk)
		b := buf[:c*entSize]
		at := int64(sec.Offset + i*entSize) // #nosec G115 -- i < n: inside the section, which elfcheck held inside the file
		if _, err := r.ReadAt(b, at); err != nil {
			return err
		}
		for ; len(b) > 0 && len(*raw) < maxSymbols; b = b[entSize:] {
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
			*raw = append(*raw, rawSym{addr: value, size: size, name: name})
			kept += rawSymBytes
			if kept >= 1<<20 {
				if err := grow(kept); err != nil {
					return err
				}
				*held += kept
				kept = 0
			}
		}
		i += c
	}
	if err := grow(kept); err != nil {
		return err
	}
	*held += kept
	return nil
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
	i, found := slices.BinarySearch(t.addrs, addr)
	if !found {
		i-- // the last symbol starting below addr
	}
	if i < 0 {
		return "", false
	}
	if size := uint64(t.sizes[i]); size > 0 {
		if addr-t.addrs[i] < size {
			return t.name(i), true
		}
		return "", false
	}
	if i+1 < len(t.addrs) && addr >= t.addrs[i+1] {
		return "", false
	}
	if addr >= t.execEnd {
		return "", false
	}
	return t.name(i), true
}

// name decompresses symbol i's block and returns its name.
func (t *symTable) name(i int) string {
	b := i / namesPerBlock
	end := len(t.names)
	if b+1 < len(t.blocks) {
		end = int(t.blocks[b+1])
	}
	block, err := s2.Decode(nil, t.names[t.blocks[b]:end])
	if err != nil {
		return "" // never: the agent compressed it
	}
	for range i % namesPerBlock {
		block = block[bytes.IndexByte(block, 0)+1:]
	}
	return string(block[:bytes.IndexByte(block, 0)])
}

// find returns the address of the symbol called name (once per Go binary:
// runtime.text), scanning every block.
func (t *symTable) find(name string) (uint64, bool) {
	for b := range t.blocks {
		end := len(t.names)
		if b+1 < len(t.blocks) {
			end = int(t.blocks[b+1])
		}
		block, err := s2.Decode(nil, t.names[t.blocks[b]:end])
		if err != nil {
			return 0, false
		}
		for i := b * namesPerBlock; len(block) > 0; i++ {
			n := bytes.IndexByte(block, 0)
			if string(block[:n]) == name {
				return t.addrs[i], true
			}
			block = block[n+1:]
		}
	}
	return 0, false
}

func (t *symTable) len() int            { return len(t.addrs) }
func (t *symTable) addrAt(i int) uint64 { return t.addrs[i] }

// size is what the table holds.
func (t *symTable) size() int64 {
	return int64(len(t.addrs))*symbolBytes + int64(len(t.names)) + int64(len(t.blocks))*4
}
