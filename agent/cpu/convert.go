package cpu

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
