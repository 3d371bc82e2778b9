package hostmetrics

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Parsers of the cgroup files the collector reads. The kernel writes them,
// but the tree is a flag and a fixture in tests: each parser takes any
// bytes and fails with a reason instead of guessing.

var errMalformed = errors.New("malformed")

// parseUint reads a file holding one decimal number (memory.current,
// cpuacct.usage, memory.max_usage_in_bytes).
func parseUint(b []byte) (uint64, error) {
	s := string(bytes.TrimSpace(b))
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || s == "" {
		return 0, fmt.Errorf("%w: want one number, got %.40q", errMalformed, s)
	}
	return n, nil
}

// unlimitedV1 is where cgroup v1 limits start to mean none: the kernel
// prints PAGE_COUNTER_MAX pages (9223372036854771712 on 4 KiB pages).
const unlimitedV1 = 1 << 62

// parseLimit reads a memory limit: v2 memory.max ("max" or a number), v1
// memory.limit_in_bytes (a number, huge when unset). ok is false when
// there is no limit.
func parseLimit(b []byte) (limit uint64, ok bool, err error) {
	if string(bytes.TrimSpace(b)) == "max" {
		return 0, false, nil
	}
	n, err := parseUint(b)
	if err != nil {
		return 0, false, err
	}
	if n >= unlimitedV1 {
		return 0, false, nil
	}
	return n, true, nil
}

// parseKeyed finds "key value" in a flat keyed file (cpu.stat,
// memory.events, memory.oom_control). A file without the key is
// malformed: every kernel that has the file writes the keys read here.
func parseKeyed(b []byte, key string) (uint64, error) {
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok || string(k) != key {
			continue
		}
		return parseUint(v)
	}
	return 0, fmt.Errorf("%w: no %s line", errMalformed, key)
}

// parseIOStat sums rbytes and wbytes over the devices of an io.stat file
// ("8:0 rbytes=4096 wbytes=0 rios=1 ..."). An empty file is a cgroup that
// has done no block I/O.
func parseIOStat(b []byte) (read, written uint64, err error) {
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !bytes.ContainsRune(fields[0], ':') {
			return 0, 0, fmt.Errorf("%w: io.stat line %.40q names no device", errMalformed, line)
		}
		for _, f := range fields[1:] {
			k, v, ok := bytes.Cut(f, []byte{'='})
			if !ok {
				return 0, 0, fmt.Errorf("%w: io.stat field %.40q", errMalformed, f)
			}
			var dst *uint64
			switch string(k) {
			case "rbytes":
				dst = &read
			case "wbytes":
				dst = &written
			default:
				continue
			}
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("%w: io.stat %s=%.20q", errMalformed, k, v)
			}
			*dst += n
		}
	}
	return read, written, nil
}

// maxCPUs bounds a CPU list: no machine has more, and a list that claims
// more is not the kernel's.
const maxCPUs = 1 << 16

// parseCPUList counts the CPUs of a cpuset list ("0-3,8,10-11"); an empty
// list is 0 CPUs (a v2 cpuset.cpus nobody set).
func parseCPUList(b []byte) (int, error) {
	s := bytes.TrimSpace(b)
	if len(s) == 0 {
		return 0, nil
	}
	n := 0
	for part := range bytes.SplitSeq(s, []byte{','}) {
		lo, hi, isRange := bytes.Cut(part, []byte{'-'})
		a, err := strconv.ParseUint(string(lo), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%w: CPU list entry %.20q", errMalformed, part)
		}
		z := a
		if isRange {
			if z, err = strconv.ParseUint(string(hi), 10, 32); err != nil || z < a {
				return 0, fmt.Errorf("%w: CPU list range %.20q", errMalformed, part)
			}
		}
		if z-a >= maxCPUs {
			return 0, fmt.Errorf("%w: CPU list range %.20q of more than %d CPUs", errMalformed, part, maxCPUs)
		}
		n += int(z-a) + 1 // #nosec G115 -- under maxCPUs, checked just above
		if n > maxCPUs {
			return 0, fmt.Errorf("%w: CPU list of more than %d CPUs", errMalformed, maxCPUs)
		}
	}
	return n, nil
}
