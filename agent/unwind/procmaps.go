package unwind

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Mapping is one line of /proc/<pid>/maps.
type Mapping struct {
	Start, End uint64
	Offset     uint64 // file offset of Start
	Exec       bool
	Inode      uint64
	Path       string // as printed, without " (deleted)"
	Deleted    bool
}

// FileBacked reports whether the mapping names a file (not [vdso], the
// heap or anonymous memory).
func (m Mapping) FileBacked() bool { return m.Inode != 0 && strings.HasPrefix(m.Path, "/") }

// MapsReader lists a process's mappings. agent/procfs will satisfy it; the
// loader only uses executable ones.
type MapsReader interface {
	Mappings(pid int) ([]Mapping, error)
}

// FileOpener opens the very file behind a mapping of a process, under the
// hostile-input rules (agent/procfs's opener: inside the process's root,
// no links followed, regular files only, owner and size checked). The
// loader reads the file only through what it returns.
type FileOpener interface {
	OpenMapping(pid int, m Mapping) (*os.File, error)
}

// ProcFS reads maps and opens mapped files under a proc root. It is the
// default until agent/procfs provides both: it opens a mapping through
// map_files, which names exactly the mapped object even if it was deleted,
// replaced or lives in another mount namespace, and checks that what it
// opened is a regular file with the mapped inode.
type ProcFS struct{ Root string }

var (
	_ MapsReader = ProcFS{}
	_ FileOpener = ProcFS{}
)

const (
	maxMapsBytes = 32 << 20 // a process with more loses unwinding beyond it
	maxMapsLine  = 8 << 10  // a path is at most PATH_MAX
)

func (p ProcFS) root() string {
	if p.Root == "" {
		return "/proc"
	}
	return p.Root
}

// Mappings reads <root>/<pid>/maps, bounded.
func (p ProcFS) Mappings(pid int) ([]Mapping, error) {
	f, err := os.Open(filepath.Join(p.root(), strconv.Itoa(pid), "maps"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMaps(io.LimitReader(f, maxMapsBytes))
}

// parseMaps parses maps lines; malformed lines and lines out of order are
// skipped (the kernel prints mappings sorted and disjoint).
func parseMaps(r io.Reader) ([]Mapping, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxMapsLine)
	var out []Mapping
	var prevEnd uint64
	for sc.Scan() {
		m, ok := parseMapsLine(sc.Text())
		if !ok || m.Start < prevEnd {
			continue
		}
		prevEnd = m.End
		out = append(out, m)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return out, err
	}
	return out, nil
}

// parseMapsLine parses "start-end perms offset dev inode [path]".
func parseMapsLine(line string) (Mapping, bool) {
	var fields [5]string
	rest := line
	for i := range fields {
		rest = strings.TrimLeft(rest, " ")
		j := strings.IndexByte(rest, ' ')
		if j < 0 {
			if i < 4 {
				return Mapping{}, false
			}
			j = len(rest)
		}
		fields[i], rest = rest[:j], rest[j:]
	}
	var m Mapping
	start, end, ok := strings.Cut(fields[0], "-")
	if !ok || len(fields[1]) < 4 {
		return Mapping{}, false
	}
	var err1, err2, err3, err4 error
	m.Start, err1 = strconv.ParseUint(start, 16, 64)
	m.End, err2 = strconv.ParseUint(end, 16, 64)
	m.Offset, err3 = strconv.ParseUint(fields[2], 16, 64)
	m.Inode, err4 = strconv.ParseUint(fields[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || m.End <= m.Start {
		return Mapping{}, false
	}
	m.Exec = fields[1][2] == 'x'
	m.Path = strings.TrimLeft(rest, " ")
	if p, cut := strings.CutSuffix(m.Path, " (deleted)"); cut {
		m.Path, m.Deleted = p, true
	}
	return m, true
}

// OpenMapping opens <root>/<pid>/map_files/<start>-<end> without blocking
// and accepts only a regular file with the mapped inode.
func (p ProcFS) OpenMapping(pid int, m Mapping) (*os.File, error) {
	path := filepath.Join(p.root(), strconv.Itoa(pid), "map_files", fmt.Sprintf("%x-%x", m.Start, m.End))
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || st.Ino != m.Inode {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: errors.New("not the mapped regular file")}
	}
	return f, nil
}
