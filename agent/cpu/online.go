package cpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxCPUs bounds what parseCPUList accepts, so that a corrupt or hostile
// list ("0-4294967295") cannot make the agent allocate without limit. The
// kernel's own NR_CPUS ceiling is 8192.
const maxCPUs = 8192

// parseCPUList parses the kernel's cpu list format, as found in
// /sys/devices/system/cpu/online: comma separated CPU numbers and inclusive
// ranges, e.g. "0-3,5,7-8\n". It returns the CPUs in ascending order without
// duplicates. An empty list is valid and yields no CPUs.
func parseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	seen := make(map[int]bool)
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := parseCPU(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		last := first
		if isRange {
			if last, err = parseCPU(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
			if last < first {
				return nil, fmt.Errorf("cpu list %q: descending range %q", s, part)
			}
		}
		for c := first; c <= last; c++ {
			seen[c] = true
		}
	}
	cpus := make([]int, 0, len(seen))
	for c := 0; len(cpus) < len(seen); c++ {
		if seen[c] {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

func parseCPU(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("bad cpu number %q", s)
	}
	if n >= maxCPUs {
		return 0, fmt.Errorf("cpu number %d out of range", n)
	}
	return int(n), nil
}

// readOnlineCPUs reads <sysRoot>/devices/system/cpu/online.
func readOnlineCPUs(sysRoot string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(sysRoot, "devices", "system", "cpu", "online"))
	if err != nil {
		return nil, err
	}
	return parseCPUList(string(b))
}
