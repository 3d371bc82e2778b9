package python

import "github.com/slurmscope/slurmscope/agent/procfs"

// Mapping is one line of /proc/<pid>/maps, as agent/procfs parses it.
type Mapping = procfs.Mapping

// MapsReader lists a process's mappings (agent/procfs, the agent's only
// reader of /proc).
type MapsReader interface {
	Maps(pid int) ([]Mapping, error)
}
