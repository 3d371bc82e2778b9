package symbolize

import (
	"errors"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// fileRef is a mapping's link to its parsed file: the cache key, or the
// reason the file could not be used. The parsed file itself stays in the LRU
// so that eviction really frees it.
type fileRef struct {
	id  fileIdentity
	err ErrorKind
}

// openMapped opens the file behind a mapping, by procfs's rules for a file
// a job controls: through map_files, or by path in the process's root when
// it is still the mapped file (device and inode).
func (s *Symbolizer) openMapped(p *process, m *mapping) (*procfs.File, ErrorKind) {
	f, err := s.opts.Proc.Open(procfs.JobFile{PID: p.id.PID, Mapping: &m.Mapping, UID: p.status.UID, MaxSize: s.opts.MaxFileBytes})
	switch {
	case err == nil:
		return f, ""
	case errors.Is(err, procfs.ErrNotMapped):
		return nil, ErrFileIdentity
	}
	return nil, ErrOpenFile
}

func identityOf(f *procfs.File) fileIdentity {
	return fileIdentity{dev: f.Info.ID.Dev, ino: f.Info.ID.Ino, size: f.Info.Size, mtimeNsec: f.Info.MtimeNsec}
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
	id := identityOf(f)
	m.file = &fileRef{id: id}
	if obj := s.files.get(id); obj != nil {
		s.stats.FileCacheHits++
		return obj, obj.failed
	}
	s.stats.FileCacheMisses++
	obj, err := openObj(f.Reader(), id.size)
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
