package symbolize

import (
	"fmt"
	"testing"
)

// The packed table finds each symbol's name across block boundaries,
// keeps the largest of symbols at one address, bounds sized symbols by
// their size and zero-sized ones by the next symbol and the code's end.
func TestSymTablePacked(t *testing.T) {
	var raw []rawSym
	for i := 99; i >= 0; i-- { // out of order: the table sorts
		raw = append(raw, rawSym{addr: 0x1000 + uint64(i)*0x100, size: 0x80, name: []byte(fmt.Sprintf("f%d", i))})
	}
	raw = append(raw,
		rawSym{addr: 0x1000, size: 0x10, name: []byte("inner_of_f0")}, // same address, smaller: dropped
		rawSym{addr: 0x8000, size: 0, name: []byte("asm_tail")})       // zero-sized, last
	tab := buildTable(raw, 0x8100)
	if tab.len() != 101 {
		t.Fatalf("%d symbols, want 101", tab.len())
	}
	for _, c := range []struct {
		addr uint64
		want string
	}{
		{0x1000, "f0"}, {0x107f, "f0"}, {0x1080, ""}, {0x1000 + 31*0x100, "f31"}, {0x1000 + 32*0x100 + 5, "f32"},
		{0x1000 + 99*0x100, "f99"}, {0x8000, "asm_tail"}, {0x80ff, "asm_tail"}, {0x8100, ""}, {0xfff, ""},
	} {
		got, ok := tab.lookup(c.addr)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("lookup(%#x) = %q, %v; want %q", c.addr, got, ok, c.want)
		}
	}
	if a, ok := tab.find("f77"); !ok || a != 0x1000+77*0x100 {
		t.Errorf("find(f77) = %#x, %v", a, ok)
	}
	if _, ok := tab.find("inner_of_f0"); ok {
		t.Error("the smaller symbol at f0's address was kept")
	}
}
