package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// fileRef is a mapping's link to its parsed file: the cache key, or the
// reason the file could not be used. The parsed file itself stays in the LRU
// so that eviction really frees it.
type fileRef struct {
	id  fileIdentity
	err ErrorKind
}

// openMapped opens the file behind a mapping. map_files names exactly the
// mapped object, even if deleted or replaced on disk, but needs
// CAP_SYS_ADMIN; the fallback path through the process's root is accepted
// only if its inode is the mapped one.
func (s *Symbolizer) openMapped(p *process, m *mapping) (*os.File, ErrorKind) {
	mf := s.procPath(p.pid, "map_files", fmt.Sprintf("%x-%x", m.start, m.end))
	if f, err := os.Open(mf); err == nil {
		return f, ""
	}
	if m.deleted {
		return nil, ErrOpenFile
	}
	// Join cleans ".." so a hostile path cannot climb above the root
	// lexically; symlinks inside the root are the kernel's business, and
	// the inode check below rejects any file that is not the mapped one.
	f, err := os.Open(filepath.Join(s.procPath(p.pid, "root"), m.path))
	if err != nil {
		return nil, ErrOpenFile
	}
	id, ok := identityOf(f)
	if !ok || id.ino != m.inode {
		f.Close()
		return nil, ErrFileIdentity
	}
	return f, ""
}

func identityOf(f *os.File) (fileIdentity, bool) {
	fi, err := f.Stat()
	if err != nil {
		return fileIdentity{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileIdentity{}, false
	}
	return fileIdentity{
		dev: uint64(st.Dev), ino: st.Ino, size: fi.Size(),
		mtimeNsec: fi.ModTime().UnixNano(),
	}, true
}

// objFor returns the parsed file behind a mapping, opening and parsing it on
// first use and after LRU eviction.
func (s *Symbolizer) objFor(p *process, m *mapping) (*objFile, ErrorKind) {
	if m.file != nil {
		if m.file.err != "" {
			return nil, m.file.err
		}
		if obj := s.files.get(m.file.id); obj != nil {
			s.stats.FileCacheHits++
			return obj, obj.failed
		}
	}
	f, kind := s.openMapped(p, m)
	if kind != "" {
		m.file = &fileRef{err: kind}
		return nil, kind
	}
	defer f.Close()
	id, ok := identityOf(f)
	if !ok {
		m.file = &fileRef{err: ErrOpenFile}
		return nil, ErrOpenFile
	}
	m.file = &fileRef{id: id}
	if obj := s.files.get(id); obj != nil {
		s.stats.FileCacheHits++
		return obj, obj.failed
	}
	s.stats.FileCacheMisses++
	obj, err := openObj(f, id.size)
	if err != nil {
		// Cache the failure too, so a malformed file mapped by many
		// processes is parsed once.
		obj = &objFile{failed: ErrParseELF, size: 256}
		if isPanic(err) {
			obj.failed = ErrPanic
		}
	}
	s.files.put(id, obj)
	return obj, obj.failed
}
