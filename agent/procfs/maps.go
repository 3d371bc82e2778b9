package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapping is one line of /proc/<pid>/maps.
type Mapping struct {
	Start, End uint64
	Offset     uint64 // file offset of Start
	Perms      string // "r-xp" and the like
	Dev        uint64 // device of the mapped file, as unix.Mkdev(major, minor)
	Inode      uint64 // 0: no file (anonymous memory, [vdso], [stack])
	// Path is as the process's mount namespace names the file (or the
	// kernel's pseudo name, "[vdso]"), with " (deleted)" removed.
	Path    string
	Deleted bool // the file was unlinked after it was mapped
}

// Exec reports an executable mapping.
func (m *Mapping) Exec() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// FileBacked reports whether the mapping is of a file rather than a kernel
// pseudo mapping such as [vdso] or anonymous memory.
func (m *Mapping) FileBacked() bool { return m.Inode != 0 && strings.HasPrefix(m.Path, "/") }

// File is the identity of the mapped object: what any file opened for the
// mapping must be.
func (m *Mapping) File() FileID { return FileID{Dev: m.Dev, Ino: m.Inode} }

// Range is the mapping's name under /proc/<pid>/map_files.
func (m *Mapping) Range() string { return fmt.Sprintf("%x-%x", m.Start, m.End) }

const (
	// MaxMapsBytes bounds how much of a maps file is read; a process with
	// more mappings than this loses the remainder rather than costing
	// unbounded memory.
	MaxMapsBytes = 32 << 20
	// maxMapsLine bounds a single line; the kernel limits paths to PATH_MAX.
	maxMapsLine = 8192
	// MaxMappings bounds the mappings kept from one maps file: the kernel's
	// default vm.max_map_count (65530) and some room.
	MaxMappings = 1 << 17
)

const deletedSuffix = " (deleted)"

// Maps reads /proc/<pid>/maps and returns the mappings keep accepts (all of
// them when keep is nil); see ParseMaps. A process that is gone gives an
// error wrapping ErrGone.
func (p FS) Maps(pid int, keep func(*Mapping) bool) ([]Mapping, error) {
	maps, _, err := p.MapsRead(pid, keep)
	return maps, err
}

// MapsRead is Maps, and also says how many bytes of the maps file it read,
// for callers that bound the work a process costs them.
func (p FS) MapsRead(pid int, keep func(*Mapping) bool) ([]Mapping, int64, error) {
	path := p.path(pid, "maps")
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, gone(err)
	}
	defer f.Close()
	cr := &countingReader{r: f}
	maps, _, err := ParseMaps(cr, keep)
	if err != nil {
		return maps, cr.n, gone(&fs.PathError{Op: "read", Path: path, Err: err})
	}
	return maps, cr.n, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// ParseMaps parses a maps file, returning the mappings keep accepts (all
// when keep is nil) in the kernel's order (ascending, non-overlapping) and
// the number of lines skipped as malformed or out of order, so that lookups
// can rely on the ordering. An over-long line, or a mapping past
// MaxMappings kept, ends the parse, keeping what was read; only a read
// error is returned.
func ParseMaps(r io.Reader, keep func(*Mapping) bool) (maps []Mapping, bad int, err error) {
	sc := bufio.NewScanner(io.LimitReader(r, MaxMapsBytes))
	sc.Buffer(make([]byte, 0, 4096), maxMapsLine)
	var prevEnd uint64
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, ok := ParseMapsLine(string(line))
		if !ok || m.Start < prevEnd {
			bad++
			continue
		}
		prevEnd = m.End
		if keep == nil || keep(&m) {
			if len(maps) >= MaxMappings {
				return maps, bad + 1, nil
			}
			maps = append(maps, m)
		}
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return maps, bad + 1, nil
		}
		return maps, bad, err
	}
	return maps, bad, nil
}

// ParseMapsLine parses one maps line. It reports ok=false for anything that
// does not look like a mapping line.
//
// Format: start-end perms offset major:minor inode [path]. The path starts
// after the padding that follows the inode and may itself contain spaces.
func ParseMapsLine(line string) (m Mapping, ok bool) {
	rest := line
	var fields [5]string
	for i := range fields {
		rest = strings.TrimLeft(rest, " \t")
		j := strings.IndexAny(rest, " \t")
		if j < 0 {
			if i < 4 {
				return Mapping{}, false
			}
			j = len(rest)
		}
		fields[i], rest = rest[:j], rest[j:]
	}
	addrs, perms := fields[0], fields[1]
	dash := strings.IndexByte(addrs, '-')
	if dash < 0 || len(perms) < 4 {
		return Mapping{}, false
	}
	m.Perms = perms
	var err error
	if m.Start, err = strconv.ParseUint(addrs[:dash], 16, 64); err != nil {
		return Mapping{}, false
	}
	if m.End, err = strconv.ParseUint(addrs[dash+1:], 16, 64); err != nil || m.End <= m.Start {
		return Mapping{}, false
	}
	if m.Offset, err = strconv.ParseUint(fields[2], 16, 64); err != nil {
		return Mapping{}, false
	}
	major, minor, found := strings.Cut(fields[3], ":")
	if !found {
		return Mapping{}, false
	}
	maj, err1 := strconv.ParseUint(major, 16, 32)
	mnr, err2 := strconv.ParseUint(minor, 16, 32)
	if err1 != nil || err2 != nil {
		return Mapping{}, false
	}
	m.Dev = unix.Mkdev(uint32(maj), uint32(mnr))
	if m.Inode, err = strconv.ParseUint(fields[4], 10, 64); err != nil {
		return Mapping{}, false
	}
	path := strings.TrimLeft(rest, " \t")
	if p, cut := strings.CutSuffix(path, deletedSuffix); cut {
		path, m.Deleted = p, true
	}
	m.Path = path
	return m, true
}
