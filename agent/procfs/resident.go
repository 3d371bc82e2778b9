package procfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
)

// ErrNotResident: what a read of a process's memory (its environment)
// would have to fetch from a file is not in memory.
var ErrNotResident = errors.New("process memory not resident")

// The kernel reads /proc/<pid>/environ from the process's own memory,
// faulting its pages in; a process can map a file of its own FUSE mount
// over its environment strings, and the read then waits for a daemon the
// job runs, uninterruptibly once the daemon has taken the request. So the
// environment is read only when its pages are in the process's page
// tables (or in swap), as /proc/<pid>/pagemap says without faulting
// anything in. A tree without pagemap (a fixture) is read as it is.

// environResident checks that the pages of pid's environment are
// resident.
func (p FS) environResident(pid int) error {
	var start, end uint64
	err := p.withFile(pid, "stat", maxStatBytes, func(b []byte, _ bool) error {
		rest := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
		if len(rest) < 49 { // env_start, env_end: fields 50 and 51 (Linux 3.5)
			return nil
		}
		start, _ = strconv.ParseUint(string(rest[47]), 10, 64)
		end, _ = strconv.ParseUint(string(rest[48]), 10, 64)
		return nil
	})
	if err != nil || end <= start {
		// No stat to say where the environment is (a fixture tree, or a
		// process gone, whose environ read fails as well): as it is.
		return nil
	}
	f, err := os.Open(p.path(pid, "pagemap"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return gone(err)
	}
	defer f.Close()
	page := uint64(os.Getpagesize()) // #nosec G115 -- a positive constant of the system
	end = min(end, start+MaxEnvironBytes)
	first, last := start/page, (end-1)/page
	b := make([]byte, (last-first+1)*8)
	off := int64(first * 8) // #nosec G115 -- an address of 64 bits over the page size, times 8: below 2^63
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return gone(err)
	}
	for pg := first; pg <= last; pg++ {
		if e := binary.LittleEndian.Uint64(b[(pg-first)*8:]); e&(1<<63|1<<62) == 0 { // present, swapped
			return fmt.Errorf("pid %d: environment page 0x%x: %w", pid, pg*page, ErrNotResident)
		}
	}
	return nil
}
