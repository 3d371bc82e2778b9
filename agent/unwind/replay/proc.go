package replay

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/unwind"
)

// Process serves a snapshot's process to agent/unwind's Loader, whichever
// pid it is asked for: its mappings as recorded, and each mapped file as
// its trimmed image under the original's identity. The loader reads files
// through *os.File, so images are written to files under Dir when first
// opened.
type Process struct {
	S   *Snapshot
	Dir string

	mu    sync.Mutex
	paths map[int]string
	Opens int // files opened
}

var (
	_ unwind.MapsReader = (*Process)(nil)
	_ unwind.FileOpener = (*Process)(nil)
)

// NewProcess serves s, writing images under dir.
func NewProcess(s *Snapshot, dir string) *Process {
	return &Process{S: s, Dir: dir, paths: map[int]string{}}
}

// Maps is the recorded mappings as agent/procfs parses them. The vDSO,
// recorded as a file, is served as one ("/[vdso]"): the loader's own vDSO
// table is this machine's, not the recorded one's.
func (s *Snapshot) Maps() []procfs.Mapping {
	out := make([]procfs.Mapping, 0, len(s.Mappings))
	for _, m := range s.Mappings {
		pm := procfs.Mapping{Start: m.Start, End: m.End, Offset: m.Offset, Perms: m.Perms, Path: m.Path}
		if m.File >= 0 && m.File < len(s.Files) {
			pm.Dev, pm.Inode, pm.Path = s.Files[m.File].Dev, s.Files[m.File].Ino, servedPath(m.Path)
		}
		out = append(out, pm)
	}
	return out
}

func servedPath(p string) string {
	if strings.HasPrefix(p, "/") {
		return p
	}
	return "/" + p
}

// Mappings implements unwind.MapsReader.
func (p *Process) Mappings(int) ([]unwind.Mapping, error) { return p.S.Maps(), nil }

// fileOf returns the index of the file a mapping maps.
func (s *Snapshot) fileOf(m procfs.Mapping) (int, error) {
	for i, f := range s.Files {
		if servedPath(f.Path) == m.Path && f.Ino == m.Inode {
			return i, nil
		}
	}
	return -1, fmt.Errorf("replay: %s: %w", m.Path, os.ErrNotExist)
}

// OpenMapping implements unwind.FileOpener.
// StatMapping is the recorded file's identity.
func (p *Process) StatMapping(_ int, m unwind.Mapping) (procfs.FileInfo, error) {
	i, err := p.S.fileOf(m)
	if err != nil {
		return procfs.FileInfo{}, err
	}
	f := p.S.Files[i]
	return procfs.FileInfo{ID: procfs.FileID{Dev: f.Dev, Ino: f.Ino}, Size: f.Size, MtimeNsec: f.Mtime}, nil
}

func (p *Process) OpenMapping(_ int, m unwind.Mapping) (*procfs.File, error) {
	i, err := p.S.fileOf(m)
	if err != nil {
		return nil, err
	}
	path, err := p.materialize(i)
	if err != nil {
		return nil, err
	}
	fl, err := os.Open(path) // #nosec G304 -- a file this test wrote
	if err != nil {
		return nil, err
	}
	f := p.S.Files[i]
	return &procfs.File{File: fl, Info: procfs.FileInfo{ID: procfs.FileID{Dev: f.Dev, Ino: f.Ino}, Size: f.Size, MtimeNsec: f.Mtime}}, nil
}

// materialize writes file i's image (sparse) under Dir, once.
func (p *Process) materialize(i int) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Opens++
	if path, ok := p.paths[i]; ok {
		return path, nil
	}
	im := p.S.FileImage(i)
	path := filepath.Join(p.Dir, fmt.Sprintf("%s.%d", filepath.Base(p.S.Files[i].Path), i))
	fl, err := os.Create(path) // #nosec G304 -- under the test's own directory
	if err != nil {
		return "", err
	}
	defer fl.Close()
	if err := fl.Truncate(im.Size); err != nil {
		return "", err
	}
	for _, c := range im.Chunks {
		off := int64(c.Off) // #nosec G115 -- an offset inside a file of Size bytes
		if _, err := fl.WriteAt(c.Data, off); err != nil {
			return "", err
		}
	}
	p.paths[i] = path
	return path, nil
}

// Vaddr converts a process address in mapping m of a file with program
// headers progs into the file's link-time virtual address.
func Vaddr(progs []elf.ProgHeader, m Mapping, addr uint64) (uint64, bool) {
	if addr < m.Start || addr >= m.End {
		return 0, false
	}
	off := addr - m.Start + m.Offset
	for _, p := range progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off-p.Off < max(p.Filesz, p.Memsz) {
			return p.Vaddr + off - p.Off, true
		}
	}
	return 0, false
}

// Progs reads the program headers of an ELF file.
func Progs(r io.ReaderAt) ([]elf.ProgHeader, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	out := make([]elf.ProgHeader, 0, len(f.Progs))
	for _, p := range f.Progs {
		out = append(out, p.ProgHeader)
	}
	return out, nil
}

// MappingAt returns the mapping holding addr.
func (s *Snapshot) MappingAt(addr uint64) (Mapping, bool) {
	for _, m := range s.Mappings {
		if addr >= m.Start && addr < m.End {
			return m, true
		}
	}
	return Mapping{}, false
}
