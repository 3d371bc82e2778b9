package procfs

import "fmt"

// maxCmdlineBytes bounds a command line read: the agent only wants a
// process title (slurmstepd's "slurmstepd: [<job>.<step>]").
const maxCmdlineBytes = 4 << 10

// Cmdline returns the start of /proc/<pid>/cmdline, at most 4 KiB: the
// arguments separated by NULs, or the title a process wrote over them.
func (p FS) Cmdline(pid int) ([]byte, error) {
	var out []byte
	err := p.withFile(pid, "cmdline", maxCmdlineBytes, func(b []byte, _ bool) error {
		out = append([]byte(nil), b...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return out, nil
}
