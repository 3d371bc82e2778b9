package symbolize

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseMapsLine(t *testing.T) {
	cases := []struct {
		line    string
		ok      bool
		want    mapping
		wantPrm string
	}{
		{
			line: "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon",
			ok:   true, wantPrm: "r-xp",
			want: mapping{start: 0x400000, end: 0x452000, inode: 173521, path: "/usr/bin/dbus-daemon"},
		},
		{
			line: "7f00-8f00 r-xp 0001f000 fd:00 12 /a b/c  d (deleted)",
			ok:   true, wantPrm: "r-xp",
			want: mapping{start: 0x7f00, end: 0x8f00, offset: 0x1f000, inode: 12, path: "/a b/c  d", deleted: true},
		},
		{
			line: "7f00-8f00 rwxp 00000000 00:00 0", ok: true, wantPrm: "rwxp",
			want: mapping{start: 0x7f00, end: 0x8f00},
		},
		{line: "7f00-8f00 rwxp 00000000 00:00", ok: false},       // no inode
		{line: "8f00-7f00 r-xp 00000000 00:00 0 /x", ok: false},  // end before start
		{line: "zz-8f00 r-xp 00000000 00:00 0 /x", ok: false},    // bad hex
		{line: "7f00-8f00 r-xp 00000000 0000 0 /x", ok: false},   // bad dev
		{line: "7f00-8f00 r 00000000 00:00 0 /x", ok: false},     // short perms
		{line: "7f00-8f00 r-xp 00000000 00:00 -1 /x", ok: false}, // bad inode
		{line: "", ok: false},
	}
	for _, tc := range cases {
		m, perms, ok := parseMapsLine(tc.line)
		if ok != tc.ok {
			t.Errorf("%q: ok = %v, want %v", tc.line, ok, tc.ok)
			continue
		}
		if ok && (m != tc.want || perms != tc.wantPrm) {
			t.Errorf("%q: got %+v %q, want %+v %q", tc.line, m, perms, tc.want, tc.wantPrm)
		}
	}
}

func TestParseMapsFixture(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "proc", "4242", "maps"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	maps, bad := parseMaps(f)
	// Executable, well-formed, in order: prog, libgone, two anonymous, vdso.
	// Skipped as bad: the garbage line, end<start, the overlapping mapping.
	wantPaths := []string{"/opt/app/with space/prog name", "/usr/lib/libgone.so", "", "", "[vdso]"}
	if len(maps) != len(wantPaths) {
		t.Fatalf("got %d mappings %+v, want %d", len(maps), maps, len(wantPaths))
	}
	for i, p := range wantPaths {
		if maps[i].path != p {
			t.Errorf("mapping %d path %q, want %q", i, maps[i].path, p)
		}
	}
	if !maps[1].deleted {
		t.Error("libgone.so not marked deleted")
	}
	if bad != 3 {
		t.Errorf("bad lines = %d, want 3", bad)
	}
	if m := findMapping(maps, 0x600fff); m == nil || m.path != "/usr/lib/libgone.so" {
		t.Errorf("findMapping(0x600fff) = %+v", m)
	}
	if m := findMapping(maps, 0x602000); m != nil {
		t.Errorf("findMapping(end) = %+v, want nil", m)
	}
}

func TestProcessFixture(t *testing.T) {
	s := New(Options{ProcRoot: filepath.Join("testdata", "proc")})
	p := s.loadProcess(4242)
	if p.nspid != 7 {
		t.Errorf("nspid = %d, want 7", p.nspid)
	}
	if p.startTime != 987654 {
		t.Errorf("start time = %d, want 987654 (comm with spaces and parens)", p.startTime)
	}
}

// TestUnreadableFilesAreUnknown covers a deleted library with no map_files
// and a path whose file is absent: frames are unknown but keep their module,
// and the causes are counted.
func TestUnreadableFilesAreUnknown(t *testing.T) {
	s := New(Options{ProcRoot: filepath.Join("testdata", "proc")})
	frames := s.User(4242, 987654, []uint64{0x400010, 0x600010})
	if len(frames) != 2 {
		t.Fatalf("frames = %+v", frames)
	}
	for i, want := range []string{"/opt/app/with space/prog name", "/usr/lib/libgone.so"} {
		if frames[i].Function != "" || frames[i].Module != want {
			t.Errorf("frame %d = %+v, want unknown in %q", i, frames[i], want)
		}
	}
	if n := s.Stats().Errors[ErrOpenFile]; n != 2 {
		t.Errorf("open_file errors = %d, want 2", n)
	}
}

// TestPidReuse: a sample whose start time differs from the live process's
// must not be resolved against the new process.
func TestPidReuse(t *testing.T) {
	s := New(Options{ProcRoot: filepath.Join("testdata", "proc")})
	frames := s.User(4242, 111, []uint64{0x7f0000001010})
	if len(frames) != 1 || frames[0].Function != "" {
		t.Fatalf("frames = %+v, want one unknown", frames)
	}
	if frames = s.User(4242, 987654, []uint64{0x7f0000001010}); frames[0].Function == "" {
		t.Fatalf("matching start time: frames = %+v", frames)
	}
}

func TestVaddrMultipleExecSegments(t *testing.T) {
	o := &objFile{loads: []loadSeg{
		{off: 0, filesz: 0x1000, vaddr: 0x400000, exec: false},
		{off: 0x1000, filesz: 0x2000, vaddr: 0x401000, exec: true},
		{off: 0x3000, filesz: 0x800, vaddr: 0x600000, exec: true},
	}}
	cases := []struct {
		off, want uint64
		ok        bool
	}{
		{0x1010, 0x401010, true},
		{0x3100, 0x600100, true},
		{0x3800, 0, false}, // past the last segment's file bytes
	}
	for _, tc := range cases {
		got, ok := o.vaddr(tc.off)
		if ok != tc.ok || got != tc.want {
			t.Errorf("vaddr(%#x) = %#x, %v; want %#x, %v", tc.off, got, ok, tc.want, tc.ok)
		}
	}
}
