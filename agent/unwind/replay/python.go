package replay

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	"github.com/slurmscope/slurmscope/agent/python"
)

// PythonProcess is what agent/python's Tracker needs of a process: its
// mappings, its mapped files and its memory. The recorder gives it the
// live process (recording what is read); the replay gives it a snapshot.
type PythonProcess interface {
	python.MapsReader
	python.Opener
	Memory(pid int) python.Memory
}

// The identity the Tracker is told the process has; any fixed value
// does, as long as the resolving asks for the same.
const (
	pyStart = 1
	pyMM    = 1
)

// ResolvePython runs agent/python's Tracker on process pid as the agent
// does (Notify: find the interpreter in the mapped files, check its
// runtime in memory; then Resolve: read the code objects of the raw
// frames), and returns the resolved frames and whether the stack was cut.
func ResolvePython(p PythonProcess, pid int, raw []RawFrame, truncated bool) ([]python.Frame, error) {
	now := time.Unix(1, 0)
	tr := python.NewTracker(python.TrackerOptions{
		Arch: python.AMD64, Maps: p, Open: p, Procs: procTable{}, Memory: p.Memory,
		Now: func() time.Time { return now },
	})
	tgid := uint32(pid) // #nosec G115 -- a recorded pid, below pid_max
	tr.Notify(python.Event{TGID: tgid, StartBoottime: pyStart, MM: pyMM})
	if _, _, ok := tr.Version(tgid); !ok {
		return nil, fmt.Errorf("replay: the tracker did not set the process up: %+v", tr.Stats().Skipped)
	}
	if len(raw) > python.MaxFrames {
		return nil, fmt.Errorf("replay: %d raw frames, the walk keeps %d", len(raw), python.MaxFrames)
	}
	st := &python.RawStack{Len: uint32(len(raw))} // #nosec G115 -- at most MaxFrames
	for i, r := range raw {
		st.Frames[i] = python.RawFrame{Code: r.Code, Check: r.Check, Lasti: r.Lasti, Owner: r.Owner, IsEntry: r.IsEntry}
	}
	if truncated {
		st.Flags |= python.StackTruncated
	}
	frames, _ := tr.Resolve(tgid, pyStart, st)
	if frames == nil {
		return nil, errors.New("replay: Resolve returned nothing")
	}
	return frames, nil
}

// procTable is the walk's py_procs map, which a replay does not need.
type procTable struct{}

func (procTable) Put(uint32, python.ProcInfo) error { return nil }
func (procTable) Delete(uint32) error               { return nil }

// SnapshotPython serves a CPython snapshot to ResolvePython.
type SnapshotPython struct{ S *Snapshot }

var _ PythonProcess = SnapshotPython{}

func (p SnapshotPython) Maps(int) ([]python.Mapping, error) { return p.S.Maps(), nil }

func (p SnapshotPython) OpenMapped(_ int, m python.Mapping) (python.File, error) {
	i, err := p.S.fileOf(m)
	if err != nil {
		return nil, err
	}
	f := p.S.Files[i]
	return &ImageFile{Image: p.S.FileImage(i), Info: NewFileInfo(f)}, nil
}

func (p SnapshotPython) Memory(int) python.Memory { return memImage{p.S.MemoryImage()} }

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
