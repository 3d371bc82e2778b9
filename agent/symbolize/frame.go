package symbolize

// Frame is one symbolised stack frame. An address inside inlined code expands
// to several Frames, innermost first; all but the last have Inlined set.
type Frame struct {
	Function string // demangled name; "" when unknown
	File     string // source file when the binary records it (Go), else ""
	Line     int
	Module   string // mapping path, "[kernel]", "[<kernel module>]", "[perf-map]", or "" when unmapped
	Address  uint64 // the raw address as passed in
	Inlined  bool
}

// KernelModule is the Module of frames in the core kernel image.
const KernelModule = "[kernel]"
