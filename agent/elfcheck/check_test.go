package elfcheck

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/slurmscope/slurmscope/agent/elfcheck/elfchecktest"
)

const gib = 1 << 30

// allocated runs fn and returns the bytes it allocated.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

var testReader = NewReader("test")

func openPath(t *testing.T, path string, lim Limits) (*elf.File, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return testReader.Open(f, fi.Size(), lim)
}

// TestRealFilesPass: the agent's own binary, libc and the loader, as the
// readers see them, pass with the default caps and parse as debug/elf
// parses them.
func TestRealFilesPass(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{self}
	for _, glob := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2", "/usr/bin/python3.11", "/root/.pyenv/versions/3.13.*/lib/libpython3.13.so.1.0"} {
		m, _ := filepath.Glob(glob)
		paths = append(paths, m...)
	}
	for _, p := range paths {
		f, err := openPath(t, p, Limits{})
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		want, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Sections) != len(want.Sections) || len(f.Progs) != len(want.Progs) {
			t.Errorf("%s: %d sections, %d program headers; debug/elf: %d, %d", p, len(f.Sections), len(f.Progs), len(want.Sections), len(want.Progs))
		}
		for i, s := range f.Sections {
			if i < len(want.Sections) && s.SectionHeader != want.Sections[i].SectionHeader {
				t.Errorf("%s: section %d %+v, debug/elf %+v", p, i, s.SectionHeader, want.Sections[i].SectionHeader)
			}
		}
		want.Close()
	}
}

func symtab(claimSyms, claimStrs uint64) []elfchecktest.Section {
	strs, offs := elfchecktest.Strings("f")
	return []elfchecktest.Section{
		{Name: ".symtab", Type: elf.SHT_SYMTAB, Link: 2, Entsize: 24, Claim: claimSyms,
			Data: elfchecktest.Symbols(elfchecktest.Symbol{Name: offs[0], Info: byte(elf.STT_FUNC), Shndx: 1, Value: elfchecktest.Text + 0x100})},
		{Name: ".strtab", Type: elf.SHT_STRTAB, Data: strs, Claim: claimStrs},
	}
}

// TestSizesThatLie: each file claims more than a cap or its real size; it
// is refused as such, having cost next to nothing to look at, and counted.
func TestSizesThatLie(t *testing.T) {
	zdata := func(b []byte) []byte {
		var z bytes.Buffer
		w := zlib.NewWriter(&z)
		w.Write(b)
		w.Close()
		return z.Bytes()
	}
	cases := []struct {
		name string
		file elfchecktest.File
		lim  Limits
	}{
		{"section names", elfchecktest.File{Sections: symtab(0, 0), NamesClaim: gib}, Limits{}},
		{"section names, even to a reader of nothing", elfchecktest.File{NamesClaim: 256 << 20},
			Limits{Symbols: Unread, Strings: Unread, Frames: Unread, Pclntab: Unread, Versions: Unread, Dynamic: Unread}},
		{"symtab", elfchecktest.File{Sections: symtab(gib, 0)}, Limits{}},
		{"strtab", elfchecktest.File{Sections: symtab(0, gib)}, Limits{}},
		{"strtab under the default, over the reader's cap", elfchecktest.File{Sections: symtab(0, 64<<20)}, Limits{Strings: 32 << 20}},
		{"the strings a symtab names, whatever their type", elfchecktest.File{Sections: []elfchecktest.Section{
			{Name: ".symtab", Type: elf.SHT_SYMTAB, Link: 2, Entsize: 24, Data: elfchecktest.Symbols()},
			{Name: ".text2", Type: elf.SHT_PROGBITS, Claim: gib}}}, Limits{}},
		{"dynsym", elfchecktest.File{Sections: []elfchecktest.Section{
			{Name: ".dynsym", Type: elf.SHT_DYNSYM, Link: 2, Entsize: 24, Claim: gib},
			{Name: ".dynstr", Type: elf.SHT_STRTAB, Data: []byte("\x00")}}}, Limits{}},
		{"dynamic", elfchecktest.File{Sections: []elfchecktest.Section{
			{Name: ".dynamic", Type: elf.SHT_DYNAMIC, Link: 2, Claim: 64 << 20},
			{Name: ".dynstr", Type: elf.SHT_STRTAB, Data: []byte("\x00")}}}, Limits{}},
		{"versions", elfchecktest.File{Sections: []elfchecktest.Section{
			{Name: ".gnu.version", Type: elf.SHT_GNU_VERSYM, Claim: gib}}}, Limits{}},
		{"eh_frame", elfchecktest.File{Sections: []elfchecktest.Section{
			{Name: ".eh_frame", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC, Claim: gib}}}, Limits{}},
		{"debug_frame compressed, claiming a GiB decompressed", elfchecktest.File{Sections: []elfchecktest.Section{
			{Name: ".debug_frame", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Chdr: gib, Data: zdata(make([]byte, 4096))}}}, Limits{}},
		{"gopclntab", elfchecktest.File{Sections: []elfchecktest.Section{
			{Name: ".gopclntab", Type: elf.SHT_PROGBITS, Claim: gib}}}, Limits{}},
		{"a section past the end of the file", elfchecktest.File{Sections: symtab(0, 64<<20), Short: true}, Limits{}},
		{"a symtab named .zdebug", elfchecktest.File{Sections: []elfchecktest.Section{
			{Name: ".zdebug_symtab", Type: elf.SHT_SYMTAB, Link: 2, Entsize: 24, Data: append([]byte("ZLIB\x00\x00\x00\x01\x00\x00\x00\x00"), zdata(make([]byte, 1<<16))...)},
			{Name: ".strtab", Type: elf.SHT_STRTAB, Data: []byte("\x00")}}}, Limits{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.file.Write(t, t.TempDir(), "lie")
			before := testReader.Counts().TooLarge
			var err error
			n := allocated(func() { _, err = openPath(t, path, tc.lim) })
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("%v, want ErrTooLarge", err)
			}
			if n > 1<<20 {
				t.Errorf("looking at it allocated %d KiB", n>>10)
			}
			if got := testReader.Counts().TooLarge - before; got != 1 {
				t.Errorf("too_large counted %d times, want once", got)
			}
		})
	}
}

// TestUnreadKinds: a claim in a table the reader never reads costs it
// nothing, and is not held against the file (within the file's size).
func TestUnreadKinds(t *testing.T) {
	path := elfchecktest.File{Sections: append(symtab(512<<20, 512<<20),
		elfchecktest.Section{Name: ".gopclntab", Type: elf.SHT_PROGBITS, Claim: 512 << 20})}.Write(t, t.TempDir(), "f")
	f, err := openPath(t, path, Limits{Symbols: Unread, Strings: Unread, Pclntab: Unread})
	if err != nil {
		t.Fatal(err)
	}
	if s := f.Section(".strtab"); s == nil || s.Size != 512<<20 {
		t.Errorf(".strtab %+v", s)
	}
}

// flipping serves the file, except that its header bytes change after
// the first read of them: a job rewriting its file while it is looked at.
type flipping struct {
	r      io.ReaderAt
	at     int64
	later  []byte
	served int
}

func (f *flipping) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.r.ReadAt(b, off)
	if off <= f.at && f.at+int64(len(f.later)) <= off+int64(n) {
		if f.served > 0 {
			copy(b[f.at-off:], f.later)
		}
		f.served++
	}
	return n, err
}

// TestHeadersRewrittenWhileRead: debug/elf parses the headers that were
// checked, not the ones read after.
func TestHeadersRewrittenWhileRead(t *testing.T) {
	l := elfchecktest.File{Sections: symtab(0, 0)}
	b, _, _ := l.Bytes()
	shoff := binary.LittleEndian.Uint64(b[40:])
	// .strtab (section 2) claims a GiB from the second read on.
	at := int64(shoff) + 2*64 + 32 // #nosec G115 -- a small test file
	later := binary.LittleEndian.AppendUint64(nil, gib)
	r := &flipping{r: bytes.NewReader(b), at: at, later: later}
	var f *elf.File
	var err error
	n := allocated(func() { f, err = testReader.Open(r, int64(len(b)), Limits{}) })
	if err != nil {
		t.Fatal(err)
	}
	if s := f.Sections[2]; s.Size != uint64(len("\x00f\x00")) {
		t.Errorf(".strtab of %d bytes parsed, want the %d checked", s.Size, len("\x00f\x00"))
	}
	if n > 1<<20 {
		t.Errorf("allocated %d KiB", n>>10)
	}
}

// TestData: a compressed section is decompressed within its claim and the
// reader's cap, never past them.
func TestData(t *testing.T) {
	plain := bytes.Repeat([]byte("frame data "), 1000)
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(plain)
	w.Close()
	for _, tc := range []struct {
		name     string
		claim    uint64
		max      int64
		wantErr  error
		wantData bool
	}{
		{"as claimed", uint64(len(plain)), 1 << 20, nil, true},
		{"the stream runs past its claim", uint64(len(plain)) / 2, 1 << 20, ErrTooLarge, false},
		{"the claim over the reader's cap", uint64(len(plain)), 1024, ErrTooLarge, false},
		{"the stream ends short of its claim", uint64(len(plain)) * 2, 1 << 20, io.ErrUnexpectedEOF, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := elfchecktest.File{Sections: []elfchecktest.Section{{Name: ".debug_frame", Type: elf.SHT_PROGBITS,
				Flags: elf.SHF_COMPRESSED, Chdr: tc.claim, Data: z.Bytes()}}}.Write(t, t.TempDir(), "z")
			f, err := openPath(t, path, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := Data(f.Section(".debug_frame"), tc.max)
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) || tc.wantErr == nil && err != nil {
				t.Errorf("%v, want %v", err, tc.wantErr)
			}
			if tc.wantData && !bytes.Equal(got, plain) {
				t.Errorf("%d bytes, want the %d compressed", len(got), len(plain))
			}
		})
	}
}

// TestNotELF: what is not ELF is malformed, not too large, and not
// counted.
func TestNotELF(t *testing.T) {
	before := testReader.Counts()
	for _, b := range [][]byte{nil, []byte("#!/bin/sh\n"), bytes.Repeat([]byte{0}, 4096), []byte(elf.ELFMAG + "\x09")} {
		if _, err := testReader.Open(bytes.NewReader(b), int64(len(b)), Limits{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", b, err)
		}
	}
	if testReader.Counts() != before {
		t.Errorf("counted: %+v, before %+v", testReader.Counts(), before)
	}
}
