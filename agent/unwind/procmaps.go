package unwind

import "github.com/slurmscope/slurmscope/agent/procfs"

// Mapping is one line of /proc/<pid>/maps, as agent/procfs parses it.
type Mapping = procfs.Mapping

// MapsReader lists a process's mappings (procfs.FS.Maps); the loader only
// uses executable ones.
type MapsReader interface {
	Mappings(pid int) ([]Mapping, error)
}

// FileOpener opens the very file behind a mapping of a process, under the
// hostile-input rules: agent/procfs's Open (inside the process's root, no
// links followed, regular files only, owner and size checked). The loader
// reads the file only through what it returns, and identifies it by what
// fstat said.
type FileOpener interface {
	OpenMapping(pid int, m Mapping) (*procfs.File, error)
	// StatMapping identifies the mapped file without opening it for
	// reading: a file whose table the loader has is not read again.
	StatMapping(pid int, m Mapping) (procfs.FileInfo, error)
}
