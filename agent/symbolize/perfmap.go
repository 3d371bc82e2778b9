package symbolize

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"strconv"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Bounds for a JIT perf map, which grows for as long as the process runs.
const (
	maxPerfMapBytes   = 64 << 20
	maxPerfMapEntries = 1 << 20
)

type perfEntry struct {
	start, end uint64
	name       string
	seq        int // insertion order: a later entry for reused code wins
}

// perfMap is an incrementally read /tmp/perf-<pid>.map, a file the job
// writes (and so opened by procfs's rules).
type perfMap struct {
	proc    procfs.FS
	req     procfs.JobFile
	file    procfs.FileID
	readOff int64 // bytes consumed, always at a line boundary
	entries []perfEntry
	bad     int // malformed lines seen
}

// refresh reads whatever was appended since the last read. A file that
// shrank or is another file now was rewritten, so it is read again from
// scratch. A map larger than maxPerfMapBytes is refused whole.
func (p *perfMap) refresh() error {
	f, err := p.proc.Open(p.req)
	if err != nil {
		return err
	}
	defer f.Close()
	size := f.Info.Size
	if f.Info.ID != p.file || size < p.readOff {
		p.file, p.readOff, p.entries, p.bad = f.Info.ID, 0, nil, 0
	}
	limit := size - p.readOff
	if limit <= 0 {
		return nil
	}
	buf := make([]byte, limit)
	n, err := f.Reader().ReadAt(buf, p.readOff)
	if err != nil && err != io.EOF {
		return err
	}
	buf = buf[:n]
	// Only complete lines: the writer may be mid-line.
	end := bytes.LastIndexByte(buf, '\n')
	if end < 0 {
		return nil
	}
	p.readOff += int64(end + 1)
	sc := bufio.NewScanner(bytes.NewReader(buf[:end+1]))
	sc.Buffer(nil, len(buf)+1)
	for sc.Scan() && len(p.entries) < maxPerfMapEntries {
		e, ok := parsePerfMapLine(sc.Bytes())
		if !ok {
			p.bad++
			continue
		}
		e.seq = len(p.entries)
		p.entries = append(p.entries, e)
	}
	slices.SortStableFunc(p.entries, func(a, b perfEntry) int {
		if a.start != b.start {
			if a.start < b.start {
				return -1
			}
			return 1
		}
		return a.seq - b.seq
	})
	return nil
}

// parsePerfMapLine parses "START SIZE name", START and SIZE in hex with an
// optional 0x prefix; the name runs to the end of the line.
func parsePerfMapLine(line []byte) (perfEntry, bool) {
	f1 := bytes.IndexByte(line, ' ')
	if f1 <= 0 {
		return perfEntry{}, false
	}
	rest := line[f1+1:]
	f2 := bytes.IndexByte(rest, ' ')
	if f2 <= 0 {
		return perfEntry{}, false
	}
	start, err1 := parseHex(line[:f1])
	size, err2 := parseHex(rest[:f2])
	name := bytes.TrimSpace(rest[f2+1:])
	if err1 != nil || err2 != nil || size == 0 || start+size < start || len(name) == 0 {
		return perfEntry{}, false
	}
	return perfEntry{start: start, end: start + size, name: string(name)}, true
}

func parseHex(b []byte) (uint64, error) {
	b = bytes.TrimPrefix(bytes.TrimPrefix(b, []byte("0x")), []byte("0X"))
	return strconv.ParseUint(string(b), 16, 64)
}

// lookup returns the newest entry covering addr.
func (p *perfMap) lookup(addr uint64) (string, bool) {
	i, _ := slices.BinarySearchFunc(p.entries, addr+1, func(e perfEntry, a uint64) int {
		if e.start < a {
			return -1
		}
		return 1
	})
	// entries[:i] start at or below addr; scan back over the few that may
	// overlap (code regions are reused), preferring the newest.
	best, found := -1, false
	for j := i - 1; j >= 0 && j >= i-8; j-- {
		e := &p.entries[j]
		if addr < e.end && (!found || e.seq > p.entries[best].seq) {
			best, found = j, true
		}
	}
	if !found {
		return "", false
	}
	return p.entries[best].name, true
}
