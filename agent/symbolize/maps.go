package symbolize

import "github.com/slurmscope/slurmscope/agent/procfs"

// mapping is one executable mapping of a process (procfs.Maps).
type mapping struct {
	procfs.Mapping
	file *fileRef // resolved lazily on first lookup
}

// findMapping returns the mapping containing addr, or nil.
func findMapping(maps []mapping, addr uint64) *mapping {
	lo, hi := 0, len(maps)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1) // #nosec G115 -- sort.Search's midpoint: lo+hi as a uint cannot overflow, halved it fits an int
		switch {
		case addr < maps[mid].Start:
			hi = mid
		case addr >= maps[mid].End:
			lo = mid + 1
		default:
			return &maps[mid]
		}
	}
	return nil
}
