package cpu

// userHZ is the unit of /proc/<pid>/stat field 22 (starttime): the kernel
// reports it in USER_HZ clock ticks, and USER_HZ is fixed at 100 on every
// architecture we run on, independent of CONFIG_HZ (it is ABI; sysconf
// (_SC_CLK_TCK) returns it). The attribution layer caches processes by (pid,
// starttime as read from /proc), so the sampler must hand over the very same
// number, not nanoseconds.
const userHZ = 100

// startTimeTicks converts task->start_boottime (ns since boot, CLOCK_BOOTTIME)
// to /proc/<pid>/stat field 22. It truncates like the kernel's
// nsec_to_clock_t, so both sides agree on every value, not just most.
//
// Both use the host's boot time: an agent inside a time namespace would see a
// shifted /proc value; slurmscope runs the agent in the host namespaces.
func startTimeTicks(ns uint64) uint64 {
	return ns / (1e9 / userHZ)
}

// commString converts the kernel's NUL-padded comm.
func commString(c [16]int8) string {
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	return string(b)
}

// trimStack cuts a stack map value at its first zero: the kernel zero-fills
// the rest of the value when copying a shorter stack out. The second result
// reports a stack that fills every slot, which is almost always one the
// kernel truncated (perf keeps the innermost frames and drops the rest).
func trimStack(frames []uint64) ([]uint64, bool) {
	for i, pc := range frames {
		if pc == 0 {
			return frames[:i:i], false
		}
	}
	return frames, len(frames) > 0
}

// sumPerCPU sums the per-CPU values of each BPF counter.
func sumPerCPU(vals []uint64) uint64 {
	var t uint64
	for _, v := range vals {
		t += v
	}
	return t
}
