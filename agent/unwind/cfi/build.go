// Package cfi builds unwind tables from an ELF file's call frame
// information (.eh_frame, or .debug_frame where a file has one), for the
// BPF unwinder in agent/unwind.
//
// A table is a sorted list of 8-byte rows, one per change of rule: from a
// row's pc to the next row's pc, the canonical frame address (CFA) is rsp
// or rbp plus an offset, or one of a few special kinds (a PLT entry, a
// signal trampoline, "use the frame pointer", the end of the stack, or a
// rule the unwinder does not implement), and the caller's rbp is unchanged
// or saved at an offset. Only what the unwinder uses is kept: the CFA, the
// return address (which must be at CFA-8 on x86-64) and rbp. Adjacent rows
// with the same rule are merged. DWARF expressions are recognised by
// pattern for the cases compilers and linkers emit (ld's .plt entries,
// gcc's stack-realignment prologues, glibc's __restore_rt), never
// evaluated.
//
// The input is whatever a job mapped, so nothing in it is trusted: the
// headers pass agent/elfcheck first, every length and count is checked
// against the section, the file's real size and hard caps (Limits), time
// is linear in the section sizes (a CIE's initial instructions run once,
// not once per FDE; a first pass finds the FDEs, a second runs the
// programs of those kept straight into the merged rows), and a panic in
// the ELF reader becomes an error. A
// read error (a job's read allowance used up) fails the build, wrapped:
// no table is built from part of a section. A malformed entry loses that
// entry; a malformed program keeps the rows before the error and marks
// the rest of its function unsupported.
//
// x86-64 only for now. arm64 differs in the register numbers (sp 31, x29,
// x30), in the return address (the link register at the leaf, then saved
// at CFA-8 or CFA-16 with x29 at the slot below), in the initial CFA
// (sp+0) and in DW_CFA_AARCH64_negate_ra_state (pointer authentication:
// the unwinder strips the PAC bits); Row has room for the RA offset in
// place of the PLT threshold.
package cfi

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/slurmscope/slurmscope/agent/elfcheck"
)

// Limits bound what one file may cost. Zero fields take the defaults.
type Limits struct {
	MaxFileBytes    int64  // files larger than this are not read (default 4 GiB)
	MaxSectionBytes int64  // bytes of one .eh_frame or .debug_frame (default 256 MiB)
	MaxFDEs         int    // default 4M
	MaxCIEs         int    // distinct CIEs (default 64K)
	MaxRows         int    // rows before merging (default 16M: 128 MiB)
	MaxFDEBytes     uint64 // the longest function described (default 256 MiB)
}

// DefaultLimits are the caps used where a Limits field is zero.
var DefaultLimits = Limits{
	MaxFileBytes:    4 << 30,
	MaxSectionBytes: 256 << 20,
	MaxFDEs:         4 << 20,
	MaxCIEs:         64 << 10,
	MaxRows:         16 << 20,
	MaxFDEBytes:     256 << 20,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxFileBytes > 0 {
		d.MaxFileBytes = l.MaxFileBytes
	}
	if l.MaxSectionBytes > 0 {
		d.MaxSectionBytes = l.MaxSectionBytes
	}
	if l.MaxFDEs > 0 {
		d.MaxFDEs = l.MaxFDEs
	}
	if l.MaxCIEs > 0 {
		d.MaxCIEs = l.MaxCIEs
	}
	if l.MaxRows > 0 {
		d.MaxRows = l.MaxRows
	}
	if l.MaxFDEBytes > 0 {
		d.MaxFDEBytes = l.MaxFDEBytes
	}
	return d
}

// Stats counts what a build found; all of it is per file.
type Stats struct {
	CIEs, FDEs      int // FDEs kept
	DebugFrameFDEs  int // of FDEs, from .debug_frame
	BadEntries      int // CIEs and FDEs that could not be parsed
	BadPrograms     int // FDEs whose instructions failed part way
	DroppedFDEs     int // FDEs outside the executable segments, or too long
	OverlappingFDEs int // FDEs overlapping one already kept
	RowsBeforeMerge int
}

// Table is a file's unwind table.
type Table struct {
	// Base is the ELF virtual address that Row.PC 0 stands for: the lowest
	// executable segment's.
	Base uint64
	// Rows, sorted by PC. A pc before the first row, or at or after the
	// last one (always a gap row), is a gap.
	Rows []Row
	// GapKind is what the unwinder does where no FDE describes a pc: code
	// without CFI is Go code (which keeps frame pointers on amd64), code
	// built without unwind tables (which must keep frame pointers to be
	// unwound at all, as in Chromium), or hand-written assembly. It is
	// KindFramePointer for every file; a frame unwound so is counted
	// apart from table frames, so a wrong guess shows.
	GapKind Kind
	// FramePointer reports that the file has no usable table at all: every
	// pc in it is unwound by frame pointer (Rows is empty).
	FramePointer bool
	// Go reports a Go binary.
	Go bool
	// Segments are the file's executable PT_LOAD segments, for turning a
	// mapping's file offset into the virtual address the rows use.
	Segments []Segment
	Stats    Stats
}

// Segment is an executable PT_LOAD segment.
type Segment struct{ Off, Vaddr, Filesz uint64 }

// Vaddr converts a file offset inside an executable segment into its
// virtual address.
func (t *Table) Vaddr(off uint64) (uint64, bool) {
	for _, s := range t.Segments {
		if off >= s.Off && off-s.Off < s.Filesz {
			return off - s.Off + s.Vaddr, true
		}
	}
	return 0, false
}

// Bytes is the size of the rows, for memory budgets.
func (t *Table) Bytes() int64 { return int64(len(t.Rows)) * 8 }

// Errors for files the builder does not handle.
var (
	ErrNotSupported = errors.New("unsupported ELF file")
	ErrTooLarge     = errors.New("unwind information exceeds a limit")
)

// execSeg is an executable PT_LOAD segment.
type execSeg struct{ vaddr, end, off, filesz uint64 }

// builder accumulates the FDEs of one file, then its rows.
type builder struct {
	lim     Limits
	segs    []execSeg
	base    uint64
	fdes    []fde
	cies    []*cie     // every section's, indexed by fde.cie
	parsers [2]*parser // by sectionKind: the sections the FDEs' programs lie in
	stats   Stats
	err     error
}

func (b *builder) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// inExec reports whether [begin, end) lies inside one executable segment.
func (b *builder) inExec(begin, end uint64) bool {
	for _, s := range b.segs {
		if begin >= s.vaddr && end <= s.end {
			return true
		}
	}
	return false
}

// Build reads the unwind information of the ELF file r of the given size.
// size must be the real size of the file (from fstat), not one the file
// claims. It fails only when the file is unusable as a whole; problems in
// single entries are counted in Table.Stats.
//
// A panic anywhere in it (the standard library's ELF reader has had
// them on hostile input) becomes an error; the fuzz targets call build,
// which does not recover, so that a panic of ours is found, not hidden.
func Build(r io.ReaderAt, size int64, lim Limits) (t *Table, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("%w: malformed ELF: %v", ErrNotSupported, p)
		}
	}()
	return build(r, size, lim)
}

// elfReader is the table builder as a reader of job files: it reads the
// frame tables, and only looks for the sections that mark a Go binary.
var elfReader = elfcheck.NewReader("unwind")

// openELF checks and parses the headers (elfcheck, which recovers the
// standard library's panics: they are not ours to fix).
func openELF(r io.ReaderAt, size int64, lim Limits) (*elf.File, error) {
	f, err := elfReader.Open(r, size, elfcheck.Limits{
		Frames:   lim.MaxSectionBytes,
		Symbols:  elfcheck.Unread,
		Strings:  elfcheck.Unread,
		Versions: elfcheck.Unread,
		Dynamic:  elfcheck.Unread,
		Pclntab:  elfcheck.Unread,
	})
	switch {
	case errors.Is(err, elfcheck.ErrTooLarge):
		return nil, fmt.Errorf("%w: %w", ErrTooLarge, err)
	case err != nil:
		// A read error (a job's allowance used up) stays visible.
		return nil, fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return f, nil
}

func build(r io.ReaderAt, size int64, lim Limits) (t *Table, err error) {
	lim = lim.withDefaults()
	if size <= 0 || size > lim.MaxFileBytes {
		return nil, fmt.Errorf("%w: file of %d bytes", ErrTooLarge, size)
	}
	sr := io.NewSectionReader(r, 0, size)
	f, err := openELF(sr, size, lim)
	if err != nil {
		return nil, err
	}
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB || f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%w: %s %s %s", ErrNotSupported, f.Class, f.Data, f.Machine)
	}
	b := &builder{lim: lim}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 || p.Filesz == 0 {
			continue
		}
		if p.Off > uint64(size) || p.Filesz > uint64(size)-p.Off || p.Vaddr+p.Filesz < p.Vaddr {
			return nil, fmt.Errorf("%w: executable segment beyond the file", ErrNotSupported)
		}
		b.segs = append(b.segs, execSeg{vaddr: p.Vaddr, end: p.Vaddr + p.Filesz, off: p.Off, filesz: p.Filesz})
	}
	if len(b.segs) == 0 || len(b.segs) > 64 {
		return nil, fmt.Errorf("%w: %d executable segments", ErrNotSupported, len(b.segs))
	}
	b.base = b.segs[0].vaddr
	top := b.segs[0].end
	for _, s := range b.segs {
		b.base, top = min(b.base, s.vaddr), max(top, s.end)
	}
	if top-b.base > 1<<32-1 {
		return nil, fmt.Errorf("%w: executable span of %d bytes", ErrTooLarge, top-b.base)
	}
	t = &Table{Base: b.base, GapKind: KindFramePointer}
	for _, s := range b.segs {
		t.Segments = append(t.Segments, Segment{Off: s.off, Vaddr: s.vaddr, Filesz: s.filesz})
	}
	for _, name := range []string{".go.buildinfo", ".gopclntab", ".note.go.buildid"} {
		if f.Section(name) != nil {
			t.Go = true
		}
	}

	if sec := f.Section(".eh_frame"); sec != nil && sec.Type != elf.SHT_NOBITS {
		data, err := readSection(sec, lim)
		if err != nil {
			return nil, err
		}
		b.parse(ehFrame, data, sec.Addr)
	} else if data, addr, ok := ehFrameFromHeader(f, sr, size, b.segs, lim); ok {
		b.parse(ehFrame, data, addr)
	}
	if sec := f.Section(".debug_frame"); sec != nil && sec.Type != elf.SHT_NOBITS {
		data, err := readSection(sec, lim)
		if err != nil {
			return nil, err
		}
		b.parse(debugFrame, data, 0)
	}
	if b.err == nil {
		t.Rows = b.finish(t.GapKind)
	}
	if b.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTooLarge, b.err)
	}
	t.Stats = b.stats
	if len(t.Rows) == 0 {
		t.FramePointer = true
	}
	return t, nil
}

func (b *builder) parse(kind sectionKind, data []byte, addr uint64) {
	if uint64(len(data)) > math.MaxUint32 {
		b.fail(errTooLarge) // an FDE records its instructions' offset in 32 bits
		return
	}
	p := &parser{b: b, kind: kind, data: data, secAddr: addr, cies: map[uint64]*cie{}}
	b.parsers[kind] = p
	// An FDE record takes about 45 bytes (libtorch_cpu; C code more):
	// room for the section's FDEs at once, rather than growing by appends.
	b.fdes = slices.Grow(b.fdes, min(len(data)/40, b.lim.MaxFDEs-len(b.fdes)))
	p.walk()
}

// readSection reads a frame section's records (decompressed for
// SHF_COMPRESSED), within the cap; elfcheck held its extent to the file
// and its claimed size to the cap already. An uncompressed one is read up
// to its first zero length only, where the parser stops.
func readSection(sec *elf.Section, lim Limits) ([]byte, error) {
	if sec.Flags&elf.SHF_COMPRESSED == 0 && !strings.HasPrefix(sec.Name, ".zdebug") {
		data, err := readRecords(sec, 0, min(sec.FileSize, uint64(lim.MaxSectionBytes))) // #nosec G115 -- withDefaults makes it positive
		if err != nil {
			return nil, fmt.Errorf("section %s: %w", sec.Name, err)
		}
		return data, nil
	}
	data, err := elfcheck.Data(sec, lim.MaxSectionBytes)
	if errors.Is(err, elfcheck.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return data, err
}

// ehFrameFromHeader finds .eh_frame through PT_GNU_EH_FRAME in a file
// without section headers: .eh_frame_hdr points at it, and it runs to its
// zero terminator, within the segment that holds it.
func ehFrameFromHeader(f *elf.File, r io.ReaderAt, size int64, _ []execSeg, lim Limits) ([]byte, uint64, bool) {
	var hdr *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_EH_FRAME {
			hdr = p
		}
	}
	fsize := uint64(size) // #nosec G115 -- build checked 0 < size
	if hdr == nil || hdr.Filesz < 8 || hdr.Off > fsize || hdr.Filesz > fsize-hdr.Off {
		return nil, 0, false
	}
	var h [16]byte
	n := min(int(hdr.Filesz), len(h)) // #nosec G115 -- Filesz <= size, an int64
	hdrOff := int64(hdr.Off)          // #nosec G115 -- Off <= size, an int64
	if _, err := r.ReadAt(h[:n], hdrOff); err != nil {
		return nil, 0, false
	}
	if h[0] != 1 {
		return nil, 0, false
	}
	rd := &reader{b: h[4:n], off: 4}
	addr, err := rd.pointer(h[1], hdr.Vaddr, hdr.Vaddr)
	if err != nil {
		return nil, 0, false
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr-p.Vaddr >= p.Filesz {
			continue
		}
		off := p.Off + (addr - p.Vaddr)
		end := p.Off + p.Filesz
		if off > fsize || end > fsize || end < off {
			return nil, 0, false
		}
		length := min(end-off, uint64(lim.MaxSectionBytes)) // #nosec G115 -- withDefaults makes it positive
		data, err := readRecords(r, off, length)
		if err != nil {
			return nil, 0, false
		}
		return data, addr, true
	}
	return nil, 0, false
}

// recordChunk is how much readRecords reads at a time; maxRecordBytes
// the longest record it follows (real ones are at most a few KiB: a
// longer length is a lie, and nothing after it can be trusted).
const (
	recordChunk    = 1 << 20
	maxRecordBytes = 1 << 20
)

// readRecords reads the call frame records at off, up to the first zero
// length (.eh_frame's terminator, and where the parser stops in either
// kind) and at most n bytes. Only the records' lengths say where that is,
// so it reads a chunk at a time and follows them: a sparse file's holes
// (zeros: a terminator at once) cost one chunk, not the size claimed.
func readRecords(r io.ReaderAt, off, n uint64) ([]byte, error) {
	var data []byte
	var rerr error
	have := func(upto uint64) bool {
		for uint64(len(data)) < min(upto, n) {
			// Small first: a file of no records costs a page or so.
			c := int(min(max(uint64(len(data)), 64<<10), recordChunk, n-uint64(len(data)))) // #nosec G115 -- at most recordChunk
			if cap(data)-len(data) < c {
				// Doubling, up to the size claimed: appends grow a large
				// slice by a quarter at a time, allocating five times
				// libtorch_cpu's 10 MiB of records to read them.
				grown := make([]byte, len(data), min(max(2*uint64(cap(data)), uint64(len(data)+c)), n)) // #nosec G115 -- lengths and capacities are never negative; n is at most MaxSectionBytes
				copy(grown, data)
				data = grown
			}
			// Inside the file: the caller checked off+n.
			at := int64(off + uint64(len(data))) // #nosec G115 -- inside the file, whose size is an int64
			got, err := r.ReadAt(data[len(data):len(data)+c], at)
			data = data[:len(data)+got]
			if err != nil && !errors.Is(err, io.EOF) {
				rerr = err
				return false
			}
			if got == 0 {
				return false
			}
		}
		return uint64(len(data)) >= upto
	}
	var pos uint64
	for have(pos + 4) {
		length := uint64(binary.LittleEndian.Uint32(data[pos:]))
		next := pos + 4 + length
		if length == 0xffffffff {
			if !have(pos + 12) {
				break
			}
			length = binary.LittleEndian.Uint64(data[pos+4:])
			next = pos + 12 + length
			if next < pos {
				break
			}
		}
		if length == 0 {
			return data[:pos+4], nil
		}
		if length > maxRecordBytes || next > n {
			break
		}
		pos = next
	}
	if rerr != nil {
		// A read refused (a job's allowance) or failed: no partial table.
		return nil, rerr
	}
	// No terminator within n: the records read so far (the parser drops a
	// truncated last one).
	return data[:min(uint64(len(data)), n)], nil
}

// finish sorts the FDEs, drops overlaps (.eh_frame wins over .debug_frame,
// the earlier FDE over a later one), runs the programs of those it keeps,
// inserts gap rows between functions and after the last, and merges
// adjacent rows with the same rule. It fails (b.err) past Limits.MaxRows.
func (b *builder) finish(gap Kind) []Row {
	// In place: .eh_frame's FDEs come first (parsed first), then
	// .debug_frame's; the sort and the sweep reuse the slice.
	eh, dbg := b.fdes, b.fdes[:0]
	if i := slices.IndexFunc(b.fdes, func(f fde) bool { return f.fromDebug }); i >= 0 {
		eh, dbg = b.fdes[:i:i], b.fdes[i:]
		if slices.ContainsFunc(dbg, func(f fde) bool { return !f.fromDebug }) {
			eh, dbg = nil, nil // never (build parses .eh_frame first): split by copying
			for _, f := range b.fdes {
				if f.fromDebug {
					dbg = append(dbg, f)
				} else {
					eh = append(eh, f)
				}
			}
		}
	}
	b.fdes = nil
	byBegin := func(a, b fde) int {
		switch {
		case a.pc < b.pc:
			return -1
		case a.pc > b.pc:
			return 1
		}
		return 0
	}
	slices.SortStableFunc(eh, byBegin)
	slices.SortStableFunc(dbg, byBegin)
	kept := sweep(eh, &b.stats)
	if len(dbg) > 0 {
		var extra []fde
		for _, f := range sweep(dbg, &b.stats) {
			// The first kept .eh_frame FDE ending after f begins is the only
			// one that can overlap it.
			i := sort.Search(len(kept), func(i int) bool { return kept[i].end() > f.begin() })
			if i < len(kept) && kept[i].begin() < f.end() {
				b.stats.OverlappingFDEs++
				continue
			}
			extra = append(extra, f)
			b.stats.DebugFrameFDEs++
		}
		kept = append(kept, extra...)
		slices.SortStableFunc(kept, byBegin)
	}
	b.stats.FDEs = len(kept)
	_, gapFlags, _ := pack(Rule{Kind: gap})
	// Six rows an FDE: the C and C++ libraries of a Debian system merge to
	// 5.5 (p10) to 11.5 (p90), libtorch_cpu 5.5; growing by appends from
	// nothing allocates about five times the final table.
	out := make([]Row, 0, 6*len(kept)+1)
	push := func(r Row) {
		if n := len(out); n > 0 {
			last := out[n-1]
			if last.CFA == r.CFA && last.Flags == r.Flags && last.RBP == r.RBP {
				return
			}
			if last.PC == r.PC {
				out[n-1] = r
				return
			}
		}
		out = append(out, r)
	}
	run := &runner{b: b}
	var prevEnd uint64
	for i := range kept {
		f := &kept[i]
		// Padding between functions (under 16 bytes: alignment) is never
		// executed: it keeps the previous rule instead of costing a row.
		if i > 0 && prevEnd < f.begin() && f.begin()-prevEnd >= minGap {
			push(Row{PC: uint32(prevEnd), Flags: gapFlags}) // #nosec G115 -- an FDE end lies in an executable segment, under 4 GiB from base (build)
		}
		rows := run.run(f)
		b.stats.RowsBeforeMerge += len(rows)
		if b.stats.RowsBeforeMerge > b.lim.MaxRows {
			b.fail(errTooMany)
			return nil
		}
		for _, r := range rows {
			push(r)
		}
		prevEnd = f.end()
	}
	if len(kept) > 0 {
		push(Row{PC: uint32(prevEnd), Flags: gapFlags}) // #nosec G115 -- an FDE end lies in an executable segment, under 4 GiB from base (build)
	}
	return slices.Clip(out)
}

// minGap is the shortest stretch between two FDEs that gets a gap row.
const minGap = 16

// sweep keeps the FDEs (sorted by begin) that do not overlap an earlier
// kept one.
func sweep(fdes []fde, st *Stats) []fde {
	kept := fdes[:0] // in place: it writes no further than it has read
	var end uint64
	for i, f := range fdes {
		if i > 0 && len(kept) > 0 && f.begin() < end {
			st.OverlappingFDEs++
			continue
		}
		kept = append(kept, f)
		end = f.end()
	}
	return kept
}

// Lookup returns the rule at an ELF virtual address, as the BPF unwinder
// finds it.
func (t *Table) Lookup(vaddr uint64) Rule {
	gap := Rule{Kind: t.GapKind}
	if t.FramePointer {
		return Rule{Kind: KindFramePointer}
	}
	if vaddr < t.Base || vaddr-t.Base > 1<<32-1 {
		return gap
	}
	pc := uint32(vaddr - t.Base) // #nosec G115 -- checked < 4 GiB just above
	i := sort.Search(len(t.Rows), func(i int) bool { return t.Rows[i].PC > pc })
	if i == 0 {
		return gap
	}
	return t.Rows[i-1].Rule()
}
