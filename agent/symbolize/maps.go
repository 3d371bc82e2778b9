package symbolize

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"strings"
)

// mapping is one executable line of /proc/<pid>/maps.
type mapping struct {
	start, end uint64
	offset     uint64 // file offset of start
	inode      uint64
	path       string // as printed, " (deleted)" removed
	deleted    bool
	file       *fileRef // resolved lazily on first lookup
}

const (
	// maxMapsBytes bounds how much of a maps file is read; a process with more
	// mappings than this loses symbols for the remainder rather than costing
	// unbounded memory.
	maxMapsBytes = 32 << 20
	// maxMapsLine bounds a single line; the kernel limits paths to PATH_MAX.
	maxMapsLine = 8192
)

const deletedSuffix = " (deleted)"

// parseMapsLine parses one maps line. It reports ok=false for anything that
// does not look like a mapping line; callers skip those.
//
// Format: start-end perms offset major:minor inode [path]. The path starts
// after the padding that follows the inode and may itself contain spaces.
func parseMapsLine(line string) (m mapping, perms string, ok bool) {
	rest := line
	var fields [5]string
	for i := range fields {
		rest = strings.TrimLeft(rest, " \t")
		j := strings.IndexAny(rest, " \t")
		if j < 0 {
			if i < 4 {
				return mapping{}, "", false
			}
			j = len(rest)
		}
		fields[i], rest = rest[:j], rest[j:]
	}
	addrs, perms := fields[0], fields[1]
	dash := strings.IndexByte(addrs, '-')
	if dash < 0 || len(perms) < 4 {
		return mapping{}, "", false
	}
	var err error
	if m.start, err = strconv.ParseUint(addrs[:dash], 16, 64); err != nil {
		return mapping{}, "", false
	}
	if m.end, err = strconv.ParseUint(addrs[dash+1:], 16, 64); err != nil || m.end <= m.start {
		return mapping{}, "", false
	}
	if m.offset, err = strconv.ParseUint(fields[2], 16, 64); err != nil {
		return mapping{}, "", false
	}
	if strings.IndexByte(fields[3], ':') < 0 {
		return mapping{}, "", false
	}
	if m.inode, err = strconv.ParseUint(fields[4], 10, 64); err != nil {
		return mapping{}, "", false
	}
	path := strings.TrimLeft(rest, " \t")
	if strings.HasSuffix(path, deletedSuffix) {
		path = strings.TrimSuffix(path, deletedSuffix)
		m.deleted = true
	}
	m.path = path
	return m, perms, true
}

// parseMaps returns the executable mappings of a maps file, sorted as the
// kernel prints them (ascending, non-overlapping). Malformed lines and lines
// out of order are skipped so that lookups can rely on the ordering.
func parseMaps(r io.Reader) (maps []mapping, bad int) {
	sc := bufio.NewScanner(io.LimitReader(r, maxMapsBytes))
	sc.Buffer(make([]byte, 0, 4096), maxMapsLine)
	var prevEnd uint64
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, perms, ok := parseMapsLine(string(line))
		if !ok || m.start < prevEnd {
			bad++
			continue
		}
		prevEnd = m.end
		if perms[2] != 'x' {
			continue
		}
		maps = append(maps, m)
	}
	if sc.Err() != nil {
		bad++ // an over-long line ends the scan; keep what was read
	}
	return maps, bad
}

// findMapping returns the mapping containing addr, or nil.
func findMapping(maps []mapping, addr uint64) *mapping {
	lo, hi := 0, len(maps)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		switch {
		case addr < maps[mid].start:
			hi = mid
		case addr >= maps[mid].end:
			lo = mid + 1
		default:
			return &maps[mid]
		}
	}
	return nil
}

// isFileBacked reports whether a mapping path names a file rather than a
// kernel pseudo mapping such as [vdso] or an anonymous region.
func (m *mapping) isFileBacked() bool {
	return m.inode != 0 && strings.HasPrefix(m.path, "/")
}
