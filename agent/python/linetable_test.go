package python

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
)

// Literal tables, one per format, worked by hand from the format notes.
func TestLineLiteral(t *testing.T) {
	cases := []struct {
		name  string
		f     LineFormat
		tab   []byte
		first int
		want  map[int]int // byte offset -> line
	}{
		// 3.9 lnotab: +0 bytes/+1 line, +6 bytes/+2 lines, +4 bytes/-1 line.
		{"lnotab", LineLnotab, []byte{0, 1, 6, 2, 4, 0xff}, 10,
			map[int]int{0: 11, 4: 11, 6: 13, 9: 13, 10: 12, 100: 12, -1: 10}},
		// 3.10: 4 bytes +1, 2 bytes no line, 0 bytes +5 (moves the line only), 6 bytes +0.
		{"linetable310", LineTable310, []byte{4, 1, 2, 0x80, 0, 5, 6, 0}, 20,
			map[int]int{0: 21, 2: 21, 4: 0, 6: 26, 10: 26, 12: 0}},
		// 3.11: short form (2 units, same line), one-line form +1 (1 unit),
		// no-columns with svarint -3 (3 units), no location (1 unit),
		// long form +300 (1 unit, delta 600 = 0b1001011000 -> 24|64, 9).
		{"locations", LineLocations, []byte{
			0x80 | 0<<3 | 1, 0x05,
			0x80 | 11<<3 | 0, 4, 8,
			0x80 | 13<<3 | 2, 7,
			0x80 | 15<<3 | 0,
			0x80 | 14<<3 | 0, 24 | 64, 9, 0, 1, 2,
		}, 100, map[int]int{0: 100, 2: 100, 4: 101, 6: 98, 10: 98, 12: 0, 14: 398, 16: 0}},
	}
	for _, c := range cases {
		for off, want := range c.want {
			if got := Line(c.f, c.tab, c.first, off); got != want {
				t.Errorf("%s: offset %d: line %d, want %d", c.name, off, got, want)
			}
		}
	}
}

type lineFixture struct {
	Version string `json:"version"`
	Codes   []struct {
		Name  string `json:"name"`
		First int    `json:"first"`
		Table string `json:"table"`
		Lines []int  `json:"lines"`
	} `json:"codes"`
}

// TestLineRecorded holds the decoders to the lines each real interpreter
// gives every instruction of a few hundred code objects (recorded by
// testdata/linetables.py).
func TestLineRecorded(t *testing.T) {
	for _, minor := range SupportedVersions() {
		t.Run(fmt.Sprintf("3.%d", minor), func(t *testing.T) {
			b, err := os.ReadFile(fmt.Sprintf("testdata/linetables-3.%d.json", minor))
			if err != nil {
				t.Fatal(err)
			}
			var fx lineFixture
			if err := json.Unmarshal(b, &fx); err != nil {
				t.Fatal(err)
			}
			l, err := LayoutFor(3, minor, AMD64)
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			for _, c := range fx.Codes {
				tab, err := hex.DecodeString(c.Table)
				if err != nil {
					t.Fatal(err)
				}
				for i, want := range c.Lines {
					if got := Line(l.Lines, tab, c.First, 2*i); got != want {
						t.Errorf("%s (first line %d): offset %d: line %d, want %d", c.Name, c.First, 2*i, got, want)
					}
					checked++
				}
			}
			if len(fx.Codes) < 30 || checked < 2000 {
				t.Fatalf("fixture too small: %d code objects, %d instructions", len(fx.Codes), checked)
			}
		})
	}
}

// Hostile tables: any bytes decode without panicking, and the work stays
// linear (the decoders have no inner loop that can restart).
func TestLineHostile(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		tab := make([]byte, r.IntN(64))
		for j := range tab {
			tab[j] = byte(r.Uint32())
		}
		for _, f := range []LineFormat{LineLnotab, LineTable310, LineLocations} {
			for _, off := range []int{-2, 0, 1, 7, 1 << 20, int(r.Int32())} {
				Line(f, tab, int(r.Int32()), off)
			}
		}
	}
	if got := Line(LineFormat(99), []byte{1, 2}, 5, 0); got != 0 {
		t.Errorf("unknown format: line %d, want 0", got)
	}
}

// A table decoded once gives, at every offset, the line the scanning
// decoders give (refLine): on the tables of real interpreters and on
// random ones.
func TestLineTableAgreesWithScan(t *testing.T) {
	check := func(name string, f LineFormat, tab []byte, first int) {
		t.Helper()
		lt := decodeLines(f, tab, first)
		for off := -2; off <= 16*len(tab)+4; off++ {
			if got, want := lt.line(off), refLine(f, tab, first, off); got != want {
				t.Fatalf("%s: offset %d: line %d, want %d (table %x)", name, off, got, want, tab)
			}
		}
	}
	for _, minor := range SupportedVersions() {
		b, err := os.ReadFile(fmt.Sprintf("testdata/linetables-3.%d.json", minor))
		if err != nil {
			t.Fatal(err)
		}
		var fx lineFixture
		if err := json.Unmarshal(b, &fx); err != nil {
			t.Fatal(err)
		}
		l, _ := LayoutFor(3, minor, AMD64)
		for _, c := range fx.Codes {
			tab, _ := hex.DecodeString(c.Table)
			check(fmt.Sprintf("3.%d %s", minor, c.Name), l.Lines, tab, c.First)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		tab := make([]byte, r.IntN(48))
		for j := range tab {
			tab[j] = byte(r.Uint32())
		}
		for _, f := range []LineFormat{LineLnotab, LineTable310, LineLocations, LineFormat(99)} {
			check(fmt.Sprint(f), f, tab, int(r.Int32N(1000))-500)
		}
	}
}

func FuzzLine(f *testing.F) {
	f.Add([]byte{0x80, 5, 0xf8}, 10, 2)
	f.Fuzz(func(t *testing.T, tab []byte, first, off int) {
		for _, fm := range []LineFormat{LineLnotab, LineTable310, LineLocations} {
			if l := Line(fm, tab, first, off); l < 0 {
				t.Fatalf("negative line %d", l)
			}
		}
	})
}

// FuzzLineTable: any table, decoded once, agrees with the scanning
// decoders at every offset it covers and around it.
func FuzzLineTable(f *testing.F) {
	f.Add(uint8(LineLnotab), []byte{0, 1, 6, 2, 4, 0xff}, 10)
	f.Add(uint8(LineTable310), []byte{4, 1, 2, 0x80, 0, 5, 6, 0}, 20)
	f.Add(uint8(LineLocations), []byte{0x80 | 0<<3 | 1, 0x05, 0x80 | 11<<3 | 0, 4, 8, 0x80 | 13<<3 | 2, 7, 0x80 | 15<<3 | 0, 0x80 | 14<<3 | 0, 24 | 64, 9, 0, 1, 2}, 100)
	f.Fuzz(func(t *testing.T, format uint8, tab []byte, first int) {
		if len(tab) > 4096 {
			return
		}
		fm := LineFormat(format%4 + 1)
		lt := decodeLines(fm, tab, first)
		for off := -1; off <= 16*len(tab)+2; off++ {
			if got, want := lt.line(off), refLine(fm, tab, first, off); got != want {
				t.Fatalf("format %d, offset %d: line %d, want %d", fm, off, got, want)
			}
		}
	})
}
