package symbolize

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Bounds for a JIT perf map, which grows for as long as the process runs.
// Past them the map is refused whole (too_large); within them it is charged
// to the job's share of the memory budget.
const (
	maxPerfMapBytes   = 64 << 20
	maxPerfMapEntries = 1 << 20
	maxPerfMapLine    = 4096 // longer lines are skipped as malformed
	perfEntryBytes    = 48   // a perfEntry, besides its name
)

type perfEntry struct {
	start, end uint64
	name       string
	seq        int // insertion order: a later entry for reused code wins
}

// perfMap is what was read of /tmp/perf-<pid>.map, a file the job writes
// (and so opened by procfs's rules). It is only used under its process's
// lock.
type perfMap struct {
	file    procfs.FileID
	readOff int64 // bytes consumed, always at a line boundary
	entries []perfEntry
	bad     int   // malformed lines seen
	bytes   int64 // what entries cost, charged
	charge  *budget.Entry
}

// perfFrom is where the next read of a perf map starts.
type perfFrom struct {
	file    procfs.FileID
	readOff int64
}

// perfRead is what one read of a perf map found.
type perfRead struct {
	file    procfs.FileID
	readOff int64
	reset   bool // the file was replaced or shrank: entries replace the old
	entries []perfEntry
	bad     int
	err     error
}

// errPerfMapFull is returned for a perf map with more entries than
// maxPerfMapEntries.
var errPerfMapFull = errors.New("perf map has too many entries")

// readPerfMap reads whatever was appended since from, or the whole file
// when it is another file now or shrank, streaming (only the new entries
// are held), charging every byte to the owner's read allowance. It touches
// nothing but its arguments: it runs under the guard.
func readPerfMap(proc procfs.FS, req procfs.JobFile, from perfFrom, work *budget.Work, owner string, progress func()) perfRead {
	f, err := proc.Open(req)
	if err != nil {
		return perfRead{err: err}
	}
	defer f.Close()
	res := perfRead{file: f.Info.ID, readOff: from.readOff}
	size := f.Info.Size
	if f.Info.ID != from.file || size < from.readOff {
		res.readOff, res.reset = 0, true
	}
	if size <= res.readOff {
		return res
	}
	// All of it from the allowance, or none: a read cut short would be
	// work for nothing.
	if !work.Take(owner, size-res.readOff) {
		return perfRead{err: budget.ErrWorkLimit}
	}
	br := bufio.NewReaderSize(io.NewSectionReader(progressReader{f.Reader(), progress}, res.readOff, size-res.readOff), 64<<10)
	var line []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: malformed, skipped whole.
			long = true
			res.readOff += int64(len(chunk))
			continue
		}
		if err != nil {
			// Only complete lines: the writer may be mid-line. A partial
			// line is read again next time.
			if err != io.EOF {
				res.err = err
			}
			return res
		}
		res.readOff += int64(len(chunk))
		if long || len(chunk) > maxPerfMapLine {
			long = false
			res.bad++
			continue
		}
		line = bytes.TrimRight(chunk, "\r\n")
		e, ok := parsePerfMapLine(line)
		if !ok {
			res.bad++
			continue
		}
		if len(res.entries) >= maxPerfMapEntries {
			res.err = errPerfMapFull
			return res
		}
		res.entries = append(res.entries, e)
	}
}

// merged is the map after a read: p (nil before the first) with the new
// entries added, or the new entries alone when the file was replaced.
func (p *perfMap) merged(res perfRead) *perfMap {
	next := &perfMap{file: res.file, readOff: res.readOff, bad: res.bad}
	if p != nil && !res.reset {
		next.entries, next.bad, next.bytes = p.entries, next.bad+p.bad, p.bytes
	}
	next.add(res.entries)
	return next
}

// progressReader reports each read to a guard.
type progressReader struct {
	r        io.ReaderAt
	progress func()
}

func (p progressReader) ReadAt(b []byte, off int64) (int, error) {
	n, err := p.r.ReadAt(b, off)
	p.progress()
	return n, err
}

// add merges new entries into the map, in insertion order.
func (p *perfMap) add(entries []perfEntry) {
	for _, e := range entries {
		e.seq = len(p.entries)
		p.entries = append(p.entries, e)
		p.bytes += perfEntryBytes + int64(len(e.name))
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
	if v, ok := parseHexDigits(b); ok {
		return v, nil
	}
	return 0, strconv.ErrSyntax
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
