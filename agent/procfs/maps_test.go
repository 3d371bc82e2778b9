package procfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseMapsLine(t *testing.T) {
	cases := []struct {
		line string
		ok   bool
		want Mapping
	}{
		{
			line: "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon",
			ok:   true,
			want: Mapping{Start: 0x400000, End: 0x452000, Perms: "r-xp", Dev: unix.Mkdev(8, 2), Inode: 173521, Path: "/usr/bin/dbus-daemon"},
		},
		{
			line: "7f00-8f00 r-xp 0001f000 fd:10a 12 /a b/c  d (deleted)",
			ok:   true,
			want: Mapping{Start: 0x7f00, End: 0x8f00, Offset: 0x1f000, Perms: "r-xp", Dev: unix.Mkdev(0xfd, 0x10a), Inode: 12, Path: "/a b/c  d", Deleted: true},
		},
		{
			line: "7f00-8f00 rwxp 00000000 00:00 0", ok: true,
			want: Mapping{Start: 0x7f00, End: 0x8f00, Perms: "rwxp"},
		},
		{line: "7f00-8f00 rwxp 00000000 00:00", ok: false},       // no inode
		{line: "8f00-7f00 r-xp 00000000 00:00 0 /x", ok: false},  // end before start
		{line: "zz-8f00 r-xp 00000000 00:00 0 /x", ok: false},    // bad hex
		{line: "7f00-8f00 r-xp 00000000 0000 0 /x", ok: false},   // bad dev
		{line: "7f00-8f00 r-xp 00000000 0g:00 0 /x", ok: false},  // bad major
		{line: "7f00-8f00 r 00000000 00:00 0 /x", ok: false},     // short perms
		{line: "7f00-8f00 r-xp 00000000 00:00 -1 /x", ok: false}, // bad inode
		{line: "", ok: false},
	}
	for _, tc := range cases {
		m, ok := ParseMapsLine(tc.line)
		if ok != tc.ok {
			t.Errorf("%q: ok = %v, want %v", tc.line, ok, tc.ok)
			continue
		}
		if ok && m != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.line, m, tc.want)
		}
	}
}

const mapsFixture = `00400000-00401000 r-xp 00000000 08:01 1234                               /opt/app/with space/prog name
00401000-00402000 r--p 00001000 08:01 1234                               /opt/app/with space/prog name
00600000-00602000 r-xp 00002000 08:01 1235                               /usr/lib/libgone.so (deleted)
this is not a maps line
00700000-00650000 r-xp 00000000 08:01 1236                               /end/before/start
7f0000000000-7f0000100000 rwxp 00000000 00:00 0 
7f0000100000-7f0000200000 r-xp 00000000 00:00 0
7ffff7ff0000-7ffff7ff2000 r-xp 00000000 00:00 0                          [vdso]
7ffff7ff1000-7ffff7ff3000 r-xp 00000000 08:01 99                          /overlaps/previous
`

func TestParseMaps(t *testing.T) {
	exec := func(m *Mapping) bool { return m.Exec() }
	maps, bad, err := ParseMaps(strings.NewReader(mapsFixture), exec)
	if err != nil {
		t.Fatal(err)
	}
	// Executable, well-formed, in order: prog, libgone, two anonymous, vdso.
	// Skipped as bad: the garbage line, end<start, the overlapping mapping.
	wantPaths := []string{"/opt/app/with space/prog name", "/usr/lib/libgone.so", "", "", "[vdso]"}
	if len(maps) != len(wantPaths) {
		t.Fatalf("got %d mappings %+v, want %d", len(maps), maps, len(wantPaths))
	}
	for i, p := range wantPaths {
		if maps[i].Path != p {
			t.Errorf("mapping %d path %q, want %q", i, maps[i].Path, p)
		}
	}
	if !maps[1].Deleted || !maps[1].FileBacked() || maps[2].FileBacked() || maps[4].FileBacked() {
		t.Errorf("flags: %+v", maps)
	}
	if bad != 3 {
		t.Errorf("bad lines = %d, want 3", bad)
	}
	all, _, _ := ParseMaps(strings.NewReader(mapsFixture), nil)
	if len(all) != 6 || all[1].Perms != "r--p" {
		t.Errorf("without a filter: %+v", all)
	}
	// An over-long line ends the parse and keeps what was read.
	long := mapsFixture[:strings.IndexByte(mapsFixture, '\n')+1] + "7f-8f r-xp 0 0:0 1 /" + strings.Repeat("x", maxMapsLine) + "\n"
	if maps, bad, err := ParseMaps(strings.NewReader(long), nil); err != nil || len(maps) != 1 || bad != 1 {
		t.Errorf("over-long line: %d mappings, %d bad, %v", len(maps), bad, err)
	}
}

func TestMapsOfAProcess(t *testing.T) {
	root := t.TempDir()
	mustDo(t, os.MkdirAll(filepath.Join(root, "5"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(root, "5", "maps"), []byte(mapsFixture), 0o644))
	maps, err := New(root).Maps(5, nil)
	if err != nil || len(maps) != 6 {
		t.Fatalf("%d mappings, %v", len(maps), err)
	}
	if m := maps[0]; m.Range() != "400000-401000" || m.File() != (FileID{Dev: unix.Mkdev(8, 1), Ino: 1234}) {
		t.Errorf("range %s, file %+v", m.Range(), m.File())
	}
	if _, err := New(root).Maps(6, nil); !errors.Is(err, ErrGone) {
		t.Errorf("gone process: %v", err)
	}
}

// FuzzParseMapsLine: any line must parse or be rejected without panicking,
// and accepted mappings must be non-empty.
func FuzzParseMapsLine(f *testing.F) {
	f.Add("00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon")
	f.Fuzz(func(t *testing.T, line string) {
		m, ok := ParseMapsLine(line)
		if !ok {
			return
		}
		if m.End <= m.Start || len(m.Perms) < 4 {
			t.Fatalf("accepted %q as %+v", line, m)
		}
		// A whole file made of the line must agree with the line parser.
		maps, _, _ := ParseMaps(bytes.NewReader([]byte(line+"\n"+line)), nil)
		if len(maps) > 1 {
			t.Fatalf("overlapping duplicate accepted: %+v", maps)
		}
	})
}

func TestFuzzCorpusPresent(t *testing.T) {
	entries, err := os.ReadDir("testdata/fuzz/FuzzParseMapsLine")
	if err != nil || len(entries) == 0 {
		t.Errorf("seed corpus missing: %v", err)
	}
}
