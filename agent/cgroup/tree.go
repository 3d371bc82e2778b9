package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Verifier checks that a parsed Location is Slurm's own directory.
type Verifier interface {
	Verify(Location) error
}

var _ Verifier = (*Tree)(nil)

// Tree is the cgroup filesystems of the node, mounted under Root. Verify
// walks the Slurm part of a Location's path there, one directory at a time,
// without following links, and refuses it unless every directory is owned
// by Owner: slurmd (root) creates them, so a directory the job's user
// owns, or could have made, is not Slurm's.
type Tree struct {
	// Root is where the cgroup filesystems are mounted: /sys/fs/cgroup. The
	// v2 hierarchy is Root itself, or Root/unified on a hybrid host; a v1
	// controller's is Root/<controllers>.
	Root string
	// Owner is the uid Slurm's directories must have: 0 on a node (tests
	// that build a fixture tree set their own).
	Owner int

	once sync.Once
	v2   string
}

// NewTree returns the tree under root (default /sys/fs/cgroup), whose Slurm
// directories root must own.
func NewTree(root string) *Tree {
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	return &Tree{Root: root}
}

// V2Mount is the directory of the cgroup v2 hierarchy.
func (t *Tree) V2Mount() string {
	t.once.Do(func() {
		t.v2 = t.Root
		if _, err := os.Stat(filepath.Join(t.Root, "cgroup.controllers")); err != nil {
			t.v2 = filepath.Join(t.Root, "unified")
		}
	})
	return t.v2
}

// Mount is the directory of the hierarchy a Location's path lives in.
func (t *Tree) Mount(loc Location) string {
	if loc.Version == 2 {
		return t.V2Mount()
	}
	h := loc.Hierarchy
	if n, ok := strings.CutPrefix(h, "name="); ok {
		h = n
	}
	return filepath.Join(t.Root, h)
}

// Verify implements Verifier: nil, or a *Refused saying why not.
func (t *Tree) Verify(loc Location) error {
	refuse := func(reason, format string, args ...any) error {
		return &Refused{Reason: reason, Path: loc.Path, Detail: fmt.Sprintf(format, args...)}
	}
	if loc.Version == 1 && (loc.Hierarchy == "" || strings.ContainsAny(loc.Hierarchy, "/\x00") || strings.HasPrefix(loc.Hierarchy, ".")) {
		return refuse(ReasonUnverified, "v1 hierarchy %q names no mount", loc.Hierarchy)
	}
	mnt := t.Mount(loc)
	dir, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return refuse(ReasonUnverified, "opening the hierarchy %s: %v", mnt, err)
	}
	defer func() { unix.Close(dir) }()
	// walked names the directory reached, for errors only.
	rel := strings.Trim(loc.Slurm, "/")
	if rel == "" {
		return refuse(ReasonUnverified, "no Slurm directories in the path")
	}
	end := 0
	walked := func() string { return filepath.Join(mnt, rel[:end]) }
	for end < len(rel) {
		start := end
		if i := strings.IndexByte(rel[start:], '/'); i >= 0 {
			end = start + i
		} else {
			end = len(rel)
		}
		seg := rel[start:end]
		if seg == "" || seg == "." || seg == ".." {
			return refuse(ReasonUnverified, "empty or dot component")
		}
		fd, err := unix.Openat(dir, seg, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return refuse(ReasonUnverified, "%s is not a directory", walked())
			}
			return refuse(ReasonUnverified, "%s: %v", walked(), err)
		}
		unix.Close(dir)
		dir = fd
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return refuse(ReasonUnverified, "%s: %v", walked(), err)
		}
		if int(st.Uid) != t.Owner {
			return refuse(ReasonOwner, "%s is owned by uid %d, not %d", walked(), st.Uid, t.Owner)
		}
		if end < len(rel) {
			end++ // the slash
		}
	}
	return nil
}
