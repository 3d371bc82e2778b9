package unwind

import (
	"math/rand"
	"os"
	"testing"

	"github.com/slurmscope/slurmscope/agent/unwind/cfi"
)

// TestEncodedSearchMatchesTable: the BPF layout and its bounded search
// (written again in Go) find the same rule as the table for every row
// start, the byte before it and random pcs, on a real libc.
func TestEncodedSearchMatchesTable(t *testing.T) {
	f, err := os.Open("/usr/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	tab, err := cfi.Build(f, fi.Size(), cfi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	elems, pages := encode(tab)
	check := func(off uint64) {
		t.Helper()
		want := tab.Lookup(tab.Base + off)
		row, ok := lookupEncoded(elems, pages, off)
		if !ok || row.Rule() != want {
			t.Fatalf("pc %#x: encoded %v (%v), table %v", off, row.Rule(), ok, want)
		}
	}
	for _, r := range tab.Rows {
		check(uint64(r.PC))
		if r.PC > 0 {
			check(uint64(r.PC) - 1)
		}
	}
	rng := rand.New(rand.NewSource(1))
	last := uint64(tab.Rows[len(tab.Rows)-1].PC)
	for range 100000 {
		check(uint64(rng.Int63n(int64(last + 1<<16))))
	}
	// The page index lets every search converge in the fixed steps.
	entry := func(p int) uint32 { return uint32(elems[1+p/2] >> (32 * (p & 1))) }
	for p := range int(pages) {
		lo, hi := entry(p), entry(p+1)
		if hi < lo || hi-lo >= 1<<searchSteps {
			t.Fatalf("page %d: rows %d..%d", p, lo, hi)
		}
	}
	t.Logf("libc: %d rows, %d pages, %d bytes", len(tab.Rows), pages, len(elems)*8)
}

// TestEncodeLeadingGap: a table whose first row is not at its base gets a
// gap row at 0, so no pc falls before the first row.
func TestEncodeLeadingGap(t *testing.T) {
	tab := &cfi.Table{GapKind: cfi.KindFramePointer, Rows: []cfi.Row{
		{PC: 0x1000, CFA: 8, Flags: uint8(cfi.KindRSP)},
		{PC: 0x1010, Flags: uint8(cfi.KindFramePointer)},
	}}
	elems, pages := encode(tab)
	for off, want := range map[uint64]cfi.Kind{0: cfi.KindFramePointer, 0xfff: cfi.KindFramePointer, 0x1000: cfi.KindRSP, 0x100f: cfi.KindRSP, 0x1010: cfi.KindFramePointer, 1 << 40: cfi.KindFramePointer} {
		row, ok := lookupEncoded(elems, pages, off)
		if !ok || row.Kind() != want {
			t.Errorf("%#x: %v %v, want %v", off, row.Kind(), ok, want)
		}
	}
}

func TestPrefixes(t *testing.T) {
	for _, c := range []struct{ start, end uint64 }{
		{0x7f0000001000, 0x7f0000200000}, {0x400000, 0x401000}, {0x1000, 0x3000}, {0x7ffff7fc1000, 0x7ffff7fc3000},
		{0xffffffffff600000, 0xffffffffff601000},
	} {
		var covered uint64
		next := c.start
		n := 0
		prefixes(c.start, c.end, func(addr uint64, bits int) {
			size := uint64(1) << (64 - bits)
			if addr != next || addr%size != 0 {
				t.Fatalf("%#x-%#x: block %#x/%d not contiguous or aligned", c.start, c.end, addr, bits)
			}
			next += size
			covered += size
			n++
		})
		if covered != c.end-c.start || n > 2*64 {
			t.Errorf("%#x-%#x: %d blocks cover %#x", c.start, c.end, n, covered)
		}
	}
}

func TestMappingVaddr(t *testing.T) {
	// libc: r-x segment at file offset 0x26000 (vaddr 0x26000), mapped from
	// a page-aligned offset.
	segs := []cfi.Segment{{Off: 0x26040, Vaddr: 0x27040, Filesz: 0x100000}}
	v, ok := mappingVaddr(segs, Mapping{Start: 0x7f0000000000, End: 0x7f0000101000, Offset: 0x26000})
	if !ok || v != 0x27000 {
		t.Errorf("vaddr %#x %v", v, ok)
	}
	if _, ok := mappingVaddr(segs, Mapping{Start: 0x1000, End: 0x2000, Offset: 0x200000}); ok {
		t.Error("mapping outside every segment accepted")
	}
}
