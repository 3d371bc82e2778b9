package symbolize

import (
	"fmt"

	"github.com/slurmscope/slurmscope/agent/elfcheck"
)

// Sizes lie. An ELF file's headers say how large its tables are, and a job
// writes those headers: a sparse file can claim a gigabyte of .symtab that
// reads as zeros, and would cost a gigabyte to hold. Every size and count
// is checked by agent/elfcheck, the one check of the files a job names,
// before anything is parsed; the symbolizer's own caps are below. A file
// over a cap is left unsymbolised (ErrTooLarge), whatever it would have
// cost the budget.
const (
	maxSymtabBytes  = 256 << 20 // one .symtab or .dynsym: 11M symbols
	maxStrtabBytes  = 256 << 20 // the names of one of them
	maxPclntabBytes = 256 << 20 // a Go pclntab (the largest binaries hold ~100 MiB)
)

// elfReader is the symbolizer as a reader of job files; elfLimits what it
// reads: symbols, their names and a Go pclntab, never frame tables or
// symbol versions (it streams .symtab and .dynsym itself).
var (
	elfReader = elfcheck.NewReader("symbolize")
	elfLimits = elfcheck.Limits{
		Progs:    maxProgHeaders,
		Symbols:  maxSymtabBytes,
		Strings:  maxStrtabBytes,
		Pclntab:  maxPclntabBytes,
		Frames:   elfcheck.Unread,
		Versions: elfcheck.Unread,
		Dynamic:  elfcheck.Unread,
	}
)

// errTooLarge marks a file refused for a size or count over its real size
// or a cap: elfcheck's, and the symbolizer's own (a pclntab's function
// count).
var errTooLarge = elfcheck.ErrTooLarge

func tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errTooLarge, fmt.Sprintf(format, args...))
}
