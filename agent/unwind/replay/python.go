package replay

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/python"
)

// PythonProcess is what agent/python's Tracker needs of a process: its
// mappings, its mapped files and its memory. The recorder gives it the
// live process (recording what is read); the replay gives it a snapshot.
type PythonProcess interface {
	interp.MapsReader
	interp.Opener
	Memory(interp.Process) python.Memory
}

// The identity the Tracker is told the process has; any fixed value
// does, as long as the resolving asks for the same.
const (
	pyStart = 1
	pyMM    = 1
)

// ResolvePython runs agent/python's Tracker on process pid as the agent
// does (Announce: find the interpreter in the mapped files, check its
// runtime in memory; then Resolve: read the code objects of the raw
// frames), and returns the resolved frames.
func ResolvePython(p PythonProcess, pid int, raw []RawFrame, truncated bool) (interp.Stack, error) {
	now := time.Unix(1, 0)
	tr := python.NewTracker(python.TrackerOptions{
		Arch: python.AMD64, Maps: p, Open: p, Procs: procTable{}, Memory: p.Memory,
		Now: func() time.Time { return now },
	})
	tgid := uint32(pid) // #nosec G115 -- a recorded pid, below pid_max
	proc := interp.Process{PID: tgid, StartNs: pyStart, MM: pyMM}
	tr.Announce(proc)
	if _, _, ok := tr.Version(tgid); !ok {
		return interp.Stack{}, fmt.Errorf("replay: the tracker did not set the process up: %+v", tr.Stats().Skipped)
	}
	if len(raw) > bpf.InterpMaxFrames {
		return interp.Stack{}, fmt.Errorf("replay: %d raw frames, the walk keeps %d", len(raw), bpf.InterpMaxFrames)
	}
	// As python.h packs them.
	st := &bpf.InterpStack{Len: uint32(len(raw)), Kind: python.Kind} // #nosec G115 -- at most InterpMaxFrames
	for i, r := range raw {
		st.Frames[i] = bpf.InterpFrame{Addr: r.Code, Check: r.Check,
			Data: uint64(uint32(r.Lasti)) | uint64(r.Owner)<<32 | uint64(r.IsEntry)<<40} // #nosec G115 -- lasti's bits, as the walk stores them
	}
	if truncated {
		st.Flags |= bpf.InterpTruncated
	}
	out := tr.Resolve(proc, st)
	if out.Frames == nil {
		return interp.Stack{}, errors.New("replay: Resolve returned nothing")
	}
	return out, nil
}

// procTable is the capture's process table, which a replay does not need.
type procTable struct{}

func (procTable) Put(interp.Process, []byte) error { return nil }
func (procTable) Delete(uint32) error              { return nil }

// SnapshotPython serves a CPython snapshot to ResolvePython.
type SnapshotPython struct{ S *Snapshot }

var _ PythonProcess = SnapshotPython{}

func (p SnapshotPython) Maps(int) ([]python.Mapping, error) { return p.S.Maps(), nil }

func (p SnapshotPython) OpenMapped(_ int, m python.Mapping) (interp.File, error) {
	i, err := p.S.fileOf(m)
	if err != nil {
		return nil, err
	}
	f := p.S.Files[i]
	return &ImageFile{Image: p.S.FileImage(i), Info: NewFileInfo(f)}, nil
}

// StatMapped is the recorded file's identity, as its ImageFile's Stat.
func (p SnapshotPython) StatMapped(_ int, m python.Mapping) (procfs.FileInfo, error) {
	i, err := p.S.fileOf(m)
	if err != nil {
		return procfs.FileInfo{}, err
	}
	f := p.S.Files[i]
	return procfs.FileInfo{ID: procfs.FileID{Dev: f.Dev, Ino: f.Ino}, Size: f.Size, MtimeNsec: time.Unix(0, f.Mtime).UnixNano()}, nil
}

func (p SnapshotPython) Memory(interp.Process) python.Memory { return memImage{p.S.MemoryImage()} }

type memImage struct{ im *Image }

func (m memImage) ReadAt(b []byte, addr uint64) error {
	if m.im == nil {
		return errors.New("replay: no memory recorded")
	}
	return m.im.Read(b, addr)
}

// ImageFile is an image opened as a file.
type ImageFile struct {
	*Image
	Info fs.FileInfo
}

func (f *ImageFile) Close() error               { return nil }
func (f *ImageFile) Stat() (fs.FileInfo, error) { return f.Info, nil }

// FileInfo describes a recorded file as fstat did.
type FileInfo struct {
	name       string
	size       int64
	mtime      time.Time
	dev, inode uint64
}

// NewFileInfo is f's identity as a fs.FileInfo (Sys is a *syscall.Stat_t
// with its device and inode).
func NewFileInfo(f File) FileInfo {
	return FileInfo{name: f.Path, size: f.Size, mtime: time.Unix(0, f.Mtime), dev: f.Dev, inode: f.Ino}
}

func (i FileInfo) Name() string       { return i.name }
func (i FileInfo) Size() int64        { return i.size }
func (i FileInfo) Mode() fs.FileMode  { return 0o755 }
func (i FileInfo) ModTime() time.Time { return i.mtime }
func (i FileInfo) IsDir() bool        { return false }
func (i FileInfo) Sys() any           { return &syscall.Stat_t{Dev: i.dev, Ino: i.inode} }
