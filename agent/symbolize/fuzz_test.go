package symbolize

import (
	"bytes"
	"os"
	"testing"
)

// FuzzParseMapsLine: any line must parse or be rejected without panicking,
// and accepted mappings must be non-empty.
func FuzzParseMapsLine(f *testing.F) {
	f.Add("00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon")
	f.Fuzz(func(t *testing.T, line string) {
		m, perms, ok := parseMapsLine(line)
		if !ok {
			return
		}
		if m.end <= m.start || len(perms) < 4 {
			t.Fatalf("accepted %q as %+v %q", line, m, perms)
		}
		// A whole file made of the line must agree with the line parser.
		maps, _ := parseMaps(bytes.NewReader([]byte(line + "\n" + line)))
		if len(maps) > 1 {
			t.Fatalf("overlapping duplicate accepted: %+v", maps)
		}
	})
}

// FuzzOpenELF: hostile ELF bytes must never panic, in parsing or in lookups.
// The committed corpus holds a tiny static ELF (testdata/fuzz/FuzzOpenELF)
// and truncations of it.
func FuzzOpenELF(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, err := openObj(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, s := range obj.loads {
			for _, off := range []uint64{s.off, s.off + s.filesz/2, s.off + s.filesz - 1} {
				if va, ok := obj.vaddr(off); ok {
					obj.resolve(va)
				}
			}
		}
		for _, s := range obj.syms.syms {
			obj.resolve(s.addr)
		}
	})
}

// TestFuzzCorpusPresent keeps the seed corpus from silently disappearing.
func TestFuzzCorpusPresent(t *testing.T) {
	for _, dir := range []string{"testdata/fuzz/FuzzParseMapsLine", "testdata/fuzz/FuzzOpenELF"} {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) == 0 {
			t.Errorf("seed corpus %s missing: %v", dir, err)
		}
	}
}
