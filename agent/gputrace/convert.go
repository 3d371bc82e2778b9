package gputrace

// userHZ and startTimeTicks mirror agent/cpu: the attribution layer keys
// processes by (pid, /proc/<pid>/stat field 22), which is in USER_HZ ticks
// (fixed at 100, it is ABI), truncated like the kernel's nsec_to_clock_t.
const userHZ = 100

func startTimeTicks(ns uint64) uint64 {
	return ns / (1e9 / userHZ)
}
