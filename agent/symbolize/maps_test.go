package symbolize

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

func TestProcessFixture(t *testing.T) {
	s := New(Options{Proc: procfs.New(filepath.Join("testdata", "proc"))})
	p := s.process(procfs.ID{PID: 4242})
	if p == nil {
		t.Fatal("no process")
	}
	defer p.mu.Unlock()
	if p.status.NSpid != 7 {
		t.Errorf("nspid = %d, want 7", p.status.NSpid)
	}
	if p.id.Start != 987654 {
		t.Errorf("start time = %d, want 987654 (comm with spaces and parens)", p.id.Start)
	}
}

// TestUnreadableFilesAreUnknown covers a deleted library with no map_files
// and a path whose file is absent: frames are unknown but keep their module,
// and the causes are counted.
func TestUnreadableFilesAreUnknown(t *testing.T) {
	s := New(Options{Proc: procfs.New(filepath.Join("testdata", "proc"))})
	frames := s.User(procfs.ID{PID: 4242, Start: 987654}, []uint64{0x400010, 0x600010})
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
	s := New(Options{Proc: procfs.New(filepath.Join("testdata", "proc"))})
	frames := s.User(procfs.ID{PID: 4242, Start: 111}, []uint64{0x7f0000001010})
	if len(frames) != 1 || frames[0].Function != "" {
		t.Fatalf("frames = %+v, want one unknown", frames)
	}
	if frames = s.User(procfs.ID{PID: 4242, Start: 987654}, []uint64{0x7f0000001010}); frames[0].Function == "" {
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

// TestReReadKeepsResolvedFiles: re-reading a process's mappings keeps the
// file each unchanged mapping was resolved to (a re-read while the process
// exits could no longer open it), and retries the ones that failed.
func TestReReadKeepsResolvedFiles(t *testing.T) {
	s := New(Options{Proc: procfs.New(filepath.Join("testdata", "proc"))})
	p := s.process(procfs.ID{PID: 4242})
	if p == nil {
		t.Fatal("fixture process 4242 not loaded")
	}
	defer p.mu.Unlock()
	maps := p.table.Load().maps
	if len(maps) < 2 {
		t.Fatalf("fixture maps: %+v", maps)
	}
	ok := &fileRef{id: fileIdentity{size: 1}}
	maps[0].file = ok
	maps[1].file = &fileRef{err: ErrOpenFile}
	p.mapsReadAt = time.Time{}
	if fresh, kind := s.readMaps(p); !fresh {
		t.Fatalf("maps not read again: %q", kind)
	}
	maps = p.table.Load().maps
	if maps[0].file != ok {
		t.Errorf("mapping %s lost its resolved file on a re-read", maps[0].Path)
	}
	if maps[1].file != nil {
		t.Errorf("mapping %s kept its failure across a re-read: %+v", maps[1].Path, maps[1].file)
	}
}
