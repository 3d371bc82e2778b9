package cfi

import (
	"debug/elf"
	"errors"
	"os"
	"runtime"
	"testing"

	"github.com/slurmscope/slurmscope/agent/elfcheck/elfchecktest"
)

// allocated runs fn and returns the bytes it allocated.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestSparseFilesCostNothing: a job maps a sparse file (a few KiB on
// disk) whose headers claim 256 MiB of section names or frame tables.
// The names are over their cap and refused before debug/elf reads them;
// frame tables under their cap are read only to their first zero length,
// where the parser stops, so their holes are never read. Either way the
// build costs next to nothing.
func TestSparseFilesCostNothing(t *testing.T) {
	const claim = 256 << 20
	frames := func(name string, claim uint64) elfchecktest.File {
		return elfchecktest.File{Sections: []elfchecktest.Section{{Name: name, Type: elf.SHT_PROGBITS, Claim: claim}}}
	}
	for _, tc := range []struct {
		name    string
		file    elfchecktest.File
		wantErr error
	}{
		{"section names", elfchecktest.File{NamesClaim: claim}, ErrTooLarge},
		{".eh_frame", frames(".eh_frame", claim-4096), nil},
		{".debug_frame", frames(".debug_frame", claim-4096), nil},
		{".eh_frame over the cap", frames(".eh_frame", 1<<30), ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.file.Write(t, t.TempDir(), "sparse")
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			var tab *Table
			n := allocated(func() { tab, err = Build(f, fi.Size(), Limits{}) })
			t.Logf("%d MiB file: allocated %d KiB, %v", fi.Size()>>20, n>>10, err)
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("%v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && err != nil:
				t.Errorf("%v, want a table", err)
			case tc.wantErr == nil && !tab.FramePointer:
				t.Errorf("%d rows from holes", len(tab.Rows))
			}
			if n > 4<<20 {
				t.Errorf("building it allocated %d MiB", n>>20)
			}
		})
	}
}
