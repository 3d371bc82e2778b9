package symbolize

import (
	"bytes"
	"os"
	"testing"
)

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
	for _, dir := range []string{"testdata/fuzz/FuzzOpenELF"} {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) == 0 {
			t.Errorf("seed corpus %s missing: %v", dir, err)
		}
	}
}
