package symbolize

import (
	"debug/elf"
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

// loadSymbols merges .symtab and .dynsym. A binary stripped of .symtab still
// has .dynsym for its exported functions.
func loadSymbols(f *elf.File) symTable {
	var t symTable
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr+p.Memsz > t.execEnd {
			t.execEnd = p.Vaddr + p.Memsz
		}
	}
	add := func(syms []elf.Symbol) {
		for _, s := range syms {
			if len(t.syms) >= maxSymbols {
				return
			}
			typ := elf.ST_TYPE(s.Info)
			if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC && typ != elf.STT_NOTYPE {
				continue
			}
			if s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE || s.Value == 0 || s.Name == "" {
				continue
			}
			// Assembler-local labels (.L...) and mapping symbols ($x, $d) are
			// not functions.
			if strings.HasPrefix(s.Name, ".L") || strings.HasPrefix(s.Name, "$") {
				continue
			}
			t.syms = append(t.syms, symbol{addr: s.Value, size: s.Size, name: s.Name})
		}
	}
	if syms, err := f.Symbols(); err == nil {
		add(syms)
	}
	if syms, err := f.DynamicSymbols(); err == nil {
		add(syms)
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
	return t
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
	n := int64(len(t.syms)) * 40
	for _, s := range t.syms {
		n += int64(len(s.name))
	}
	return n
}
