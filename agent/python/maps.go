package python

import "github.com/slurmscope/slurmscope/agent/procfs"

// Mapping is one line of /proc/<pid>/maps, as agent/procfs parses it.
type Mapping = procfs.Mapping
