package python

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// A pid names a process only while it lives: between a sample and the
// read of its frames, the process can exit and its pid go to another
// (pid_max is 32768 by default; a job that forks fast wraps it in
// seconds). process_vm_readv takes a pid, so a read keyed by pid alone
// would read whatever process holds it now and resolve the sample's frames
// from it. Each batch of reads therefore opens a pidfd and checks, after
// opening it, that the pid's start time is the process's: the pidfd then
// names that process. After each read, a signal 0 through the pidfd says
// the process has not been reaped, so its pid was never given away and the
// read was of it.

// errReplaced: the pid is another process's now, or no process's.
var errReplaced = fmt.Errorf("python: the process is gone, its pid may be another's: %w", procfs.ErrGone)

// processMemory is the memory of one process, named by pid and start time.
type processMemory struct {
	pid   int
	start uint64 // /proc/<pid>/stat's starttime, clock ticks
}

// MemoryOf reads process p's memory, and only p's (see above).
func MemoryOf(p interp.Process) Memory {
	return processMemory{pid: int(p.PID), start: procfs.StartFromBoottime(p.StartNs)}
}

var _ pagedMemory = processMemory{}

func (m processMemory) ReadAt(p []byte, addr uint64) error {
	return ProcessMemory(m.pid).ReadAt(p, addr)
}

// pager opens the pidfd, the pagemap and then checks the start time: both
// descriptors were opened while the pid was this process's.
func (m processMemory) pager() (pager, error) {
	fd, err := unix.PidfdOpen(m.pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, errReplaced
		}
		return nil, fmt.Errorf("pidfd of %d: %w", m.pid, err)
	}
	pm, err := ProcessMemory(m.pid).pager()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st, err := procfs.New("/proc").Stat(m.pid); err != nil || st.StartTime != m.start {
		pm.close()
		unix.Close(fd)
		return nil, errReplaced
	}
	return identifiedPager{pager: pm, pidfd: fd}, nil
}

// identifiedPager is a pager that also says whether its process still
// holds its pid.
type identifiedPager struct {
	pager
	pidfd int
}

// same fails once the process has been reaped (ESRCH); a zombie still
// holds its pid.
func (p identifiedPager) same() error {
	if err := unix.PidfdSendSignal(p.pidfd, 0, nil, 0); err != nil {
		return errReplaced
	}
	return nil
}

func (p identifiedPager) close() {
	p.pager.close()
	unix.Close(p.pidfd)
}

// sameProcess is a pager that knows its process's identity.
type sameProcess interface{ same() error }
