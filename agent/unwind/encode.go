package unwind

import (
	"encoding/binary"

	"github.com/slurmscope/slurmscope/agent/unwind/cfi"
)

// encode lays a table out as its BPF inner map (agent/bpf/include/unwind.h):
// element 0 the header {pages, rows}, then the page index (pages+1 __u32
// entries, two to an element: entry p < pages is the row covering page p's
// first byte, entry pages the last row), then the rows. Row 0 is always at
// pc 0 (a gap row is put there if the table starts later), so every pc at or
// after the base has a row at or before it. It also returns the page count,
// which the mappings carry.
func encode(t *cfi.Table) ([]uint64, uint32) {
	// The lead row is put in front without copying the rows (libtorch_cpu
	// has 1.2 million).
	lead := 0
	if len(t.Rows) == 0 || t.Rows[0].PC != 0 {
		lead = 1
	}
	n := len(t.Rows) + lead
	pc := func(i int) uint32 {
		if i < lead {
			return 0
		}
		return t.Rows[i-lead].PC
	}
	pages := int(pc(n-1)>>pageShift) + 1
	ixElems := (pages + 2) / 2
	out := make([]uint64, 1+ixElems+n)
	out[0] = uint64(pages) | uint64(n)<<32 // #nosec G115 -- counts are never negative
	index := make([]uint32, 2*ixElems)
	j := 0 // the last row at or before the current page's start
	for p := 0; p < pages; p++ {
		start := uint32(p) << pageShift // #nosec G115 -- p < pages, at most 2^(32-pageShift)
		for j+1 < n && pc(j+1) <= start {
			j++
		}
		index[p] = uint32(j) // #nosec G115 -- rows have distinct uint32 pcs (cfi merges equal ones): under 2^32 of them
	}
	index[pages] = uint32(n - 1) // #nosec G115 -- 0 < n <= 2^32, as above
	for i := range ixElems {
		out[1+i] = uint64(index[2*i]) | uint64(index[2*i+1])<<32
	}
	rows := out[1+ixElems:]
	if lead == 1 {
		rows[0] = rowWord(cfi.Row{PC: 0, Flags: uint8(t.GapKind)})
	}
	for i, r := range t.Rows {
		rows[lead+i] = rowWord(r)
	}
	return out, uint32(pages) // #nosec G115 -- pages is at most 2^(32-pageShift)
}

// rowWord is a row as the 8 little-endian bytes of struct unwind_row.
func rowWord(r cfi.Row) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], r.PC)
	binary.LittleEndian.PutUint16(b[4:], uint16(r.CFA)) // #nosec G115 -- the bits of an int16, as the C struct holds them
	b[6] = r.Flags
	b[7] = uint8(r.RBP) // #nosec G115 -- the bits of an int8, as the C struct holds them
	return binary.LittleEndian.Uint64(b[:])
}

// lookupEncoded is the BPF search (unwind_find_row) in Go, for tests: the
// row covering table pc off, or false.
func lookupEncoded(elems []uint64, pages uint32, off uint64) (cfi.Row, bool) {
	entry := func(p uint64) uint32 { return uint32(elems[1+p/2] >> (32 * (p & 1))) } // #nosec G115 -- takes one 32-bit half, by design
	p := min(off>>pageShift, uint64(pages))
	lo, hi := entry(p), entry(p)
	if p < uint64(pages) {
		hi = entry(p + 1)
	}
	first := 1 + (uint64(pages)+2)/2
	row := func(i uint32) cfi.Row {
		w := elems[first+uint64(i)]
		return cfi.Row{PC: uint32(w), CFA: int16(w >> 32), Flags: uint8(w >> 48), RBP: int8(w >> 56)} // #nosec G115 -- unpacks the fields rowWord packed
	}
	for i := 0; i < searchSteps && lo < hi; i++ {
		mid := lo + (hi-lo+1)/2
		if uint64(row(mid).PC) <= off {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo < hi || uint64(row(lo).PC) > off {
		return cfi.Row{}, false
	}
	return row(lo), true
}

// searchSteps is UNWIND_SEARCH_STEPS.
const searchSteps = 10
