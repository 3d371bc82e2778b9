package procfs

import "fmt"

// ID names one process for its whole life. A pid is reused once its process
// exits; a pid with its start time is not, so every cache of per-process
// state (attribution, symbols, GPU join state) is keyed by ID, and a sample
// whose ID no longer matches the live process is never resolved against it.
type ID struct {
	PID int
	// Start is the process's start time in clock ticks since boot: field 22
	// of /proc/<pid>/stat. Readers of the kernel's own clock (the eBPF
	// programs read task->start_boottime in ns) convert with
	// StartFromBoottime, so that both sides agree on every process.
	Start uint64
}

func (id ID) String() string { return fmt.Sprintf("%d@%d", id.PID, id.Start) }

// userHZ is the unit of /proc/<pid>/stat field 22: the kernel reports it in
// USER_HZ clock ticks, and USER_HZ is fixed at 100 on every architecture we
// run on, independent of CONFIG_HZ (it is ABI; sysconf(_SC_CLK_TCK)
// returns it).
const userHZ = 100

// StartFromBoottime converts a task's start_boottime (ns since boot,
// CLOCK_BOOTTIME, as an eBPF program reads it from task_struct) to the unit
// of ID.Start. It truncates like the kernel's nsec_to_clock_t, which prints
// field 22, so both agree on every value, not just most.
//
// Both use the host's boot time: an agent inside a time namespace would see
// a shifted /proc value; slurmscope runs the agent in the host namespaces.
func StartFromBoottime(ns uint64) uint64 {
	return ns / (1e9 / userHZ)
}

// BoottimeFromStart is the earliest CLOCK_BOOTTIME (ns) of a start time in
// ticks (ID.Start): the inverse of StartFromBoottime, to the tick.
func BoottimeFromStart(ticks uint64) uint64 {
	return ticks * (1e9 / userHZ)
}
