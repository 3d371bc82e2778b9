package cfi

import (
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/slurmscope/slurmscope/agent/budget"
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

// refusing reads through r until it has served n bytes, then refuses
// every read, as a job's used-up read allowance does.
type refusing struct {
	r    io.ReaderAt
	n    int64
	seen int64
}

func (f *refusing) ReadAt(b []byte, off int64) (int, error) {
	if f.seen+int64(len(b)) > f.n {
		return 0, budget.ErrWorkLimit
	}
	f.seen += int64(len(b))
	return f.r.ReadAt(b, off)
}

// TestRefusedReadFailsTheBuild: a read refused part way through a real
// file's frame tables fails the build with the refusal (for the caller to
// try again later), never a table of part of them.
func TestRefusedReadFailsTheBuild(t *testing.T) {
	b, err := os.ReadFile("testdata/tiny.elf")
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Build(bytes.NewReader(b), int64(len(b)), Limits{})
	if err != nil || len(whole.Rows) == 0 {
		t.Fatalf("the whole file: %v, %d rows", err, len(whole.Rows))
	}
	refused := 0
	for n := int64(0); n < int64(len(b))*4; n += 64 {
		tab, err := Build(&refusing{r: bytes.NewReader(b), n: n}, int64(len(b)), Limits{})
		switch {
		case err == nil:
			if !slices.Equal(tab.Rows, whole.Rows) {
				t.Errorf("refused after %d bytes: %d rows, want the %d of the whole file", n, len(tab.Rows), len(whole.Rows))
			}
		case errors.Is(err, budget.ErrWorkLimit):
			refused++
		default:
			t.Errorf("refused after %d bytes: %v, want budget.ErrWorkLimit in it", n, err)
		}
	}
	if refused == 0 {
		t.Error("no read was ever refused: the test tests nothing")
	}
}
