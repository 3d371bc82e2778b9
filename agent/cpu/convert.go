package cpu

import "github.com/slurmscope/slurmscope/agent/bpf"

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

// stackFrames returns the frames of a stacks map value (ips[0 .. len), a
// copy) and whether the stack was cut at stackDepth frames: the unwinder
// says so (end), and the kernel's frame-pointer walk keeps the innermost
// frames of a deeper stack, which fills every slot.
func stackFrames(st *bpf.UnwindStack) ([]uint64, bool) {
	n := min(int(st.Len), len(st.Ips))
	return append([]uint64(nil), st.Ips[:n]...), st.End == endFrameLimit || n == len(st.Ips)
}
