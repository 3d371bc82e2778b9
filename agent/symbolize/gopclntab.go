package symbolize

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"io"
)

// goTable resolves addresses through a Go pclntab.
type goTable struct {
	tab  *gosym.Table
	size int64
}

// pclntab magics (little endian bytes) for Go 1.2, 1.16, 1.18 and 1.20+.
var pclntabMagics = [][]byte{
	{0xf1, 0xff, 0xff, 0xff}, // 1.20+
	{0xf0, 0xff, 0xff, 0xff}, // 1.18
	{0xfa, 0xff, 0xff, 0xff}, // 1.16
	{0xfb, 0xff, 0xff, 0xff}, // 1.2
}

const maxGoFuncs = 8 << 20

// loadGoTable finds and parses the Go pclntab, or returns nil. The section
// survives "-ldflags=-s -w"; when section headers are gone too, the table is
// found by its magic in the read-only segments.
func loadGoTable(f *elf.File, r io.ReaderAt, loads []loadSeg, syms *symTable, isGo bool) *goTable {
	if f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian {
		return nil // only little-endian 64-bit targets are profiled
	}
	pr := ptrReader{order: f.ByteOrder, ptrSize: 8}
	var data []byte
	var pclnAddr uint64
	if sec := f.Section(".gopclntab"); sec != nil && sec.Type != elf.SHT_NOBITS {
		d, err := sec.Data()
		if err != nil {
			return nil
		}
		data, pclnAddr = d, sec.Addr
	} else if isGo || len(f.Sections) == 0 {
		data, pclnAddr = scanForPclntab(r, loads, pr)
	}
	if data == nil {
		return nil
	}
	text, ok := goTextStart(f, r, loads, syms, pr, data, pclnAddr)
	if !ok {
		return nil
	}
	return parsePclntab(data, text, loads)
}

// parsePclntab builds the table and checks that it describes code that lies
// in this file's executable segments; a wrong text start or a false magic
// match fails that check.
func parsePclntab(data []byte, text uint64, loads []loadSeg) (gt *goTable) {
	defer func() {
		if recover() != nil {
			gt = nil
		}
	}()
	if !plausiblePclntab(data, ptrReader{order: binary.LittleEndian, ptrSize: 8}) {
		return nil
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil || len(tab.Funcs) == 0 || len(tab.Funcs) > maxGoFuncs {
		return nil
	}
	first, last := tab.Funcs[0], tab.Funcs[len(tab.Funcs)-1]
	if !inExec(loads, first.Entry) || !inExec(loads, last.End-1) {
		return nil
	}
	size := int64(len(data)) + int64(len(tab.Funcs))*160
	return &goTable{tab: tab, size: size}
}

func inExec(loads []loadSeg, vaddr uint64) bool {
	for _, s := range loads {
		if s.exec && vaddr >= s.vaddr && vaddr-s.vaddr < s.memsz {
			return true
		}
	}
	return false
}

// plausiblePclntab checks the header fields that gosym trusts blindly.
func plausiblePclntab(d []byte, pr ptrReader) bool {
	if len(d) < 8+8*8 || d[4] != 0 || d[5] != 0 || (d[6] != 1 && d[6] != 2 && d[6] != 4) || d[7] != 8 {
		return false
	}
	nfunc := pr.word(d[8:])
	if nfunc == 0 || nfunc > maxGoFuncs {
		return false
	}
	if bytes.Equal(d[:4], pclntabMagics[0]) || bytes.Equal(d[:4], pclntabMagics[1]) {
		// Words 3..7 are offsets of the sub-tables; all must be inside.
		for w := 3; w <= 7; w++ {
			if off := pr.word(d[8+w*8:]); off == 0 || off >= uint64(len(d)) {
				return false
			}
		}
	}
	return true
}

// scanForPclntab searches non-executable segments for a pclntab header.
func scanForPclntab(r io.ReaderAt, loads []loadSeg, pr ptrReader) ([]byte, uint64) {
	for _, s := range loads {
		if s.exec {
			continue
		}
		seg, err := readSegment(r, s)
		if err != nil {
			continue
		}
		for _, magic := range pclntabMagics {
			for from := 0; from < len(seg); {
				i := bytes.Index(seg[from:], magic)
				if i < 0 {
					break
				}
				pos := from + i
				from = pos + 1
				if pos%8 != 0 || !plausiblePclntab(seg[pos:], pr) {
					continue
				}
				// Copy so the rest of the segment can be collected.
				return bytes.Clone(seg[pos:]), s.vaddr + uint64(pos)
			}
		}
	}
	return nil, 0
}

// goTextStart finds runtime.text, the base that pclntab entry offsets are
// relative to (Go 1.18+). The header field for it is zero on disk, so: the
// runtime.text symbol if present, else the moduledata that points at the
// pclntab (direct pointer, or a RELATIVE relocation in PIE), else .text.
func goTextStart(f *elf.File, r io.ReaderAt, loads []loadSeg, syms *symTable, pr ptrReader, pcln []byte, pclnAddr uint64) (uint64, bool) {
	for _, s := range syms.syms {
		if s.name == "runtime.text" {
			return s.addr, true
		}
	}
	funcnameAddr := pclnAddr + pr.word(pcln[8+3*8:])
	if text, ok := moduledataText(f, r, loads, pr, pclnAddr, funcnameAddr); ok {
		return text, true
	}
	if sec := f.Section(".text"); sec != nil {
		return sec.Addr, true
	}
	return 0, false
}

// Offsets in runtime.moduledata (stable since Go 1.16): pcHeader pointer,
// then funcnametab; text is the 22nd word (after six slices, findfunctab,
// minpc and maxpc).
const (
	mdFuncnameWord = 1
	mdTextWord     = 22
)

func moduledataText(f *elf.File, r io.ReaderAt, loads []loadSeg, pr ptrReader, pclnAddr, funcnameAddr uint64) (uint64, bool) {
	// Non-PIE: the pointers are stored directly in a data segment.
	for _, s := range loads {
		if s.exec {
			continue
		}
		seg, err := readSegment(r, s)
		if err != nil {
			continue
		}
		for off := 0; off+(mdTextWord+1)*8 <= len(seg); off += 8 {
			if pr.word(seg[off:]) != pclnAddr || pr.word(seg[off+mdFuncnameWord*8:]) != funcnameAddr {
				continue
			}
			if text := pr.word(seg[off+mdTextWord*8:]); text != 0 {
				return text, true
			}
		}
	}
	// PIE: the words are zero on disk and filled from RELATIVE relocations.
	relocs := relativeRelocs(f, r, loads)
	for off, addend := range relocs {
		if addend == pclnAddr && relocs[off+mdFuncnameWord*8] == funcnameAddr {
			if text, ok := relocs[off+mdTextWord*8]; ok {
				return text, true
			}
		}
	}
	return 0, false
}

const maxRelocBytes = 16 << 20

// relativeRelocs returns offset → addend for the R_*_RELATIVE entries found
// through PT_DYNAMIC (section headers may be absent).
func relativeRelocs(f *elf.File, r io.ReaderAt, loads []loadSeg) map[uint64]uint64 {
	var rela, relasz uint64
	for _, p := range f.Progs {
		if p.Type != elf.PT_DYNAMIC || p.Filesz > 1<<20 {
			continue
		}
		d := make([]byte, p.Filesz)
		if _, err := p.ReadAt(d, 0); err != nil {
			return nil
		}
		for ; len(d) >= 16; d = d[16:] {
			switch elf.DynTag(f.ByteOrder.Uint64(d)) {
			case elf.DT_RELA:
				rela = f.ByteOrder.Uint64(d[8:])
			case elf.DT_RELASZ:
				relasz = f.ByteOrder.Uint64(d[8:])
			}
		}
	}
	if rela == 0 || relasz == 0 || relasz > maxRelocBytes || relasz > maxFileSize(loads) {
		return nil
	}
	var fileOff uint64
	found := false
	for _, s := range loads {
		if rela >= s.vaddr && rela-s.vaddr < s.filesz {
			fileOff, found = rela-s.vaddr+s.off, true
			break
		}
	}
	if !found {
		return nil
	}
	buf := make([]byte, relasz)
	if n, _ := r.ReadAt(buf, int64(fileOff)); n < len(buf) {
		return nil
	}
	out := make(map[uint64]uint64, len(buf)/24)
	for ; len(buf) >= 24; buf = buf[24:] {
		typ := uint32(f.ByteOrder.Uint64(buf[8:]))
		if (f.Machine == elf.EM_X86_64 && typ == uint32(elf.R_X86_64_RELATIVE)) ||
			(f.Machine == elf.EM_AARCH64 && typ == uint32(elf.R_AARCH64_RELATIVE)) {
			out[f.ByteOrder.Uint64(buf)] = f.ByteOrder.Uint64(buf[16:])
		}
	}
	return out
}

// lookup returns the Go function, file and line for vaddr, or nil.
func (g *goTable) lookup(vaddr uint64) (out []resolved) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	file, line, fn := g.tab.PCToLine(vaddr)
	if fn == nil {
		return nil
	}
	return []resolved{{function: fn.Name, file: file, line: line}}
}

// maxFileSize is the end of the last segment's file bytes: a lower bound on
// the file size, used to reject table sizes no real file could hold.
func maxFileSize(loads []loadSeg) uint64 {
	var end uint64
	for _, s := range loads {
		end = max(end, s.off+s.filesz)
	}
	return end
}
