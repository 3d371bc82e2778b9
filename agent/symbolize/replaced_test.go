package symbolize

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// fakeProcess writes <root>/<pid>/maps describing bin's executable segment
// as mapped at its link address (non-PIE), with the device and inode of the
// file now at root/<pid>/root/bin/prog.
func fakeProcess(t *testing.T, root string, pid int, bin string) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	must(t, os.MkdirAll(filepath.Join(dir, "root", "bin"), 0o755))
	prog := filepath.Join(dir, "root", "bin", "prog")
	b, err := os.ReadFile(bin)
	must(t, err)
	tmp := prog + ".new"
	must(t, os.WriteFile(tmp, b, 0o755))
	must(t, os.Rename(tmp, prog)) // a new inode, as a package upgrade does
	fi, err := os.Stat(prog)
	must(t, err)
	f := openELFForTest(t, prog)
	var maps string
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			start := p.Vaddr &^ 0xfff
			end := (p.Vaddr + p.Memsz + 0xfff) &^ 0xfff
			st := fi.Sys().(*syscall.Stat_t)
			maps += fmt.Sprintf("%x-%x r-xp %08x %02x:%02x %d    /bin/prog\n",
				start, end, p.Off&^0xfff, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644))
}

func symbolAddr(t *testing.T, bin, name string) uint64 {
	t.Helper()
	syms, err := openELFForTest(t, bin).Symbols()
	must(t, err)
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("%s not in %s", name, bin)
	return 0
}

// TestBinaryReplacedOnDisk: after the file behind a path is replaced, a
// process that still maps the old inode must not get names from the new
// file, and a process mapping the new file must get the new names.
func TestBinaryReplacedOnDisk(t *testing.T) {
	dir := t.TempDir()
	oldBin, newBin := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	compile(t, "gcc", "-O1", "-no-pie", "-fno-pie", "-o", oldBin, srcPath("target.c"))
	// Same code and layout, different name at the same address.
	compile(t, "gcc", "-O1", "-no-pie", "-fno-pie", "-Dtarget_function=replaced_function", "-o", newBin, srcPath("target.c"))
	addr := symbolAddr(t, oldBin, "target_function")
	if a := symbolAddr(t, newBin, "replaced_function"); a != addr {
		t.Fatalf("layouts differ: %#x vs %#x", a, addr)
	}

	root := t.TempDir()
	fakeProcess(t, root, 100, oldBin)
	s := New(Options{Proc: procfs.New(root)})
	checkResolves(t, s.User(procfs.ID{PID: 100}, []uint64{addr}), "target_function")

	// Replace the file; pid 100 still maps the old inode.
	oldMaps, err := os.ReadFile(filepath.Join(root, "100", "maps"))
	must(t, err)
	fakeProcess(t, root, 100, newBin)
	must(t, os.WriteFile(filepath.Join(root, "100", "maps"), oldMaps, 0o644))

	// Cached: the old process still gets the old (correct) names.
	checkResolves(t, s.User(procfs.ID{PID: 100}, []uint64{addr}), "target_function")

	// A fresh symbolizer cannot reach the old file (no map_files here) and
	// must refuse the new one rather than misname the frame.
	fresh := New(Options{Proc: procfs.New(root)})
	checkResolves(t, fresh.User(procfs.ID{PID: 100}, []uint64{addr}), "")
	if n := fresh.Stats().Errors[ErrFileIdentity]; n != 1 {
		t.Errorf("file_identity errors = %d, want 1", n)
	}

	// A new process mapping the new file gets the new names.
	fakeProcess(t, root, 101, newBin)
	checkResolves(t, s.User(procfs.ID{PID: 101}, []uint64{addr}), "replaced_function")
}

// TestReplacedWhileRunning runs a real process, replaces its executable on
// disk, and checks the running process still resolves through map_files.
// map_files needs CAP_SYS_ADMIN.
func TestReplacedWhileRunning(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	dir := t.TempDir()
	bin, newBin := filepath.Join(dir, "prog"), filepath.Join(dir, "new")
	compile(t, "gcc", "-O1", "-no-pie", "-fno-pie", "-o", bin, srcPath("target.c"))
	compile(t, "gcc", "-O1", "-no-pie", "-fno-pie", "-Dtarget_function=replaced_function", "-o", newBin, srcPath("target.c"))
	pid, addr := startTarget(t, bin)
	must(t, os.Rename(newBin, bin))
	s := New(Options{})
	checkResolves(t, s.User(procfs.ID{PID: pid}, []uint64{addr}), "target_function")
}
