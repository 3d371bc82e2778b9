package symbolize

import (
	"sync"
	"sync/atomic"
	"time"
)

// fileIdentity identifies file contents without reading them. A binary
// replaced on disk gets a new inode or mtime, hence a new identity.
type fileIdentity struct {
	dev, ino  uint64
	size      int64
	mtimeNsec int64
}

// fileEntry is one parsed file, shared by every process that maps it. It is
// keyed by identity, not by build id: a build id is just bytes in the file,
// and a hostile process could forge a system library's id to plant wrong
// names in other jobs' profiles. Identical files under different inodes
// are parsed twice; the memory budget caps that cost.
//
// The first process to need a file parses it (outside the symbolizer's
// lock, under its own); others needing the same file wait for that parse
// (singleflight) rather than parse it again.
type fileEntry struct {
	ready chan struct{} // closed once the parse is over
	// obj is the parsed file; nil before ready, after a parse that gave
	// nothing to keep, and once the budget evicted it.
	obj atomic.Pointer[objFile]
	// kind is why a parse gave nothing (set before ready is closed).
	kind ErrorKind
	// reads counts the parse's reads, for the guards of those waiting.
	reads atomic.Int64

	mu      sync.Mutex // orders publish against evict
	evicted bool
}

// publish makes obj the entry's, unless the budget evicted the entry
// while it was being parsed.
func (e *fileEntry) publish(obj *objFile) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.evicted {
		return false
	}
	e.obj.Store(obj)
	return true
}

// evict is the entry's eviction callback: it must not block.
func (e *fileEntry) evict() {
	e.mu.Lock()
	e.evicted = true
	e.obj.Store(nil)
	e.mu.Unlock()
}

// done reports whether the parse is over.
func (e *fileEntry) done() bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

// wait waits for the parse to be over, reporting its progress as the
// waiter's own: a waiter is as stalled as the parse it waits for.
func (e *fileEntry) wait(progress func()) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := e.reads.Load()
	for {
		select {
		case <-e.ready:
			return
		case <-t.C:
			if n := e.reads.Load(); n != last {
				last = n
				progress()
			}
		}
	}
}

// maxFileEntries bounds the file map, entries for evicted files included;
// past it those are dropped.
const maxFileEntries = 1 << 14

// claim returns the entry of a file, and whether the caller must parse it:
// a new entry, or one whose object was evicted or never kept.
func (s *Symbolizer) claim(id fileIdentity) (*fileEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.files[id]; e != nil && (!e.done() || e.obj.Load() != nil) {
		return e, false
	}
	if len(s.files) >= maxFileEntries {
		for k, e := range s.files {
			if e.done() && e.obj.Load() == nil {
				delete(s.files, k)
			}
		}
	}
	e := &fileEntry{ready: make(chan struct{})}
	s.files[id] = e
	return e, true
}

// lookupFile returns the parsed file of id if it is cached and kept.
func (s *Symbolizer) lookupFile(id fileIdentity) *objFile {
	s.mu.Lock()
	e := s.files[id]
	s.mu.Unlock()
	if e == nil || !e.done() {
		return nil
	}
	return e.obj.Load()
}

// forgetFile drops an entry that kept nothing, so that the next use parses
// the file again (a transient failure: over budget, over the allowance).
func (s *Symbolizer) forgetFile(id fileIdentity, e *fileEntry) {
	s.mu.Lock()
	if s.files[id] == e {
		delete(s.files, id)
	}
	s.mu.Unlock()
}

// retryTransient is how long a mapping whose file could not be read for a
// transient reason (budget, allowance, a stalled file system) waits before
// it is tried again.
const retryTransient = 30 * time.Second
