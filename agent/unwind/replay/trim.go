package replay

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Keep says what a trimmed ELF image must still hold.
type Keep struct {
	// Addrs are link-time virtual addresses (a frame's pc, and pc-1 for a
	// return address): the call frame entries and the symbols whose
	// ranges hold one are kept.
	Addrs []uint64
	// Names are symbols kept by name (those the CPython inspector looks
	// up: _PyRuntime, Py_Version, PyCode_Type).
	Names []string
	// Ranges are file byte ranges kept as they are, {offset, length}:
	// what a reader of the file read that is not a symbol table.
	Ranges [][2]uint64
}

// Trim returns an image of the ELF file b of b's size in which only these
// are left, everything else zero:
//
//   - the ELF header, program headers, section headers and their names,
//     notes (the build id), .interp, .dynamic, the symbol version
//     definitions and needs (not the per-symbol versions), and the strings
//     .dynamic names (DT_SONAME, DT_NEEDED);
//   - in .eh_frame and .debug_frame, every CIE, and the FDEs that cover one
//     of k.Addrs, at their places; each run of other FDEs between them
//     becomes one FDE of the run's length, with the first one's CIE
//     pointer and zeros for the rest (a zero-length range at address 0 or
//     at its own place, instructions DW_CFA_nop), so that the section
//     still parses entry by entry and nothing kept moves;
//   - in .symtab and .dynsym, the symbols holding one of k.Addrs or named
//     in k.Names, and their names; other entries are zero (null symbols);
//   - k.Ranges.
//
// What remains is a few kilobytes of a library's unwind and symbol data:
// exactly what unwinding and naming the recorded frames needs.
func Trim(b []byte, k Keep) (*Image, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return nil, errors.New("replay: not a 64-bit little-endian ELF file")
	}
	t := &trimmer{b: b, out: make([]byte, len(b)), addrs: slices.Clone(k.Addrs), names: map[string]bool{}}
	slices.Sort(t.addrs)
	for _, n := range k.Names {
		t.names[n] = true
	}
	le := binary.LittleEndian
	if len(b) < 64 {
		return nil, errors.New("replay: short ELF header")
	}
	t.add(0, uint64(le.Uint16(b[0x34:])))
	t.add(le.Uint64(b[0x20:]), uint64(le.Uint16(b[0x36:]))*uint64(le.Uint16(b[0x38:])))
	t.add(le.Uint64(b[0x28:]), uint64(le.Uint16(b[0x3a:]))*uint64(le.Uint16(b[0x3c:])))
	shstrndx := int(le.Uint16(b[0x3e:]))
	for i, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		if s.Offset > uint64(len(b)) || s.Size > uint64(len(b))-s.Offset {
			return nil, fmt.Errorf("replay: section %s beyond the file", s.Name)
		}
		data := b[s.Offset : s.Offset+s.Size]
		switch {
		case i == shstrndx, s.Type == elf.SHT_NOTE, s.Type == elf.SHT_GNU_VERDEF,
			s.Type == elf.SHT_GNU_VERNEED, s.Name == ".interp":
			t.add(s.Offset, s.Size)
		case s.Type == elf.SHT_DYNAMIC:
			t.add(s.Offset, s.Size)
			if int(s.Link) < len(f.Sections) {
				t.dynamicStrings(data, f.Sections[s.Link])
			}
		case s.Name == ".eh_frame" || s.Name == ".debug_frame":
			if s.Flags&elf.SHF_COMPRESSED != 0 {
				return nil, fmt.Errorf("replay: compressed %s is not trimmed", s.Name)
			}
			if err := t.frames(s, data, s.Name == ".eh_frame"); err != nil {
				return nil, fmt.Errorf("replay: %s: %w", s.Name, err)
			}
		case s.Type == elf.SHT_SYMTAB || s.Type == elf.SHT_DYNSYM:
			if int(s.Link) >= len(f.Sections) {
				return nil, fmt.Errorf("replay: %s links no string table", s.Name)
			}
			t.symbols(s, data, f.Sections[s.Link])
		}
	}
	for _, r := range k.Ranges {
		if r[0] > uint64(len(b)) || r[1] > uint64(len(b))-r[0] {
			return nil, fmt.Errorf("replay: kept range 0x%x+%d beyond the file", r[0], r[1])
		}
		t.add(r[0], r[1])
	}
	chunks, err := t.keep.chunks(0, func(off, n uint64) ([]byte, error) {
		return slices.Clone(t.out[off : off+n]), nil
	})
	if err != nil {
		return nil, err
	}
	return &Image{Size: int64(len(b)), Chunks: chunks}, nil
}

type trimmer struct {
	b     []byte
	out   []byte   // the image: what is kept of b, and patches
	addrs []uint64 // sorted
	names map[string]bool
	keep  ranges
}

// add keeps b[off:off+n] (checked by the caller to lie in b).
func (t *trimmer) add(off, n uint64) {
	copy(t.out[off:off+n], t.b[off:off+n])
	t.keep.add(off, n)
}

// patch writes p at off in the image.
func (t *trimmer) patch(off uint64, p []byte) {
	copy(t.out[off:], p)
	t.keep.add(off, uint64(len(p)))
}

// covers reports whether [lo, lo+n) holds a kept address (n == 0: lo itself).
func (t *trimmer) covers(lo, n uint64) bool {
	i, _ := slices.BinarySearch(t.addrs, lo)
	if i == len(t.addrs) {
		return false
	}
	a := t.addrs[i]
	return a == lo || (n > 0 && a-lo < n)
}

// cstring keeps the NUL-terminated string at off of section s, and
// returns it.
func (t *trimmer) cstring(s *elf.Section, off uint64) string {
	if s.Type == elf.SHT_NOBITS || off >= s.Size || s.Offset+s.Size > uint64(len(t.b)) {
		return ""
	}
	data := t.b[s.Offset+off : s.Offset+s.Size]
	n := bytes.IndexByte(data, 0)
	if n < 0 {
		return ""
	}
	t.add(s.Offset+off, uint64(n)+1)
	return string(data[:n])
}

// dynamicStrings keeps the strings of .dynamic entries that name files.
func (t *trimmer) dynamicStrings(data []byte, str *elf.Section) {
	le := binary.LittleEndian
	for i := 0; i+16 <= len(data); i += 16 {
		switch le.Uint64(data[i:]) {
		case uint64(elf.DT_NEEDED), uint64(elf.DT_SONAME):
			t.cstring(str, le.Uint64(data[i+8:]))
		case uint64(elf.DT_NULL):
			return
		}
	}
}

// symbols keeps the entries of a symbol table that hold a kept address or
// have a kept name.
func (t *trimmer) symbols(s *elf.Section, data []byte, str *elf.Section) {
	le := binary.LittleEndian
	const size = 24 // Elf64_Sym
	for i := size; i+size <= len(data); i += size {
		e := data[i : i+size]
		name, value, n := uint64(le.Uint32(e)), le.Uint64(e[8:]), le.Uint64(e[16:])
		keep := value != 0 && t.covers(value, n)
		if !keep && len(t.names) > 0 && name < str.Size && str.Offset+str.Size <= uint64(len(t.b)) {
			rest := t.b[str.Offset+name : str.Offset+str.Size]
			if j := bytes.IndexByte(rest, 0); j >= 0 && t.names[string(rest[:j])] {
				keep = true
			}
		}
		if keep {
			t.add(s.Offset+uint64(i), size) // #nosec G115 -- i is a non-negative index
			t.cstring(str, name)
		}
	}
}

// frames keeps the CIEs of a call frame section and the FDEs that cover a
// kept address; each run of other FDEs becomes one empty FDE.
func (t *trimmer) frames(s *elf.Section, data []byte, eh bool) error {
	le := binary.LittleEndian
	cies := map[uint64]cieInfo{}
	// run is the first dropped FDE of the current run (its start, and
	// its CIE pointer field), or -1.
	run, runID := int64(-1), uint64(0)
	endRun := func(end uint64) {
		if run < 0 {
			return
		}
		start := uint64(run) // #nosec G115 -- set from a position, never negative
		var hdr [8]byte
		le.PutUint32(hdr[:], uint32(end-start-4)) // #nosec G115 -- within a 32-bit-length section run
		le.PutUint32(hdr[4:], uint32(runID))      // #nosec G115 -- a 32-bit field's own value
		t.patch(s.Offset+start, hdr[:])
		run = -1
	}
	pos := uint64(0)
	for pos+4 <= uint64(len(data)) {
		length := uint64(le.Uint32(data[pos:]))
		hdr := uint64(4)
		if length == 0 {
			endRun(pos)
			t.add(s.Offset+pos, 4) // .eh_frame's terminator
			if eh {
				return nil
			}
			pos += 4
			continue
		}
		if length == 0xffffffff {
			// 64-bit DWARF: kept whole, never trimmed (compilers do not
			// emit it for x86-64 code).
			endRun(pos)
			if pos+12 > uint64(len(data)) {
				return errors.New("truncated 64-bit entry")
			}
			length, hdr = le.Uint64(data[pos+4:]), 12
			if length > uint64(len(data))-pos-hdr {
				return errors.New("entry beyond the section")
			}
			t.add(s.Offset+pos, hdr+length)
			pos += hdr + length
			continue
		}
		if length < 4 || length > uint64(len(data))-pos-hdr {
			return fmt.Errorf("entry at 0x%x beyond the section", pos)
		}
		end := pos + hdr + length
		idPos := pos + hdr
		id := uint64(le.Uint32(data[idPos:]))
		entry := data[idPos+4 : end]
		if (eh && id == 0) || (!eh && id == 0xffffffff) {
			endRun(pos)
			cies[pos] = parseCIE(entry, eh)
			t.add(s.Offset+pos, hdr+length)
			pos = end
			continue
		}
		ciePos := id
		if eh {
			ciePos = idPos - id // relative to the pointer's own place
		}
		c, ok := cies[ciePos]
		keep := !ok || !c.ok // a CIE we could not read: keep the FDE as it is
		if !keep {
			fieldAddr := s.Addr + idPos + 4
			begin, n, ok := c.fdeRange(entry, fieldAddr)
			keep = !ok || t.covers(begin, n)
		}
		switch {
		case keep:
			endRun(pos)
			t.add(s.Offset+pos, hdr+length)
		case run < 0:
			run, runID = int64(pos), id // #nosec G115 -- a section offset, far below 2^63
		}
		pos = end
	}
	endRun(pos)
	return nil
}

// cieInfo is what a CIE says about its FDEs' address fields.
type cieInfo struct {
	ok   bool
	enc  uint8 // DW_EH_PE_* of the FDE addresses (.eh_frame)
	addr int   // address size (.debug_frame)
	eh   bool
}

func parseCIE(b []byte, eh bool) cieInfo {
	r := &leb{b: b}
	version := r.u8()
	aug := r.cstr()
	c := cieInfo{eh: eh, enc: 0x00, addr: 8}
	if strings.Contains(aug, "eh") {
		r.skip(8)
	}
	if !eh && version >= 4 {
		c.addr = int(r.u8())
		r.u8() // segment selector size
	}
	r.uleb() // code alignment
	r.sleb() // data alignment
	if version == 1 {
		r.u8()
	} else {
		r.uleb()
	}
	if strings.HasPrefix(aug, "z") {
		r.uleb()
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.enc = r.u8()
			case 'P':
				penc := r.u8()
				if _, ok := r.pointer(penc, 0); !ok {
					return c
				}
			case 'L':
				r.u8()
			case 'S', 'B':
			default:
				return c // an augmentation we do not know: keep its FDEs
			}
		}
	}
	c.ok = !r.bad
	return c
}

// fdeRange decodes an FDE's initial location and range; fieldAddr is the
// address of the location field (for pc-relative encodings).
func (c cieInfo) fdeRange(b []byte, fieldAddr uint64) (begin, n uint64, ok bool) {
	r := &leb{b: b}
	if !c.eh {
		if c.addr != 8 {
			return 0, 0, false
		}
		begin, n = r.u64(), r.u64()
		return begin, n, !r.bad
	}
	begin, ok = r.pointer(c.enc, fieldAddr)
	if !ok {
		return 0, 0, false
	}
	n, ok = r.pointer(c.enc&0x0f, 0)
	return begin, n, ok && !r.bad
}

// leb reads DWARF data from a bounded slice; a short read sets bad.
type leb struct {
	b   []byte
	pos int
	bad bool
}

func (r *leb) need(n int) bool {
	if r.bad || n > len(r.b)-r.pos {
		r.bad = true
		return false
	}
	return true
}

func (r *leb) skip(n int) {
	if r.need(n) {
		r.pos += n
	}
}

func (r *leb) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	r.pos++
	return r.b[r.pos-1]
}

func (r *leb) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	r.pos += 8
	return binary.LittleEndian.Uint64(r.b[r.pos-8:])
}

func (r *leb) cstr() string {
	i := bytes.IndexByte(r.b[r.pos:], 0)
	if i < 0 {
		r.bad = true
		return ""
	}
	s := string(r.b[r.pos : r.pos+i])
	r.pos += i + 1
	return s
}

func (r *leb) uleb() uint64 {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		c := r.u8()
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 || r.bad {
			return v
		}
	}
	r.bad = true
	return v
}

func (r *leb) sleb() int64 {
	var v int64
	shift := uint(0)
	for shift < 64 {
		c := r.u8()
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 || r.bad {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
	r.bad = true
	return v
}

// pointer decodes a DW_EH_PE_* encoded value; pcrel adds base.
func (r *leb) pointer(enc uint8, base uint64) (uint64, bool) {
	if enc == 0xff {
		return 0, false
	}
	var v uint64
	le := binary.LittleEndian
	switch enc & 0x0f {
	case 0x00, 0x04, 0x0c:
		v = r.u64()
	case 0x01:
		v = r.uleb()
	case 0x09:
		v = uint64(r.sleb()) // #nosec G115 -- the bits of a signed DWARF value
	case 0x02:
		if r.need(2) {
			v = uint64(le.Uint16(r.b[r.pos:]))
			r.pos += 2
		}
	case 0x0a:
		if r.need(2) {
			v = uint64(int64(int16(le.Uint16(r.b[r.pos:])))) // #nosec G115 -- sign extension on purpose
			r.pos += 2
		}
	case 0x03:
		if r.need(4) {
			v = uint64(le.Uint32(r.b[r.pos:]))
			r.pos += 4
		}
	case 0x0b:
		if r.need(4) {
			v = uint64(int64(int32(le.Uint32(r.b[r.pos:])))) // #nosec G115 -- sign extension on purpose
			r.pos += 4
		}
	default:
		return 0, false
	}
	switch enc & 0x70 {
	case 0x00:
	case 0x10:
		v += base
	default:
		return 0, false // data- or text-relative: not in .eh_frame of x86-64 code
	}
	return v, !r.bad
}

// BuildID returns the GNU build id of an ELF file, hex, or "".
func BuildID(r io.ReaderAt) string {
	f, err := elf.NewFile(r)
	if err != nil {
		return ""
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		d, err := s.Data()
		if err != nil {
			continue
		}
		le := binary.LittleEndian
		for len(d) >= 12 {
			nameSz, descSz, typ := int(le.Uint32(d)), int(le.Uint32(d[4:])), le.Uint32(d[8:])
			nameEnd := 12 + (nameSz+3)&^3
			descEnd := nameEnd + (descSz+3)&^3
			if nameSz < 0 || descSz < 0 || descEnd > len(d) || nameEnd > len(d) {
				break
			}
			if typ == 3 && nameSz == 4 && string(d[12:15]) == "GNU" { // NT_GNU_BUILD_ID
				return hex.EncodeToString(d[nameEnd : nameEnd+descSz])
			}
			d = d[descEnd:]
		}
	}
	return ""
}

// Symbols names addresses of one ELF file from its .symtab and .dynsym.
type Symbols struct{ syms []elf.Symbol }

// ReadSymbols reads an ELF file's symbol tables.
func ReadSymbols(r io.ReaderAt) (*Symbols, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	s := &Symbols{}
	if syms, err := f.Symbols(); err == nil {
		s.syms = append(s.syms, syms...)
	}
	if syms, err := f.DynamicSymbols(); err == nil {
		s.syms = append(s.syms, syms...)
	}
	return s, nil
}

// Name returns the symbol whose range holds vaddr: the smallest one, then
// global before weak before local, then the first by name; "" if none.
func (s *Symbols) Name(vaddr uint64) string {
	var best *elf.Symbol
	rank := func(b elf.SymBind) int {
		switch b {
		case elf.STB_GLOBAL:
			return 0
		case elf.STB_WEAK:
			return 1
		}
		return 2
	}
	for i := range s.syms {
		y := &s.syms[i]
		if y.Name == "" || y.Size == 0 || y.Section == elf.SHN_UNDEF || vaddr < y.Value || vaddr-y.Value >= y.Size {
			continue
		}
		switch {
		case best == nil, y.Size < best.Size:
		case y.Size > best.Size:
			continue
		case rank(elf.ST_BIND(y.Info)) < rank(elf.ST_BIND(best.Info)):
		case rank(elf.ST_BIND(y.Info)) > rank(elf.ST_BIND(best.Info)):
			continue
		case y.Name < best.Name:
		default:
			continue
		}
		best = y
	}
	if best == nil {
		return ""
	}
	return best.Name
}
