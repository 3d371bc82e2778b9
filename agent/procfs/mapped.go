package procfs

import "github.com/slurmscope/slurmscope/agent/budget"

// Mapped is procfs as the readers of a process's mapped files see it (the
// unwinder's tables in agent/unwind, the interpreters' trackers): the
// process's mappings, and each mapped file opened by Open's rules, as the
// mapped object, owned by the process's user or root, within MaxSize.
type Mapped struct {
	FS FS
	// MaxSize is the largest file opened, by its real size. Default 4 GiB
	// (a CUDA library is up to 1.5 GiB).
	MaxSize int64
	// Work, when set, charges every read of an opened file (through
	// File.Reader) to the process's owner, as the symbolizer charges its
	// own: a job's read allowance bounds what its files cost every reader
	// of them. A read past the allowance fails with budget.ErrWorkLimit.
	Work *budget.Work
	// Owner names a process's owner in Work (its job, as the symbolizer's
	// Owner does); nil or "": its user.
	Owner func(ID) string
}

// Mappings lists every mapping of pid.
func (m Mapped) Mappings(pid int) ([]Mapping, error) { return m.FS.Maps(pid, nil) }

// OpenMapping opens the file mapped at mp in process pid.
func (m Mapped) OpenMapping(pid int, mp Mapping) (*File, error) {
	st, err := m.FS.Status(pid)
	if err != nil {
		return nil, err
	}
	f, err := m.FS.Open(JobFile{PID: pid, Mapping: &mp, UID: st.UID, MaxSize: m.maxSize()})
	if err != nil {
		return nil, err
	}
	if m.Work != nil {
		f.reads = m.Work.ReaderAt(m.owner(pid, st.UID), f.File)
	}
	return f, nil
}

// StatMapping identifies the file mapped at mp in process pid, opening
// nothing for reading (FS.StatMapping). The uid matters only to a file
// found by path, not through map_files, and is read only then.
func (m Mapped) StatMapping(pid int, mp Mapping) (FileInfo, error) {
	info, err := m.FS.StatMapping(pid, mp, -1, m.maxSize())
	if err == nil || mp.Deleted {
		return info, err
	}
	st, serr := m.FS.Status(pid)
	if serr != nil {
		return FileInfo{}, serr
	}
	return m.FS.StatMapping(pid, mp, st.UID, m.maxSize())
}

func (m Mapped) maxSize() int64 {
	if m.MaxSize <= 0 {
		return 4 << 30
	}
	return m.MaxSize
}

func (m Mapped) owner(pid, uid int) string {
	if m.Owner != nil {
		if id, err := m.FS.ID(pid); err == nil {
			if o := m.Owner(id); o != "" {
				return o
			}
		}
	}
	if uid < 0 {
		return budget.Unknown
	}
	return budget.UserOwner(uid)
}
