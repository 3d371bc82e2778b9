package python

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// What the tracker reads of a process. process_vm_readv faults the
// target's pages in, and a page of a file on the job's own FUSE mount
// sends a read to a daemon the job runs, which may never answer. So reads
// touch only anonymous memory (the heap, obmalloc's arenas, stacks) and
// the interpreter's own writable mappings (its .data and .bss, which hold
// _PyRuntime and, on 3.11 and 3.12, the deep-frozen code objects of the
// standard library), as the process's maps list them. An address outside
// those is looked up once more in a fresh read of the maps (a new arena),
// and refused if it is still outside. A mapping may change after the maps
// were read (the process can map a file over its own memory): only pages
// resident in the process are read (memory.go), which no file backs
// unread; the process can still race a change between that check and the
// read, and the reads' deadline (gate) bounds what a win costs.

// errRefusedMapping: the address lies in no mapping the tracker reads.
var errRefusedMapping = errors.New("address outside the process's anonymous memory and interpreter data")

// span is [lo, hi) of a process's address space.
type span struct{ lo, hi uint64 }

// readable is the part of a process's address space the tracker reads,
// sorted and merged. It is never changed once made: a fresh read of the
// maps makes a new one.
type readable struct{ spans []span }

// readableOf picks from a process's mappings the anonymous ones and the
// writable mappings of the interpreter's file.
func readableOf(maps []Mapping, interp procfs.FileID) *readable {
	r := &readable{}
	for i := range maps {
		m := &maps[i]
		if m.End <= m.Start || len(m.Perms) < 2 || m.Perms[0] != 'r' {
			continue
		}
		own := m.Inode != 0 && m.File() == interp && m.Perms[1] == 'w'
		if !own && !anonymous(m) {
			continue
		}
		r.spans = append(r.spans, span{m.Start, m.End})
	}
	sort.Slice(r.spans, func(i, j int) bool { return r.spans[i].lo < r.spans[j].lo })
	merged := r.spans[:0]
	for _, s := range r.spans {
		if n := len(merged); n > 0 && s.lo <= merged[n-1].hi {
			merged[n-1].hi = max(merged[n-1].hi, s.hi)
			continue
		}
		merged = append(merged, s)
	}
	r.spans = merged
	return r
}

// anonymous: private memory no file backs ([heap], [stack], a named
// anonymous mapping); not the kernel's [vdso], [vvar] or [vsyscall].
func anonymous(m *Mapping) bool {
	if m.Inode != 0 {
		return false
	}
	switch {
	case m.Path == "", m.Path == "[heap]", strings.HasPrefix(m.Path, "[stack"), strings.HasPrefix(m.Path, "[anon:"):
		return true
	}
	return false
}

// covers reports whether [addr, addr+n) lies inside the readable spans.
func (r *readable) covers(addr uint64, n int) bool {
	if r == nil || n < 0 {
		return false
	}
	end := addr + uint64(n)
	if end < addr {
		return false // wraps
	}
	// The last span starting at or before addr; merged spans never touch,
	// so one span must hold the whole read.
	i := sort.Search(len(r.spans), func(i int) bool { return r.spans[i].lo > addr }) - 1
	return i >= 0 && end <= r.spans[i].hi
}

// size is what r holds in memory.
func (r *readable) size() int64 { return int64(len(r.spans))*16 + 24 }

// checkedMemory reads a process's memory only where readable allows,
// reading the process's maps again (once) for an address outside it, and
// only pages that are resident (memory.go). It belongs to one batch of
// reads: it is not safe for concurrent use; done closes what it opened.
type checkedMemory struct {
	mem      Memory
	ranges   *readable
	remap    func() (*readable, error) // nil once used, or when not allowed
	remapped bool                      // ranges come from remap
	read     int64                     // bytes read
	refused  int                       // reads refused as outside
	pages    pager
	pagesErr error
}

var _ Memory = (*checkedMemory)(nil)

func (c *checkedMemory) ReadAt(p []byte, addr uint64) error {
	if !c.ranges.covers(addr, len(p)) {
		if c.remap != nil {
			remap := c.remap
			c.remap = nil
			if r, err := remap(); err == nil {
				c.ranges, c.remapped = r, true
			}
		}
		if !c.ranges.covers(addr, len(p)) {
			c.refused++
			return errRefusedMapping
		}
	}
	if pm, ok := c.mem.(pagedMemory); ok {
		if c.pages == nil && c.pagesErr == nil {
			c.pages, c.pagesErr = pm.pager()
		}
		if c.pagesErr != nil {
			return fmt.Errorf("%w: %w", errNotResident, c.pagesErr)
		}
		if ok, err := c.pages.resident(addr, len(p)); err != nil || !ok {
			return errNotResident
		}
	}
	c.read += int64(len(p))
	if err := c.mem.ReadAt(p, addr); err != nil {
		return err
	}
	// A read by pid, of the process the batch opened its pager for.
	if id, ok := c.pages.(sameProcess); ok {
		return id.same()
	}
	return nil
}

func (c *checkedMemory) done() {
	if c.pages != nil {
		c.pages.close()
		c.pages = nil
	}
}
