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
	pcln *pclnTable   // Go 1.18+: read in place
	tab  *gosym.Table // older formats
	size int64
}

// pclntab magics (little endian bytes) for Go 1.2, 1.16, 1.18 and 1.20+.
var pclntabMagics = [][]byte{
	{0xf1, 0xff, 0xff, 0xff}, // 1.20+
	{0xf0, 0xff, 0xff, 0xff}, // 1.18
	{0xfa, 0xff, 0xff, 0xff}, // 1.16
	{0xfb, 0xff, 0xff, 0xff}, // 1.2
}

// maxGoFuncs caps the functions a pclntab may claim; the largest Go
// binaries have a few hundred thousand.
const maxGoFuncs = 2 << 20

// goFuncBytes is what debug/gosym holds per function (its Func and Sym and
// their slices) for the formats before Go 1.18, which it reads.
const goFuncBytes = 240

// loadGoTable finds and parses the Go pclntab, or returns nil. The section
// survives "-ldflags=-s -w"; when section headers are gone too, the table is
// found by its magic in the read-only segments. What it holds is charged
// (grow) before it is read: the table's bytes, then the functions its
// header claims, checked against the table's size first.
func loadGoTable(f *elf.File, r io.ReaderAt, loads []loadSeg, syms *symTable, isGo bool, grow func(int64) error) (*goTable, error) {
	if f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian {
		return nil, nil // only little-endian 64-bit targets are profiled
	}
	pr := ptrReader{order: f.ByteOrder, ptrSize: 8}
	var off, n, pclnAddr uint64
	if sec := f.Section(".gopclntab"); sec != nil && sec.Type != elf.SHT_NOBITS {
		off, n, pclnAddr = sec.Offset, sec.Size, sec.Addr // held to the file and its cap by elfcheck
	} else if isGo || len(f.Sections) == 0 {
		var err error
		if off, n, pclnAddr, err = scanForPclntab(r, loads, pr); err != nil {
			return nil, err
		}
	}
	if n == 0 {
		return nil, nil
	}
	if n > maxPclntabBytes {
		return nil, tooLarge("pclntab of %d bytes", n)
	}
	var hdr [8 + 8*8]byte
	if n < uint64(len(hdr)) {
		return nil, nil
	}
	at := int64(off) // #nosec G115 -- off+n lies inside the file (elfcheck), whose size is an int64
	if _, err := r.ReadAt(hdr[:], at); err != nil {
		return nil, err
	}
	nfunc := pr.word(hdr[8:])
	if !plausibleHeader(hdr[:], n, pr) {
		if nfunc > maxGoFuncs || nfunc*8 > n {
			return nil, tooLarge("pclntab of %d bytes claims %d functions", n, nfunc)
		}
		return nil, nil
	}
	size := int64(n) // #nosec G115 -- n <= maxPclntabBytes
	if err := grow(size); err != nil {
		return nil, err
	}
	data := make([]byte, n)
	if _, err := r.ReadAt(data, at); err != nil {
		return nil, err
	}
	text, ok, err := goTextStart(f, r, loads, syms, pr, data, pclnAddr)
	if err != nil || !ok {
		return nil, err
	}
	if _, inPlace := newPclnTable(data, text); !inPlace {
		if err := grow(int64(nfunc) * goFuncBytes); err != nil { // #nosec G115 -- nfunc is under maxGoFuncs (plausibleHeader)
			return nil, err
		}
	}
	return parsePclntab(data, text, loads), nil
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
	if t, ok := newPclnTable(data, text); ok {
		if t.nfunc == 0 || !inExec(loads, t.entry(0)) || !inExec(loads, t.entry(t.nfunc)-1) {
			return nil
		}
		return &goTable{pcln: t, size: int64(len(data))}
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil || len(tab.Funcs) == 0 || len(tab.Funcs) > maxGoFuncs {
		return nil
	}
	first, last := tab.Funcs[0], tab.Funcs[len(tab.Funcs)-1]
	if !inExec(loads, first.Entry) || !inExec(loads, last.End-1) {
		return nil
	}
	size := int64(len(data)) + int64(len(tab.Funcs))*goFuncBytes
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
	return len(d) >= 8+8*8 && plausibleHeader(d[:8+8*8], uint64(len(d)), pr)
}

// plausibleHeader checks a pclntab header hdr (its first 72 bytes) for a
// table of n bytes: a known magic, sane quantum and pointer size, a
// function count the table can hold (each function has at least an 8-byte
// functab entry) and under the cap, and sub-table offsets inside it.
func plausibleHeader(d []byte, n uint64, pr ptrReader) bool {
	if d[4] != 0 || d[5] != 0 || (d[6] != 1 && d[6] != 2 && d[6] != 4) || d[7] != 8 {
		return false
	}
	known := false
	for _, m := range pclntabMagics {
		known = known || bytes.Equal(d[:4], m)
	}
	if !known {
		return false
	}
	nfunc := pr.word(d[8:])
	if nfunc == 0 || nfunc > maxGoFuncs || nfunc*8 > n {
		return false
	}
	if bytes.Equal(d[:4], pclntabMagics[0]) || bytes.Equal(d[:4], pclntabMagics[1]) {
		// Words 3..7 are offsets of the sub-tables; all must be inside.
		for w := 3; w <= 7; w++ {
			if off := pr.word(d[8+w*8:]); off == 0 || off >= n {
				return false
			}
		}
	}
	return true
}

// scanChunk is how much of a segment is read at a time when scanning it.
const scanChunk = 1 << 20

// scanSegment calls fn with the segment's bytes step at a time, each chunk
// starting at its offset pos in the segment and running overlap bytes into
// the next, so that a record of up to overlap bytes starting in the chunk
// (at an offset below step) is whole in it. fn returns false to stop.
func scanSegment(r io.ReaderAt, s loadSeg, step uint64, overlap int, fn func(chunk []byte, pos uint64) bool) error {
	if s.filesz == 0 {
		return nil
	}
	buf := make([]byte, min(s.filesz, step+uint64(overlap))) // #nosec G115 -- overlap is a non-negative constant of the callers
	for pos := uint64(0); pos < s.filesz; pos += step {
		n := min(uint64(len(buf)), s.filesz-pos)
		at := int64(s.off + pos) // #nosec G115 -- pos < filesz and the segment lies inside the file (elfcheck)
		if _, err := r.ReadAt(buf[:n], at); err != nil {
			return err
		}
		if !fn(buf[:n], pos) {
			return nil
		}
	}
	return nil
}

// scanForPclntab searches non-executable segments for a pclntab header,
// and returns where the table is: from the header to the end of its
// segment.
func scanForPclntab(r io.ReaderAt, loads []loadSeg, pr ptrReader) (off, n, vaddr uint64, err error) {
	const hdrLen = 8 + 8*8
	for _, s := range loads {
		if s.exec {
			continue
		}
		found := false
		err := scanSegment(r, s, scanChunk, hdrLen, func(chunk []byte, pos uint64) bool {
			for i := 0; i+hdrLen <= len(chunk) && i < scanChunk; i += 8 {
				// Segments and the table are 8-aligned in the file.
				ui := uint64(i) // #nosec G115 -- i is a non-negative index into chunk
				if (pos+ui)%8 != 0 || !plausibleHeader(chunk[i:i+hdrLen], s.filesz-pos-ui, pr) {
					continue
				}
				at := pos + uint64(i)
				off, n, vaddr, found = s.off+at, s.filesz-at, s.vaddr+at, true
				return false
			}
			return true
		})
		if err != nil {
			return 0, 0, 0, err
		}
		if found {
			return off, n, vaddr, nil
		}
	}
	return 0, 0, 0, nil
}

// goTextStart finds runtime.text, the base that pclntab entry offsets are
// relative to (Go 1.18+). The header field for it is zero on disk, so: the
// runtime.text symbol if present, else the moduledata that points at the
// pclntab (direct pointer, or a RELATIVE relocation in PIE), else .text.
func goTextStart(f *elf.File, r io.ReaderAt, loads []loadSeg, syms *symTable, pr ptrReader, pcln []byte, pclnAddr uint64) (uint64, bool, error) {
	if addr, ok := syms.find("runtime.text"); ok {
		return addr, true, nil
	}
	funcnameAddr := pclnAddr + pr.word(pcln[8+3*8:])
	text, ok, err := moduledataText(f, r, loads, pr, pclnAddr, funcnameAddr)
	if err != nil || ok {
		return text, ok, err
	}
	if sec := f.Section(".text"); sec != nil {
		return sec.Addr, true, nil
	}
	return 0, false, nil
}

// Offsets in runtime.moduledata (stable since Go 1.16): pcHeader pointer,
// then funcnametab; text is the 22nd word (after six slices, findfunctab,
// minpc and maxpc).
const (
	mdFuncnameWord = 1
	mdTextWord     = 22
)

func moduledataText(f *elf.File, r io.ReaderAt, loads []loadSeg, pr ptrReader, pclnAddr, funcnameAddr uint64) (uint64, bool, error) {
	// Non-PIE: the pointers are stored directly in a data segment.
	const mdLen = (mdTextWord + 1) * 8
	for _, s := range loads {
		if s.exec {
			continue
		}
		var text uint64
		err := scanSegment(r, s, scanChunk, mdLen, func(seg []byte, _ uint64) bool {
			for off := 0; off+mdLen <= len(seg) && off < scanChunk; off += 8 {
				if pr.word(seg[off:]) != pclnAddr || pr.word(seg[off+mdFuncnameWord*8:]) != funcnameAddr {
					continue
				}
				if text = pr.word(seg[off+mdTextWord*8:]); text != 0 {
					return false
				}
			}
			return true
		})
		if err != nil {
			return 0, false, err
		}
		if text != 0 {
			return text, true, nil
		}
	}
	// PIE: the words are zero on disk and filled from RELATIVE relocations.
	return relocatedText(f, r, loads, pclnAddr, funcnameAddr)
}

const maxRelocBytes = 16 << 20

// relocatedText finds, among the R_*_RELATIVE entries found through
// PT_DYNAMIC (section headers may be absent), a moduledata whose pcHeader
// and funcnametab words are relocated to the pclntab, and returns the
// address its text word is relocated to. The relocations are streamed
// twice rather than held: first for the candidates, then for their words.
func relocatedText(f *elf.File, r io.ReaderAt, loads []loadSeg, pclnAddr, funcnameAddr uint64) (uint64, bool, error) {
	var rela, relasz uint64
	for _, p := range f.Progs {
		if p.Type != elf.PT_DYNAMIC || p.Filesz > 1<<20 {
			continue
		}
		d := make([]byte, p.Filesz)
		if _, err := p.ReadAt(d, 0); err != nil {
			return 0, false, nil
		}
		for ; len(d) >= 16; d = d[16:] {
			tag := elf.DynTag(f.ByteOrder.Uint64(d)) // #nosec G115 -- a tag that wraps matches no case below
			switch tag {
			case elf.DT_RELA:
				rela = f.ByteOrder.Uint64(d[8:])
			case elf.DT_RELASZ:
				relasz = f.ByteOrder.Uint64(d[8:])
			}
		}
	}
	if rela == 0 || relasz == 0 || relasz > maxRelocBytes || relasz > maxFileSize(loads) {
		return 0, false, nil
	}
	var seg loadSeg
	found := false
	for _, s := range loads {
		if rela >= s.vaddr && rela-s.vaddr < s.filesz && relasz <= s.filesz-(rela-s.vaddr) {
			seg, found = loadSeg{off: rela - s.vaddr + s.off, filesz: relasz}, true
			break
		}
	}
	if !found {
		return 0, false, nil
	}
	relative := func(typ uint32) bool {
		return (f.Machine == elf.EM_X86_64 && typ == uint32(elf.R_X86_64_RELATIVE)) ||
			(f.Machine == elf.EM_AARCH64 && typ == uint32(elf.R_AARCH64_RELATIVE))
	}
	each := func(fn func(off, addend uint64)) error {
		// A whole number of 24-byte entries per chunk.
		return scanSegment(r, seg, scanChunk/24*24, 0, func(buf []byte, _ uint64) bool {
			for ; len(buf) >= 24; buf = buf[24:] {
				typ := uint32(f.ByteOrder.Uint64(buf[8:])) // #nosec G115 -- ELF64_R_TYPE: the type is r_info's low 32 bits
				if relative(typ) {
					fn(f.ByteOrder.Uint64(buf), f.ByteOrder.Uint64(buf[16:]))
				}
			}
			return true
		})
	}
	cands := map[uint64]bool{}
	if err := each(func(off, addend uint64) {
		if addend == pclnAddr && len(cands) < 64 {
			cands[off] = true
		}
	}); err != nil || len(cands) == 0 {
		return 0, false, err
	}
	words := map[uint64]uint64{}
	if err := each(func(off, addend uint64) {
		if cands[off-mdFuncnameWord*8] || cands[off-mdTextWord*8] {
			words[off] = addend
		}
	}); err != nil {
		return 0, false, err
	}
	for off := range cands {
		if words[off+mdFuncnameWord*8] == funcnameAddr {
			if text, ok := words[off+mdTextWord*8]; ok {
				return text, true, nil
			}
		}
	}
	return 0, false, nil
}

// lookup returns the Go function, file and line for vaddr, or nil.
func (g *goTable) lookup(vaddr uint64) (out []resolved) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	if g.pcln != nil {
		fn, file, line, ok := g.pcln.lookup(vaddr)
		if !ok {
			return nil
		}
		return []resolved{{function: fn, file: file, line: line}}
	}
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
