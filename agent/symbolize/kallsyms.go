package symbolize

import (
	"bufio"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

const (
	maxKallsymsBytes = 256 << 20
	maxKallsyms      = 8 << 20
)

type ksym struct {
	addr   uint64
	name   string
	module string // Frame.Module: "[kernel]" or "[<module>]"
}

// kallsyms is the kernel symbol table, loaded on first use.
type kallsyms struct {
	loaded bool
	hidden bool // kptr_restrict zeroed every address
	err    error
	syms   []ksym
}

// loadKallsyms reads <proc-root>/kallsyms, or the file at path if given.
func loadKallsyms(proc procfs.FS, path string) kallsyms {
	var f *os.File
	var err error
	if path != "" {
		f, err = os.Open(path)
	} else {
		f, err = proc.Kallsyms()
	}
	if err != nil {
		return kallsyms{loaded: true, err: err}
	}
	defer f.Close()
	k := parseKallsyms(io.LimitReader(f, maxKallsymsBytes))
	return k
}

// parseKallsyms keeps text symbols only: stack addresses are code, and data
// symbols in between would cut functions short.
//
// A kernel has 100 000 to 200 000 of them, read on every node at start-up:
// lines are split by hand and every name lands in one arena, one string
// for the whole table, rather than two or three allocations per line (the
// first version took 140 ms of CPU on a 122 000-line table, on top of the
// kernel's 80 ms to print it; BenchmarkParseKallsyms).
func parseKallsyms(r io.Reader) kallsyms {
	k := kallsyms{loaded: true}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 4096)
	sawAny := false
	modules := map[string]string{} // interned module labels
	type pending struct {
		addr   uint64
		off, n uint32
		module string
	}
	var rows []pending
	var arena []byte
	for sc.Scan() && len(rows) < maxKallsyms {
		line := sc.Bytes()
		addrField, rest, ok := nextField(line)
		if !ok {
			continue
		}
		typ, rest, ok := nextField(rest)
		if !ok || len(typ) != 1 {
			continue
		}
		name, rest, ok := nextField(rest)
		if !ok {
			continue
		}
		addr, ok := parseHexDigits(addrField)
		if !ok {
			continue
		}
		sawAny = true
		switch typ[0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		if addr == 0 || len(arena)+len(name) > maxKallsymsBytes {
			continue
		}
		mod := KernelModule
		if m, _, ok := nextField(rest); ok && len(m) >= 2 && m[0] == '[' && m[len(m)-1] == ']' {
			if interned, ok := modules[string(m)]; ok { // no allocation for the lookup
				mod = interned
			} else {
				mod = string(m)
				modules[mod] = mod
			}
		}
		rows = append(rows, pending{addr: addr, off: uint32(len(arena)), n: uint32(len(name)), module: mod}) // #nosec G115 -- bounded by maxKallsymsBytes above
		arena = append(arena, name...)
	}
	names := string(arena)
	k.syms = make([]ksym, len(rows))
	for i, p := range rows {
		k.syms[i] = ksym{addr: p.addr, name: names[p.off : p.off+p.n], module: p.module}
	}
	k.hidden = sawAny && len(k.syms) == 0
	slices.SortFunc(k.syms, func(a, b ksym) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	return k
}

// nextField returns the first run of non-blank bytes of b and what follows
// it, as strings.Fields would split it.
func nextField(b []byte) (field, rest []byte, ok bool) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	j := i
	for j < len(b) && b[j] != ' ' && b[j] != '\t' {
		j++
	}
	return b[i:j], b[j:], j > i
}

// parseHexDigits parses an unsigned hexadecimal number as
// strconv.ParseUint(s, 16, 64) does (leading zeros allowed, at most 64
// bits), without making a string of it: kallsyms and perf maps call it per
// line.
func parseHexDigits(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	for len(b) > 1 && b[0] == '0' {
		b = b[1:]
	}
	if len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

func (k *kallsyms) lookup(addr uint64) (ksym, bool) {
	i, found := slices.BinarySearchFunc(k.syms, addr, func(s ksym, a uint64) int {
		switch {
		case s.addr < a:
			return -1
		case s.addr > a:
			return 1
		}
		return 0
	})
	if !found {
		i--
	}
	if i < 0 {
		return ksym{}, false
	}
	return k.syms[i], true
}

// KallsymsHidden reports whether the kernel hides its symbols' addresses
// from this process (kptr_restrict, or perf_event_paranoid above 1,
// without CAP_SYSLOG): every kernel frame would be "[kernel]". The agent
// says so once at start-up; it reads the first lines only.
func KallsymsHidden(proc procfs.FS) (bool, error) {
	f, err := proc.Kallsyms()
	if err != nil {
		return false, err
	}
	defer f.Close()
	return kallsymsHidden(io.LimitReader(f, 64<<10)), nil
}

// kallsymsHidden: the first 64 lines' addresses are all zero.
func kallsymsHidden(r io.Reader) bool {
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() && n < 64 {
		addr, _, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n++
		if strings.Trim(addr, "0") != "" {
			return false
		}
	}
	return n > 0
}
