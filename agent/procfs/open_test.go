package procfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// jobRoot makes <proc>/<pid>/root a directory, the process's root, and
// returns the proc root and the process's root.
func jobRoot(t *testing.T, pid string) (string, string) {
	t.Helper()
	proc := t.TempDir()
	root := filepath.Join(proc, pid, "root")
	mustDo(t, os.MkdirAll(filepath.Join(root, "tmp"), 0o755))
	return proc, root
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// modes runs f with paths resolved by openat2 and by the component walk.
func modes(t *testing.T, f func(t *testing.T, walk bool)) {
	t.Run("openat2", func(t *testing.T) {
		if !haveOpenat2() {
			t.Skip("the kernel has no openat2 (before 5.6): only the walk runs here")
		}
		f(t, false)
	})
	t.Run("walk", func(t *testing.T) { f(t, true) })
}

func fsAt(proc string, walk bool) FS { return FS{Root: proc, walkOnly: walk} }

func me() int { return os.Getuid() }

func TestOpenRegularFileInRoot(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		proc, root := jobRoot(t, "7")
		mustDo(t, os.WriteFile(filepath.Join(root, "tmp", "perf-7.map"), []byte("1000 10 f\n"), 0o644))
		f, err := fsAt(proc, walk).Open(JobFile{PID: 7, Path: "/tmp/perf-7.map", UID: me(), MaxSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := io.ReadAll(f.Reader())
		if err != nil || string(b) != "1000 10 f\n" || f.Info.Size != 10 || f.Info.UID != me() {
			t.Fatalf("read %q, %v, info %+v", b, err, f.Info)
		}
		var st syscall.Stat_t
		mustDo(t, syscall.Stat(filepath.Join(root, "tmp", "perf-7.map"), &st))
		if f.Info.ID != (FileID{Dev: st.Dev, Ino: st.Ino}) {
			t.Errorf("identity %+v, want device %d inode %d", f.Info.ID, st.Dev, st.Ino)
		}
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		mustDo(t, err)
		fd, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
		mustDo(t, err)
		if fl&unix.O_NONBLOCK == 0 || fd&unix.FD_CLOEXEC == 0 || fl&unix.O_ACCMODE != unix.O_RDONLY {
			t.Errorf("flags %#x, fd flags %#x: want read-only, O_NONBLOCK and close-on-exec", fl, fd)
		}
		// ".." cannot climb out of the root.
		mustDo(t, os.WriteFile(filepath.Join(proc, "7", "outside"), []byte("x"), 0o644))
		if _, err := fsAt(proc, walk).Open(JobFile{PID: 7, Path: "/../outside", UID: me(), MaxSize: 10}); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("/../outside: %v, want not found inside the root", err)
		}
		if f, err := fsAt(proc, walk).Open(JobFile{PID: 7, Path: "/tmp/../../../tmp/perf-7.map", UID: me(), MaxSize: 10}); err != nil {
			t.Errorf("a path with .. inside the root: %v", err)
		} else {
			f.Close()
		}
	})
}

func TestOpenRefusesLinks(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		proc, root := jobRoot(t, "7")
		outside := filepath.Join(t.TempDir(), "secret")
		mustDo(t, os.WriteFile(outside, []byte("secret"), 0o600))
		mustDo(t, os.WriteFile(filepath.Join(root, "tmp", "real"), []byte("ok"), 0o644))
		mustDo(t, os.Symlink(outside, filepath.Join(root, "tmp", "abs")))      // out of the root
		mustDo(t, os.Symlink("real", filepath.Join(root, "tmp", "rel")))       // inside it: still a link
		mustDo(t, os.Symlink("/tmp", filepath.Join(root, "dirlink")))          // a directory on the way
		mustDo(t, os.Symlink("/proc/self/root", filepath.Join(root, "magic"))) // a magic link's way in
		for _, path := range []string{"/tmp/abs", "/tmp/rel", "/dirlink/real", "/magic/etc/passwd"} {
			f, err := fsAt(proc, walk).Open(JobFile{PID: 7, Path: path, UID: me(), MaxSize: 1 << 20})
			if err == nil {
				f.Close()
				t.Errorf("%s: opened through a link", path)
			} else if !errors.Is(err, ErrLink) {
				t.Errorf("%s: %v, want ErrLink", path, err)
			}
		}
		// A real magic link, for a process whose root is the host's.
		host := t.TempDir()
		mustDo(t, os.MkdirAll(filepath.Join(host, "7"), 0o755))
		mustDo(t, os.Symlink("/", filepath.Join(host, "7", "root")))
		path := fmt.Sprintf("/proc/%d/root/etc/passwd", os.Getpid())
		if f, err := fsAt(host, walk).Open(JobFile{PID: 7, Path: path, UID: 0, MaxSize: 1 << 20}); err == nil {
			f.Close()
			t.Errorf("%s: opened through a magic link", path)
		} else if !errors.Is(err, ErrLink) {
			t.Errorf("%s: %v, want ErrLink", path, err)
		}
	})
}

func TestOpenFIFODoesNotBlock(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		proc, root := jobRoot(t, "7")
		mustDo(t, unix.Mkfifo(filepath.Join(root, "tmp", "perf-7.map"), 0o644))
		done := make(chan error, 1)
		go func() {
			f, err := fsAt(proc, walk).Open(JobFile{PID: 7, Path: "/tmp/perf-7.map", UID: me(), MaxSize: 1 << 20})
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Fatalf("FIFO: %v, want ErrNotRegular", err)
			}
		case <-time.After(time.Minute):
			// Not a timing assertion: a FIFO open with no writer never returns.
			t.Fatal("opening a FIFO blocked")
		}
	})
}

// A device node: <pid>/root is the real root here, as it is for a process
// that is not in a container, and /dev/null a character device.
func TestOpenRefusesDevices(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		proc := t.TempDir()
		mustDo(t, os.MkdirAll(filepath.Join(proc, "7"), 0o755))
		mustDo(t, os.Symlink("/", filepath.Join(proc, "7", "root")))
		for _, path := range []string{"/dev/null", "/dev", "/"} {
			f, err := fsAt(proc, walk).Open(JobFile{PID: 7, Path: path, UID: 0, MaxSize: 1 << 20})
			if err == nil {
				f.Close()
				t.Errorf("%s opened", path)
			} else if !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: %v, want ErrNotRegular", path, err)
			}
		}
	})
}

func TestOpenRefusesOtherOwners(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		proc, root := jobRoot(t, "7")
		path := filepath.Join(root, "tmp", "perf-7.map")
		mustDo(t, os.WriteFile(path, []byte("1000 10 f\n"), 0o644))
		owner := me()
		if owner == 0 {
			// Root-owned files are always accepted; give it to someone.
			owner = 54321
			mustDo(t, os.Chown(path, owner, owner))
		}
		saved := agentUID
		agentUID = -2 // the test runner's files are not trusted as the agent's own
		t.Cleanup(func() { agentUID = saved })
		p := fsAt(proc, walk)
		if f, err := p.Open(JobFile{PID: 7, Path: "/tmp/perf-7.map", UID: owner, MaxSize: 100}); err != nil {
			t.Fatalf("the process's own file: %v", err)
		} else {
			f.Close()
		}
		for _, uid := range []int{owner + 1, -1} {
			f, err := p.Open(JobFile{PID: 7, Path: "/tmp/perf-7.map", UID: uid, MaxSize: 100})
			if err == nil {
				f.Close()
				t.Errorf("uid %d: another user's file opened", uid)
			} else if !errors.Is(err, ErrOwner) {
				t.Errorf("uid %d: %v, want ErrOwner", uid, err)
			}
		}
	})
}

func TestOpenSizeCap(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		proc, root := jobRoot(t, "7")
		mustDo(t, os.WriteFile(filepath.Join(root, "tmp", "small"), make([]byte, 100), 0o644))
		// A sparse file claims a terabyte and holds nothing.
		sparse, err := os.Create(filepath.Join(root, "tmp", "sparse"))
		mustDo(t, err)
		mustDo(t, sparse.Truncate(1<<40))
		sparse.Close()
		p := fsAt(proc, walk)
		for _, tc := range []struct {
			path string
			max  int64
			ok   bool
		}{{"/tmp/small", 100, true}, {"/tmp/small", 99, false}, {"/tmp/sparse", 1 << 30, false}} {
			f, err := p.Open(JobFile{PID: 7, Path: tc.path, UID: me(), MaxSize: tc.max})
			if f != nil {
				f.Close()
			}
			if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrTooLarge)) {
				t.Errorf("%s with limit %d: %v", tc.path, tc.max, err)
			}
		}
		if _, err := p.Open(JobFile{PID: 7, Path: "/tmp/small", UID: me()}); err == nil {
			t.Error("opened with no size limit")
		}
	})
}

// A fixture map_files entry is an ordinary symlink; the kernel's is a magic
// link to the mapped object. Either way it must name that object.
func TestOpenMapping(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		proc, root := jobRoot(t, "7")
		lib := filepath.Join(root, "lib.so")
		mustDo(t, os.WriteFile(lib, []byte("\x7fELF"), 0o644))
		other := filepath.Join(root, "other.so")
		mustDo(t, os.WriteFile(other, []byte("\x7fELF"), 0o644))
		var st syscall.Stat_t
		mustDo(t, syscall.Stat(lib, &st))
		m := Mapping{Start: 0x1000, End: 0x2000, Perms: "r-xp", Dev: st.Dev, Inode: st.Ino, Path: "/lib.so"}
		p := fsAt(proc, walk)

		// No map_files: the path in the root, and it must be the mapped file.
		f, err := p.Open(JobFile{PID: 7, Mapping: &m, UID: me(), MaxSize: 100})
		if err != nil {
			t.Fatalf("by path: %v", err)
		}
		f.Close()
		// StatMapping identifies what Open would open, by the same checks.
		if info, err := p.StatMapping(7, m, me(), 100); err != nil || info != f.Info {
			t.Errorf("StatMapping by path: %+v, %v; Open: %+v", info, err, f.Info)
		}
		wrong := m
		wrong.Path = "/other.so"
		if _, err := p.Open(JobFile{PID: 7, Mapping: &wrong, UID: me(), MaxSize: 100}); !errors.Is(err, ErrNotMapped) {
			t.Errorf("another file at the path: %v, want ErrNotMapped", err)
		}
		if _, err := p.StatMapping(7, wrong, me(), 100); !errors.Is(err, ErrNotMapped) {
			t.Errorf("StatMapping of another file at the path: %v, want ErrNotMapped", err)
		}
		sameIno := m
		sameIno.Dev++ // the same inode number on another device is another file
		if _, err := p.Open(JobFile{PID: 7, Mapping: &sameIno, UID: me(), MaxSize: 100}); !errors.Is(err, ErrNotMapped) {
			t.Errorf("same inode, other device: %v, want ErrNotMapped", err)
		}
		deleted := m
		deleted.Deleted = true
		if _, err := p.Open(JobFile{PID: 7, Mapping: &deleted, UID: me(), MaxSize: 100}); err == nil {
			t.Error("a deleted file was looked up by its path")
		}

		// map_files wins over the path, and is held to type and size.
		mustDo(t, os.MkdirAll(filepath.Join(proc, "7", "map_files"), 0o755))
		// The kernel's link reaches an unlinked file; a fixture's needs a
		// second name of the inode.
		mustDo(t, os.Link(lib, filepath.Join(proc, "7", "mapped")))
		mustDo(t, os.Symlink(filepath.Join(proc, "7", "mapped"), filepath.Join(proc, "7", "map_files", m.Range())))
		mustDo(t, os.Remove(lib))
		f, err = p.Open(JobFile{PID: 7, Mapping: &deleted, UID: me(), MaxSize: 100})
		if err != nil {
			t.Fatalf("deleted, through map_files: %v", err)
		}
		f.Close()
		if _, err := p.Open(JobFile{PID: 7, Mapping: &deleted, UID: me(), MaxSize: 3}); !errors.Is(err, ErrTooLarge) {
			t.Errorf("map_files over the limit: %v", err)
		}
		if info, err := p.StatMapping(7, deleted, me(), 100); err != nil || info.ID.Ino != st.Ino {
			t.Errorf("StatMapping through map_files: %+v, %v", info, err)
		}
		if _, err := p.StatMapping(7, deleted, me(), 3); !errors.Is(err, ErrTooLarge) {
			t.Errorf("StatMapping through map_files over the limit: %v", err)
		}
		// A range remapped since maps was read names another file now.
		remapped := Mapping{Start: 0x5000, End: 0x6000, Dev: st.Dev, Inode: st.Ino, Path: "/lib.so", Deleted: true}
		mustDo(t, os.Symlink(other, filepath.Join(proc, "7", "map_files", remapped.Range())))
		if _, err := p.Open(JobFile{PID: 7, Mapping: &remapped, UID: me(), MaxSize: 100}); !errors.Is(err, ErrNotMapped) {
			t.Errorf("map_files to another inode: %v, want ErrNotMapped", err)
		}
		fifo := Mapping{Start: 0x3000, End: 0x4000, Path: "/fifo"}
		mustDo(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))
		mustDo(t, os.Symlink(filepath.Join(root, "fifo"), filepath.Join(proc, "7", "map_files", fifo.Range())))
		if _, err := p.Open(JobFile{PID: 7, Mapping: &fifo, UID: me(), MaxSize: 100}); !errors.Is(err, ErrNotRegular) {
			t.Errorf("map_files to a FIFO: %v", err)
		}
		if _, err := p.StatMapping(7, fifo, me(), 100); !errors.Is(err, ErrNotRegular) {
			t.Errorf("StatMapping of a FIFO through map_files: %v", err)
		}
	})
}

// The kernel's own map_files of this test process: root only
// (CAP_SYS_ADMIN), as for the agent.
func TestOpenMappingLive(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	p := New("")
	exe, err := os.Executable()
	mustDo(t, err)
	maps, err := p.Maps(os.Getpid(), func(m *Mapping) bool { return m.Exec() && m.FileBacked() })
	mustDo(t, err)
	var m *Mapping
	for i := range maps {
		if strings.HasSuffix(exe, filepath.Base(maps[i].Path)) {
			m = &maps[i]
		}
	}
	if m == nil {
		t.Fatalf("the test binary %s is not in its own maps: %+v", exe, maps)
	}
	f, err := p.Open(JobFile{PID: os.Getpid(), Mapping: m, UID: os.Getuid(), MaxSize: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Info.ID != m.File() {
		t.Errorf("opened %+v, maps says %+v", f.Info.ID, m.File())
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(f.Reader(), b); err != nil || string(b) != "\x7fELF" {
		t.Errorf("read %q, %v", b, err)
	}
}

func TestOpenGoneProcess(t *testing.T) {
	p := New(t.TempDir())
	_, err := p.Open(JobFile{PID: 9, Path: "/tmp/x", UID: 0, MaxSize: 1})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("gone process: %v", err)
	}
}
