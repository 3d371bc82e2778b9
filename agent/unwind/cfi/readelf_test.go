package cfi

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// readelfRow is one row of `readelf --debug-dump=frames-interp`.
type readelfRow struct {
	loc      uint64
	cfa, rbp string // "rsp+16", "exp"; rbp "" when the FDE has no rbp column
	ra       string
}

// readelfRows runs binutils' readelf, an independent implementation of the
// CFI interpreter, and returns its rows for every FDE.
func readelfRows(t *testing.T, path string) []readelfRow {
	t.Helper()
	// readelf exits 1 on some system libraries after printing everything
	// (a missing separate debug file); the output is what counts.
	out, err := exec.Command("readelf", "--debug-dump=frames-interp", path).Output()
	if len(out) == 0 {
		t.Fatalf("readelf %s: %v", path, err)
	}
	var rows []readelfRow
	var cols []string
	inFDE := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 4 && f[3] == "FDE":
			inFDE, cols = true, nil
		case len(f) >= 4 && f[3] == "CIE":
			inFDE = false
		case inFDE && len(f) > 1 && f[0] == "LOC":
			cols = f
		case inFDE && cols != nil && len(f) == len(cols):
			loc, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				continue
			}
			r := readelfRow{loc: loc, cfa: f[1]}
			for i, c := range cols {
				switch c {
				case "rbp":
					r.rbp = f[i]
				case "ra":
					r.ra = f[i]
				}
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// want converts a readelf row into the rule the table must hold, or false
// where readelf cannot tell (expressions).
func (r readelfRow) check(t *testing.T, got Rule) bool {
	if r.ra == "u" {
		return got.Kind == KindEnd
	}
	if r.cfa == "exp" {
		switch got.Kind {
		case KindPLT, KindSignal, KindDerefRBP, KindUnsupported:
			return true
		}
		return false
	}
	if r.ra != "c-8" {
		return got.Kind == KindUnsupported
	}
	var kind Kind
	var off string
	switch {
	case strings.HasPrefix(r.cfa, "rsp+"):
		kind, off = KindRSP, r.cfa[4:]
	case strings.HasPrefix(r.cfa, "rbp+"):
		kind, off = KindRBP, r.cfa[4:]
	default:
		return got.Kind == KindUnsupported
	}
	n, err := strconv.Atoi(off)
	if err != nil || got.Kind != kind || got.CFAOffset != int32(n) {
		return false
	}
	switch {
	case r.rbp == "" || r.rbp == "u" || r.rbp == "s":
		return got.RBP == RBPSame
	case strings.HasPrefix(r.rbp, "c-"):
		n, _ := strconv.Atoi(r.rbp[2:])
		return got.RBP == RBPAtCFA && got.RBPOffset == -int32(n)
	case r.rbp == "exp":
		return got.RBP == RBPAtRBP || got.RBP == RBPUndefined
	}
	return got.RBP == RBPUndefined
}

func buildFile(t testing.TB, path string) *Table {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Build(f, fi.Size(), Limits{})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tab
}

// TestAgainstReadelf holds every row of real system libraries to what
// binutils' interpreter computes for the same pc.
func TestAgainstReadelf(t *testing.T) {
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Skip("no readelf (binutils)")
	}
	libs, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libc.so.6")
	more, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libstdc++.so.6")
	libs = append(libs, more...)
	if len(libs) == 0 {
		t.Skip("no system libraries to compare")
	}
	for _, lib := range libs {
		tab := buildFile(t, lib)
		rows := readelfRows(t, lib)
		if len(rows) < 1000 {
			t.Fatalf("%s: only %d readelf rows", lib, len(rows))
		}
		bad := 0
		for _, r := range rows {
			got := tab.Lookup(r.loc)
			if !r.check(t, got) {
				bad++
				if bad <= 10 {
					t.Errorf("%s %#x: readelf cfa=%s rbp=%s ra=%s, table %v", lib, r.loc, r.cfa, r.rbp, r.ra, got)
				}
			}
		}
		t.Logf("%s: %d readelf rows checked, %d table rows, %d wrong; %+v", lib, len(rows), len(tab.Rows), bad, tab.Stats)
	}
}
