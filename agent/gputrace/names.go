package gputrace

import (
	"fmt"

	"github.com/ianlancetaylor/demangle"

	"github.com/slurmscope/slurmscope/internal/printable"
)

// UnsampledFrame is the frame a kernel's GPU time sits under when none of its
// launches in the interval had its stack captured.
const UnsampledFrame = "[unsampled launch]"

// kernelName is one validated name of a process's name table.
type kernelName struct {
	raw       string // as announced, made printable; "…" appended when truncated
	demangled string
}

// nameIDOf is the library's name id: FNV-1a 64 of the name bytes, with 0
// (reserved for "no name") mapped to 1 (slurmscope_inject.h).
func nameIDOf(b []byte) uint64 {
	h := uint64(0xcbf29ce484222325)
	for _, c := range b {
		h ^= uint64(c)
		h *= 0x100000001b3
	}
	if h == 0 {
		h = 1
	}
	return h
}

// parseName validates an announced name. The process chooses both the id and
// the bytes, so a name whose id is not its hash is refused: otherwise a
// process could label its own kernels with ids its later records never
// carry, or make two ids show one name. A name longer than what the probe
// copies cannot be checked and is kept, marked as truncated. ok is false for
// a name to ignore.
func parseName(id uint64, b []byte, partial bool) (kernelName, bool) {
	if id == 0 || len(b) == 0 {
		return kernelName{}, false
	}
	if !partial && nameIDOf(b) != id {
		return kernelName{}, false
	}
	s := printable.Name(b)
	n := kernelName{raw: s, demangled: demangleKernel(s)}
	if partial {
		n.raw += "…"
		n.demangled += "…"
	}
	return n, true
}

// demangleKernel follows agent/symbolize: C++ linkage names become readable,
// parameter lists are dropped (template arguments, which tell kernel
// instances apart, are kept), and the output is bounded.
func demangleKernel(name string) string {
	if len(name) < 3 || name[0] != '_' || name[1] != 'Z' {
		return name
	}
	return demangle.Filter(name, demangle.NoParams, demangle.NoClones, demangle.MaxLength(16))
}

// unknownKernel names a kernel whose name the process never announced (or
// announced before the agent attached).
func unknownKernel(id uint64) string {
	if id == 0 {
		return "[unknown kernel]"
	}
	return fmt.Sprintf("[unknown kernel %016x]", id)
}
