package python

// The straightforward decoders, scanning the table for each offset as
// CPython's PyCode_Addr2Line does: the reference that the decoded tables
// (lineTable) must agree with at every offset.

// refLine is Line by scanning.
func refLine(f LineFormat, tab []byte, first int, off int) int {
	if off < 0 {
		return first
	}
	var l int
	switch f {
	case LineLnotab:
		l = refLnotab(tab, first, off)
	case LineTable310:
		l = ref310(tab, first, off)
	case LineLocations:
		l = refLocations(tab, first, off)
	}
	return max(l, 0)
}

// refLnotab: pairs of (bytecode increment, signed line increment); the
// line of off is the one in force at the last pair starting at or before it.
func refLnotab(tab []byte, first, off int) int {
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

// ref310: pairs of (bytecode length, signed line delta) describing
// consecutive ranges; a delta of -128 is "no line" and leaves the line as
// it was; empty ranges still move the line.
func ref310(tab []byte, first, off int) int {
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

// refLocations: entries of one to eight code units each, a first byte with
// the top bit set, then varints; the line delta sits in the code (short and
// one-line forms) or in a signed varint after the first byte.
func refLocations(tab []byte, first, off int) int {
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
