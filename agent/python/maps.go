package python

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/<pid>/maps.
type Mapping struct {
	Start, End, Offset uint64
	Perms              string
	Dev                string // "major:minor", as maps prints it
	Inode              uint64
	Path               string
}

// MapsReader lists a process's mappings.
type MapsReader interface {
	Maps(pid int) ([]Mapping, error)
}

// ProcMaps reads /proc/<pid>/maps under Root ("/proc" on a live node).
type ProcMaps struct{ Root string }

var _ MapsReader = ProcMaps{}

// maxMapsBytes bounds one maps file: a process can make its maps as long as
// it likes (one line per mapping, up to vm.max_map_count).
const maxMapsBytes = 16 << 20

func (p ProcMaps) Maps(pid int) ([]Mapping, error) {
	f, err := os.Open(filepath.Join(p.Root, strconv.Itoa(pid), "maps"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMaps(io.LimitReader(f, maxMapsBytes))
}

// ParseMaps parses maps lines; malformed lines are skipped.
func ParseMaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		if m, ok := parseMapsLine(sc.Bytes()); ok {
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

func parseMapsLine(b []byte) (Mapping, bool) {
	// start-end perms offset dev inode [path]; the path is the rest of the
	// line after the inode's padding and may contain spaces.
	var m Mapping
	var f [5][]byte
	rest := b
	for i := range f {
		rest = bytes.TrimLeft(rest, " \t")
		j := bytes.IndexAny(rest, " \t")
		if j < 0 {
			j = len(rest)
		}
		f[i], rest = rest[:j], rest[j:]
	}
	start, end, ok := bytes.Cut(f[0], []byte{'-'})
	if !ok {
		return m, false
	}
	var err [4]error
	m.Start, err[0] = strconv.ParseUint(string(start), 16, 64)
	m.End, err[1] = strconv.ParseUint(string(end), 16, 64)
	m.Offset, err[2] = strconv.ParseUint(string(f[2]), 16, 64)
	m.Inode, err[3] = strconv.ParseUint(string(f[4]), 10, 64)
	for _, e := range err {
		if e != nil {
			return m, false
		}
	}
	m.Perms, m.Dev = string(f[1]), string(f[3])
	m.Path = strings.TrimSuffix(string(bytes.TrimLeft(rest, " \t")), " (deleted)")
	return m, m.End > m.Start
}

func (m Mapping) String() string {
	return fmt.Sprintf("%x-%x %s %x %s", m.Start, m.End, m.Perms, m.Offset, m.Path)
}
