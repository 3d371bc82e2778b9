package python

// Line-number tables, decoded as CPython's own PyCode_Addr2Line does for
// each version (Objects/codeobject.c; the formats are described in
// Objects/lnotab_notes.txt for 3.9 and 3.10 and InternalDocs/locations.md
// for 3.11+). Every table comes from a process's memory: a decoder never
// reads past the table, and any byte sequence yields some line (or 0, for
// "no line") in time linear in the table's length. A table is decoded once
// per code object into ranges of offsets (lineTable), so that each frame's
// line is a binary search: a table may be 64 KiB, and every sample of a
// deep stack names the same code objects again.

import (
	"math"
	"sort"
)

// Line returns the source line of the instruction at byte offset off of a
// code object whose first line is first and whose table is tab, in format
// f; 0 where the table has no line for it. A negative offset (a frame that
// has not started) is the first line, as in CPython.
func Line(f LineFormat, tab []byte, first int, off int) int {
	lt := decodeLines(f, tab, first)
	return lt.line(off)
}

// lineTable is a decoded line table: the line in force from each start
// offset (ascending) up to the next; -1 for "no line".
type lineTable struct {
	starts []int32
	lines  []int
	first  int
	// bounded: offsets at or past end have no line (3.10+, whose ranges
	// cover the code); otherwise (3.9) the last line holds past the end,
	// and offsets before the first start have the first line.
	bounded bool
	end     int
}

// line is Line of the decoded table.
func (t *lineTable) line(off int) int {
	if off < 0 {
		return t.first
	}
	if t.bounded && off >= t.end {
		return 0
	}
	i := sort.Search(len(t.starts), func(i int) bool { return int(t.starts[i]) > off }) - 1
	switch {
	case i >= 0:
		return max(t.lines[i], 0)
	case t.bounded:
		return 0
	}
	return max(t.first, 0)
}

// size is what the decoded table holds in memory.
func (t *lineTable) size() int64 { return int64(len(t.starts))*12 + 64 }

// add records that line holds from start on. A start equal to the last
// one replaces it (the later entry is in force there); a line equal to the
// last one extends it.
func (t *lineTable) add(start, line int) {
	n := len(t.starts)
	switch {
	case start > math.MaxInt32:
		// Past any table of maxLineTable bytes: what a real one never is.
	case n > 0 && int(t.starts[n-1]) == start:
		t.lines[n-1] = line
	case n > 0 && t.lines[n-1] == line:
	default:
		t.starts = append(t.starts, int32(start)) // #nosec G115 -- offsets of a table of at most maxLineTable bytes: at most 255 per byte
		t.lines = append(t.lines, line)
	}
}

// decodeLines decodes a table of format f, in one pass.
func decodeLines(f LineFormat, tab []byte, first int) *lineTable {
	t := &lineTable{first: first, bounded: f != LineLnotab}
	switch f {
	case LineLnotab:
		decodeLnotab(t, tab, first)
	case LineTable310:
		decode310(t, tab, first)
	case LineLocations:
		decodeLocations(t, tab, first)
	}
	return t
}

// decodeLnotab: pairs of (bytecode increment, signed line increment); the
// line of an offset is the one in force at the last pair starting at or
// before it.
func decodeLnotab(t *lineTable, tab []byte, first int) {
	line, addr := first, 0
	for i := 0; i+1 < len(tab); i += 2 {
		addr += int(tab[i])
		line += int(int8(tab[i+1]))
		t.add(addr, line)
	}
}

// decode310: pairs of (bytecode length, signed line delta) describing
// consecutive ranges; a delta of -128 is "no line" and leaves the line as
// it was; empty ranges still move the line.
func decode310(t *lineTable, tab []byte, first int) {
	line, end := first, 0
	for i := 0; i+1 < len(tab); i += 2 {
		start := end
		end += int(tab[i])
		d := int8(tab[i+1])
		rangeLine := -1
		if d != -128 {
			line += int(d)
			rangeLine = line
		}
		if start < end {
			t.add(start, rangeLine)
		}
	}
	t.end = end
}

// Location-table entry kinds (the code in bits 3-6 of an entry's first byte).
const (
	locOneLine0  = 10
	locOneLine2  = 12
	locNoColumns = 13
	locLong      = 14
	locNone      = 15
)

// decodeLocations: entries of one to eight code units each, a first byte
// with the top bit set, then varints; the line delta sits in the code
// (short and one-line forms) or in a signed varint after the first byte.
func decodeLocations(t *lineTable, tab []byte, first int) {
	line, end := first, 0
	for i := 0; i < len(tab); {
		b := tab[i]
		code := int(b>>3) & 15
		switch {
		case code == locNone:
		case code == locNoColumns || code == locLong:
			line += signedVarint(tab, i+1)
		case code >= locOneLine0 && code <= locOneLine2:
			line += code - locOneLine0
		}
		start := end
		end += (int(b&7) + 1) * 2
		// The next entry starts at the next byte with its top bit set.
		for i++; i < len(tab) && tab[i]&0x80 == 0; i++ {
		}
		if code == locNone {
			t.add(start, -1)
		} else {
			t.add(start, line)
		}
	}
	t.end = end
}

// varint: 6-bit chunks, least significant first, bit 6 set on all but the
// last. Stops at the table's end or at the next entry's first byte.
func varint(tab []byte, i int) int {
	v, shift := 0, 0
	for ; i < len(tab) && shift < 32; i++ {
		b := tab[i]
		v |= int(b&63) << shift
		shift += 6
		if b&64 == 0 || b&0x80 != 0 {
			break
		}
	}
	return v
}

func signedVarint(tab []byte, i int) int {
	u := varint(tab, i)
	if u&1 != 0 {
		return -(u >> 1)
	}
	return u >> 1
}
