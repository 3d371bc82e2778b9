package procfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Files a job controls (a JIT's perf map, the ELF files it maps, anything
// under /proc/<pid>/root) are opened by Open and by nothing else in the
// agent. The agent is root: without these rules, a job could make it read
// another user's files into its profile (a symlink, a magic link through
// its own /proc), block it forever (a FIFO), run a driver's open (a device
// node), or have it parse a terabyte (a sparse file).

// FileID is a file's identity: an inode number alone is not one, since
// every filesystem numbers its own inodes.
type FileID struct{ Dev, Ino uint64 }

// FileInfo is what fstat said about an opened file.
type FileInfo struct {
	ID        FileID
	Size      int64
	MtimeNsec int64
	UID       int
}

// File is a job's file, open for reading. Read it through Reader, which
// stops at the size checked when it was opened, even if the file grows.
type File struct {
	*os.File
	Info FileInfo
	// reads, when set, is what Reader reads through: the file, charged to
	// its job's read allowance (Mapped.Work).
	reads io.ReaderAt
}

// Reader returns a reader of the file's first Info.Size bytes.
func (f *File) Reader() *io.SectionReader {
	var r io.ReaderAt = f.File
	if f.reads != nil {
		r = f.reads
	}
	return io.NewSectionReader(r, 0, f.Info.Size)
}

// JobFile names a file of a process and says what it must be.
type JobFile struct {
	PID int
	// Path is the file's absolute path in the process's mount namespace,
	// resolved inside the process's root (<proc-root>/<pid>/root). Ignored
	// when Mapping is set.
	Path string
	// Mapping names the file as the object mapped there. It is opened
	// through <proc-root>/<pid>/map_files/<range>, which names exactly the
	// mapped object even when it was deleted, replaced on disk or lives in
	// another mount namespace (root only: CAP_SYS_ADMIN). Where that fails,
	// a file that was not deleted is looked up by Mapping.Path in the
	// process's root like any Path, and must then be the mapped object by
	// device and inode.
	//
	// Through map_files only the inode is compared (it catches a range
	// remapped since maps was read): maps prints the device of the file's
	// superblock, which fstat does not report on btrfs subvolumes, while the
	// object itself is the kernel's, not a name a job chose.
	Mapping *Mapping
	// UID is the process's real uid. A file found by path must be owned by
	// it or by root (or by the agent's own user, which is root in
	// production). -1: unknown, root only. The object map_files names is
	// not held to this: the process mapped it, so it could read it.
	UID int
	// MaxSize is the largest file accepted, checked against fstat before
	// anything is read. It must be positive.
	MaxSize int64
}

// Reasons Open refuses a file, besides the usual fs errors.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrOwner      = errors.New("owned by neither the process's user nor root")
	ErrTooLarge   = errors.New("file larger than allowed")
	ErrNotMapped  = errors.New("not the file the process maps")
	ErrLink       = errors.New("path goes through a symbolic link")
)

// agentUID is the agent's own user; tests change it.
var agentUID = os.Geteuid()

// selfFD names the agent's own descriptors (in the agent's /proc, not the
// proc root's: the descriptors are the agent's).
const selfFD = "/proc/self/fd/"

// FDPath is a path that names exactly the open file fd, for an interface
// that only takes a path (the kernel's uprobes): whatever a job does to the
// file's name, the path reaches the file that was checked.
func FDPath(fd uintptr) string { return selfFD + strconv.FormatUint(uint64(fd), 10) }

// Open opens a file that a process controls, by these rules:
//
//   - Paths are resolved inside the process's root, with no symbolic or
//     magic link followed: openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
//     RESOLVE_NO_MAGICLINKS) where the kernel has it (5.6), otherwise a
//     walk of the cleaned path one component at a time with O_NOFOLLOW.
//   - The file is first opened O_PATH, which runs no driver or FIFO open,
//     and checked with fstat: a regular file, within MaxSize, owned as
//     JobFile.UID says, and (for a mapping) the mapped object by device
//     and inode. Only then is it reopened for reading through the
//     descriptor, O_NONBLOCK | O_CLOEXEC | O_NOCTTY, so the object read is
//     the object checked.
//
// A process that is gone gives an error wrapping fs.ErrNotExist; a refused
// file, one wrapping one of the Err* reasons above.
func (p FS) Open(req JobFile) (*File, error) {
	if req.MaxSize <= 0 {
		return nil, fmt.Errorf("procfs: open pid %d: no size limit given", req.PID)
	}
	path := req.Path
	var want *FileID
	if m := req.Mapping; m != nil {
		id := m.File()
		mf := p.path(req.PID, "map_files/"+m.Range())
		// O_PATH follows the magic link without opening the object.
		fd, err := unix.Open(mf, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err == nil {
			return reopen(fd, mf, -1, req.MaxSize, &FileID{Ino: id.Ino}, false)
		}
		if m.Deleted {
			return nil, &fs.PathError{Op: "open", Path: mf, Err: err}
		}
		path, want = m.Path, &id
	}
	name := filepath.Join(p.path(req.PID, "root"), path)
	fd, err := p.resolve(req.PID, path)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return reopen(fd, name, req.UID, req.MaxSize, want, true)
}

// StatMapping identifies the file mapped at m in process pid without
// opening it for reading: Open's first step (O_PATH through map_files, or
// by path inside the process's root, then fstat and the same checks), so
// that a caller that knows the file by its identity reads nothing more.
func (p FS) StatMapping(pid int, m Mapping, uid int, maxSize int64) (FileInfo, error) {
	id := m.File()
	mf := p.path(pid, "map_files/"+m.Range())
	if fd, err := unix.Open(mf, unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
		defer unix.Close(fd)
		return check(fd, mf, -1, maxSize, &FileID{Ino: id.Ino}, false)
	} else if m.Deleted {
		return FileInfo{}, &fs.PathError{Op: "open", Path: mf, Err: err}
	}
	name := filepath.Join(p.path(pid, "root"), m.Path)
	fd, err := p.resolve(pid, m.Path)
	if err != nil {
		return FileInfo{}, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	return check(fd, name, uid, maxSize, &id, true)
}

// resolve opens path inside the root of process pid, O_PATH, following no
// link.
func (p FS) resolve(pid int, path string) (int, error) {
	clean := filepath.Clean("/" + path) // ".." cannot climb above the root
	if clean == "/" {
		return -1, ErrNotRegular
	}
	// Following this one magic link is the point: it is the process's root.
	root, err := unix.Open(p.path(pid, "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	if !p.walkOnly && haveOpenat2() {
		return resolveOpenat2(root, clean)
	}
	return resolveWalk(root, clean)
}

func resolveOpenat2(root int, clean string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 8 {
		fd, err := unix.Openat2(root, clean[1:], &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EAGAIN):
			continue // a rename raced the lookup; the kernel asks for a retry
		case errors.Is(err, unix.ELOOP):
			return -1, ErrLink
		default:
			return -1, err
		}
	}
	return -1, unix.EAGAIN
}

// resolveWalk is openat2's rules by hand: one component at a time, each
// opened O_PATH | O_NOFOLLOW relative to the last, so no link anywhere in
// the path is followed, and no ".." is left to climb with.
func resolveWalk(root int, clean string) (int, error) {
	comps := strings.Split(clean[1:], "/")
	dir := root
	closeDir := func() {
		if dir != root {
			unix.Close(dir)
		}
	}
	for i, c := range comps {
		flags := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(comps)-1 {
			flags |= unix.O_DIRECTORY
		}
		fd, err := unix.Openat(dir, c, flags, 0)
		if err != nil {
			var st unix.Stat_t
			if errors.Is(err, unix.ENOTDIR) && unix.Fstatat(dir, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
				st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = ErrLink
			}
			closeDir()
			return -1, err
		}
		closeDir()
		dir = fd
	}
	// O_PATH | O_NOFOLLOW opens a trailing link itself: refuse it here.
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		unix.Close(dir)
		return -1, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		unix.Close(dir)
		return -1, ErrLink
	}
	return dir, nil
}

var openat2Once = sync.OnceValue(func() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
	if err != nil {
		return false // ENOSYS before 5.6, EPERM under some seccomp filters
	}
	unix.Close(fd)
	return true
})

func haveOpenat2() bool { return openat2Once() }

// reopen checks the O_PATH descriptor fd (which it closes) and opens its
// file for reading. byPath: the file was found by a path a job controls,
// so its owner is checked (uid < 0: root-owned files only) and want's
// device with its inode; otherwise it is the object map_files names.
func reopen(fd int, name string, uid int, maxSize int64, want *FileID, byPath bool) (*File, error) {
	defer unix.Close(fd)
	if _, err := check(fd, name, uid, maxSize, want, byPath); err != nil {
		return nil, err
	}
	rfd, err := unix.Open(FDPath(uintptr(fd)), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	// The same object, by construction; fstat again for the numbers of the
	// descriptor that is read.
	info, err := check(rfd, name, uid, maxSize, want, byPath)
	if err != nil {
		unix.Close(rfd)
		return nil, err
	}
	return &File{File: os.NewFile(uintptr(rfd), name), Info: info}, nil
}

func check(fd int, name string, uid int, maxSize int64, want *FileID, byPath bool) (FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileInfo{}, &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	info := FileInfo{ID: FileID{Dev: st.Dev, Ino: st.Ino}, Size: st.Size,
		MtimeNsec: st.Mtim.Nano(), UID: int(st.Uid)}
	refuse := func(why error, detail string) (FileInfo, error) {
		return FileInfo{}, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w%s", why, detail)}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return refuse(ErrNotRegular, fmt.Sprintf(" (mode %#o)", st.Mode&unix.S_IFMT))
	}
	if want != nil && (info.ID.Ino != want.Ino || byPath && info.ID.Dev != want.Dev) {
		return refuse(ErrNotMapped, fmt.Sprintf(" (device %d inode %d, mapped %d/%d)", info.ID.Dev, info.ID.Ino, want.Dev, want.Ino))
	}
	if byPath && info.UID != 0 && info.UID != agentUID && (uid < 0 || info.UID != uid) {
		return refuse(ErrOwner, fmt.Sprintf(" (uid %d, process uid %d)", info.UID, uid))
	}
	if st.Size < 0 || st.Size > maxSize {
		return refuse(ErrTooLarge, fmt.Sprintf(" (%d bytes, limit %d)", st.Size, maxSize))
	}
	return info, nil
}

// Kallsyms opens <proc-root>/kallsyms, the kernel's symbol table.
func (p FS) Kallsyms() (*os.File, error) { return os.Open(filepath.Join(p.Root, "kallsyms")) }
