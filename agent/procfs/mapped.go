package procfs

// Mapped is procfs as the readers of a process's mapped files see it (the
// unwinder's tables in agent/unwind, the interpreters' trackers): the
// process's mappings, and each mapped file opened by Open's rules, as the
// mapped object, owned by the process's user or root, within MaxSize.
type Mapped struct {
	FS FS
	// MaxSize is the largest file opened, by its real size. Default 4 GiB
	// (a CUDA library is up to 1.5 GiB).
	MaxSize int64
}

// Mappings lists every mapping of pid.
func (m Mapped) Mappings(pid int) ([]Mapping, error) { return m.FS.Maps(pid, nil) }

// OpenMapping opens the file mapped at mp in process pid.
func (m Mapped) OpenMapping(pid int, mp Mapping) (*File, error) {
	st, err := m.FS.Status(pid)
	if err != nil {
		return nil, err
	}
	max := m.MaxSize
	if max <= 0 {
		max = 4 << 30
	}
	return m.FS.Open(JobFile{PID: pid, Mapping: &mp, UID: st.UID, MaxSize: max})
}
