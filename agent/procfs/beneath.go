package procfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Files beneath a directory the agent was pointed at (a job's cgroup files
// under the cgroup root) are the kernel's on a node, but the tree is a flag,
// a fixture in tests, and a path inside it comes from /proc/<pid>/cgroup.
// They are read by the rules of Open: resolved beneath the base with no
// link followed, opened O_PATH and checked (a regular file owned by root or
// the agent), then read through the descriptor O_NONBLOCK. cgroupfs reports
// every file's size as 0, so the bound is on what is read: at most limit
// bytes, or ErrTooLarge.

// ReadFileBeneath reads base/rel. base itself may be reached through links
// (it is the admin's layout: /sys/fs/cgroup/cpuacct is often a link to
// cpu,cpuacct); nothing in rel may be one. A missing file gives an error
// wrapping fs.ErrNotExist.
func ReadFileBeneath(base, rel string, limit int) ([]byte, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("procfs: read %s: no size limit given", rel)
	}
	name := filepath.Join(base, rel)
	fd, err := openBeneath(base, rel)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	if _, err := check(fd, name, -1, int64(limit), nil, true); err != nil {
		return nil, err
	}
	rfd, err := unix.Open(FDPath(uintptr(fd)), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(rfd)
	if _, err := check(rfd, name, -1, int64(limit), nil, true); err != nil {
		return nil, err
	}
	buf := make([]byte, limit+1)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(rfd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n > limit {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w (more than %d bytes)", ErrTooLarge, limit)}
	}
	return buf[:n], nil
}

// ErrNotDir is the reason ReadDirBeneath refuses a path that is not a
// directory.
var ErrNotDir = errors.New("not a directory")

// ReadDirBeneath lists the subdirectories of base/rel (rel "" is base
// itself), by the rules of ReadFileBeneath: no link in rel, the directory
// owned by root, the agent or owner (-1: none; Slurm's cgroup v1 plugin
// gives a job's step directories to the job's user, while the files in
// them stay the kernel's, root's). At most max names are returned; more
// is ErrTooLarge, with none of them.
func ReadDirBeneath(base, rel string, max, owner int) ([]string, error) {
	name := filepath.Join(base, rel)
	var fd int
	var err error
	if clean := filepath.Clean("/" + rel); clean == "/" {
		fd, err = unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		fd, err = openBeneath(base, rel)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNotDir}
	}
	if st.Uid != 0 && int(st.Uid) != agentUID && (owner < 0 || int(st.Uid) != owner) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (uid %d)", ErrOwner, st.Uid)}
	}
	dfd, err := unix.Open(FDPath(uintptr(fd)), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	d := os.NewFile(uintptr(dfd), name)
	defer d.Close()
	var out []string
	for {
		ents, err := d.ReadDir(256)
		for _, e := range ents {
			// Types come from getdents: no stat, no link followed.
			if e.Type()&fs.ModeType != fs.ModeDir {
				continue
			}
			if len(out) == max {
				return nil, &fs.PathError{Op: "readdir", Path: name, Err: fmt.Errorf("%w (more than %d directories)", ErrTooLarge, max)}
			}
			out = append(out, e.Name())
		}
		if errors.Is(err, io.EOF) || err == nil && len(ents) == 0 {
			return out, nil
		}
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
		}
	}
}

// openBeneath opens base/rel O_PATH, rel resolved inside base with no link
// followed.
func openBeneath(base, rel string) (int, error) {
	clean := filepath.Clean("/" + rel) // ".." cannot climb above base
	if clean == "/" {
		return -1, ErrNotRegular
	}
	root, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	if !beneathWalkOnly && haveOpenat2() {
		return resolveOpenat2(root, clean)
	}
	return resolveWalk(root, clean)
}

// beneathWalkOnly resolves without openat2, as on kernels before Linux
// 5.6; tests cover both ways.
var beneathWalkOnly bool
