package python

// Line-number tables, decoded as CPython's own PyCode_Addr2Line does for
// each version (Objects/codeobject.c; the formats are described in
// Objects/lnotab_notes.txt for 3.9 and 3.10 and InternalDocs/locations.md
// for 3.11+). Every table comes from a process's memory: a decoder never
// reads past the table, and any byte sequence yields some line (or 0, for
// "no line") in time linear in the table's length.

// Line returns the source line of the instruction at byte offset off of a
// code object whose first line is first and whose table is tab, in format
// f; 0 where the table has no line for it. A negative offset (a frame that
// has not started) is the first line, as in CPython.
func Line(f LineFormat, tab []byte, first int, off int) int {
	if off < 0 {
		return first
	}
	var l int
	switch f {
	case LineLnotab:
		l = lineLnotab(tab, first, off)
	case LineTable310:
		l = line310(tab, first, off)
	case LineLocations:
		l = lineLocations(tab, first, off)
	}
	return max(l, 0)
}

// lineLnotab: pairs of (bytecode increment, signed line increment); the
// line of off is the one in force at the last pair starting at or before it.
func lineLnotab(tab []byte, first, off int) int {
	line, addr := first, 0
	for i := 0; i+1 < len(tab); i += 2 {
		addr += int(tab[i])
		if addr > off {
			break
		}
		line += int(int8(tab[i+1]))
	}
	return line
}

// line310: pairs of (bytecode length, signed line delta) describing
// consecutive ranges; a delta of -128 is "no line" and leaves the line as
// it was; empty ranges still move the line.
func line310(tab []byte, first, off int) int {
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
		if start < end && off < end {
			if off >= start {
				return rangeLine
			}
			return -1
		}
	}
	return -1
}

// Location-table entry kinds (the code in bits 3-6 of an entry's first byte).
const (
	locOneLine0  = 10
	locOneLine2  = 12
	locNoColumns = 13
	locLong      = 14
	locNone      = 15
)

// lineLocations: entries of one to eight code units each, a first byte with
// the top bit set, then varints; the line delta sits in the code (short and
// one-line forms) or in a signed varint after the first byte.
func lineLocations(tab []byte, first, off int) int {
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
		if off < end && off >= start {
			if code == locNone {
				return -1
			}
			return line
		}
	}
	return -1
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
