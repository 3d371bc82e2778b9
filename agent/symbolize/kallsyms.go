package symbolize

import (
	"bufio"
	"io"
	"os"
	"slices"
	"strconv"
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
func parseKallsyms(r io.Reader) kallsyms {
	k := kallsyms{loaded: true}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 4096)
	sawAny := false
	modules := map[string]string{} // interned module labels
	for sc.Scan() && len(k.syms) < maxKallsyms {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || len(fields[1]) != 1 {
			continue
		}
		addr, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			continue
		}
		sawAny = true
		switch fields[1][0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		if addr == 0 {
			continue
		}
		mod := KernelModule
		if len(fields) >= 4 && strings.HasPrefix(fields[3], "[") && strings.HasSuffix(fields[3], "]") {
			m, ok := modules[fields[3]]
			if !ok {
				m = strings.Clone(fields[3])
				modules[m] = m
			}
			mod = m
		}
		k.syms = append(k.syms, ksym{addr: addr, name: fields[2], module: mod})
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
