package budget

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CgroupMemoryLimit returns the memory limit of the cgroup a process is in
// (the systemd unit's MemoryMax), from the process's /proc/<pid>/cgroup
// (cgroupFile) and the cgroup file systems under root (<sys>/fs/cgroup):
// cgroup v2 memory.max, on a pure or hybrid layout, else v1
// memory.limit_in_bytes. ok is false when there is no limit.
func CgroupMemoryLimit(cgroupFile []byte, root string) (limit int64, ok bool) {
	var v2, v1 string
	sc := bufio.NewScanner(bytes.NewReader(cgroupFile))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",memory,"):
			v1 = parts[2]
		}
	}
	var files []string
	if v2 != "" {
		files = append(files, filepath.Join(root, v2, "memory.max"), filepath.Join(root, "unified", v2, "memory.max"))
	}
	if v1 != "" {
		files = append(files, filepath.Join(root, "memory", v1, "memory.limit_in_bytes"))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		// v1 says "no limit" with a page-rounded 2^63-1.
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// ForLimit sizes the budget for a process limited to limit bytes (its
// cgroup's): the budget is at most 3/8 of it, a job's share a third of
// that, and the Go runtime's soft limit (GOMEMLIMIT) 3/4 of it, so that the
// heap (about twice the live bytes), the BPF maps and what is not charged
// stay under the limit and the collector, not the OOM killer, acts first.
// With MemoryMax=1G that is the defaults: 384 MiB, 128 MiB a job.
func ForLimit(o Options, limit int64) (Options, int64) {
	if o.Total <= 0 {
		o.Total = DefaultTotal
	}
	o.Total = min(o.Total, limit*3/8)
	if o.JobShare <= 0 {
		o.JobShare = min(DefaultJobShare, o.Total/3)
	}
	if o.SharedShare <= 0 {
		o.SharedShare = min(DefaultSharedShare, o.Total/2)
	}
	return o, limit * 3 / 4
}
