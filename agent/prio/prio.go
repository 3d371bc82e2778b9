// Package prio raises the scheduling priority of the agent's few
// latency-bound threads: those that find new processes and load their
// unwind tables (agent/stackwalk). On a node whose jobs keep every core
// busy (the usual HPC node) they would otherwise wait behind the jobs for
// their share, and a new process's first half second of samples would keep
// only their leaf (0.5 s of them under a load of 8). Their work is
// small and bursty, so the priority costs the jobs nothing they would
// notice; the bulk of the agent (draining, symbolising, shipping) keeps the
// default. A raised goroutine is locked to its thread, which makes each of
// its wakeups dearer: a goroutine woken at a high rate is better left at
// the default (agent/cpu's reader of new interpreter stacks).
package prio

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Nice is the niceness the threads run at: ahead of jobs at the default 0
// (about three times their weight under CFS), behind anything an admin
// made more urgent.
const Nice = -5

// Raise locks the calling goroutine to its OS thread and sets that thread's
// niceness to Nice. Call it first in a goroutine that lives as long as the
// agent's work: when the goroutine returns, the runtime ends the thread, so
// no other goroutine inherits the priority. An error (no CAP_SYS_NICE)
// leaves the thread as it was, still locked.
func Raise() error {
	runtime.LockOSThread()
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), Nice)
}

// Current returns the calling thread's niceness.
func Current() (int, error) {
	// getpriority(2) returns 20 - nice, so that no valid answer is negative.
	n, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	return 20 - n, err
}
