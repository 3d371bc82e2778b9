package hostmetrics

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// The quantities read from one cgroup directory, in the order of
// schema.HostMetrics.
const (
	mCPU = iota
	mCPUs
	mMemUsed
	mMemPeak
	mMemLimit
	mOOM
	mIORead
	mIOWritten
	nMetrics
)

// sample is what one cgroup directory gave: a value where have is set; a
// quantity whose file (or controller) does not exist is missing, which for
// a job's own cgroup is reported as unsupported.
type sample struct {
	v       [nMetrics]float64
	have    [nMetrics]bool
	missing [nMetrics]bool
}

func (s *sample) set(m int, v float64) { s.v[m], s.have[m] = v, true }

// Bounds on what one job may make the collector read.
const (
	maxFileBytes = 64 << 10 // io.stat of a node with many devices is a few KiB
	maxSteps     = 256      // steps of a job read per poll
	maxOOMDirs   = 512      // v1 cgroups summed for one OOM count
)

// layout is where the hierarchies are under the cgroup root: the unified
// (v2) hierarchy at the root itself or at unified/ (a hybrid host), v1
// controllers at <root>/<controller> (often links to "cpu,cpuacct").
type layout struct {
	v2 string
	v1 map[string]string
}

// v1Controllers are the v1 hierarchies the collector reads, in the order
// it looks for a job's steps in them.
var v1Controllers = []string{"memory", "cpuacct", "cpuset"}

func discover(root string) layout {
	l := layout{v1: map[string]string{}}
	for _, dir := range []string{root, filepath.Join(root, "unified")} {
		if st, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err == nil && st.Mode().IsRegular() {
			l.v2 = dir
			break
		}
	}
	for _, c := range v1Controllers {
		dir := filepath.Join(root, c)
		if st, err := os.Stat(dir); err == nil && st.IsDir() && dir != l.v2 {
			l.v1[c] = dir
		}
	}
	return l
}

// removed reports an error that means the cgroup was removed while it was
// read, as a job's or a step's is when it ends: the path is gone (ENOENT),
// or kernfs answers ENODEV for a file opened before the cgroup's rmdir.
// Neither is a file that could not be read.
func removed(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

// reader reads cgroup files, telling fail about each file it could not use
// (other than a missing one).
type reader struct {
	l    layout
	fail func(file, reason string, err error)
	// owner is the uid of the job being read (-1 unknown): Slurm's v1
	// plugin gives it the job's step directories.
	owner int
}

// file reads base/dir/name; missing says it does not exist.
func (r *reader) file(base, dir, name string) (b []byte, missing bool, ok bool) {
	if base == "" {
		return nil, true, false
	}
	b, err := procfs.ReadFileBeneath(base, path.Join(dir, name), maxFileBytes)
	switch {
	case err == nil:
		return b, false, true
	case removed(err):
		return nil, true, false
	case errors.Is(err, procfs.ErrTooLarge):
		r.fail(name, "too_large", err)
	case errors.Is(err, procfs.ErrNotRegular), errors.Is(err, procfs.ErrOwner), errors.Is(err, procfs.ErrLink):
		r.fail(name, "refused", err)
	default:
		r.fail(name, "unreadable", err)
	}
	return nil, false, false
}

// value reads one quantity from a file with parse; a file that does not
// parse is counted and left out.
func (r *reader) value(s *sample, m int, base, dir, name string, parse func([]byte) (float64, bool, error)) {
	b, missing, ok := r.file(base, dir, name)
	if !ok {
		s.missing[m] = missing
		return
	}
	v, present, err := parse(b)
	if err != nil {
		r.fail(name, "malformed", err)
		return
	}
	if present {
		s.set(m, v)
	}
}

// number reads a file of one number, in units of 1/per of the base unit
// (cpuacct.usage: nanoseconds, per 1e9).
func number(per float64) func([]byte) (float64, bool, error) {
	return func(b []byte) (float64, bool, error) {
		n, err := parseUint(b)
		return float64(n) / per, true, err
	}
}

func keyed(key string, per float64) func([]byte) (float64, bool, error) {
	return func(b []byte) (float64, bool, error) {
		n, err := parseKeyed(b, key)
		return float64(n) / per, true, err
	}
}

func limit(b []byte) (float64, bool, error) {
	n, ok, err := parseLimit(b)
	return float64(n), ok, err
}

func cpuCount(b []byte) (float64, bool, error) {
	n, err := parseCPUList(b)
	return float64(n), n > 0, err
}

// v2 reads a cgroup v2 directory. constrained says whether the job's own
// cgroup has a cpuset of its own (Slurm's ConstrainCores): without one,
// cpuset.cpus.effective is the whole node's, not an allocation.
func (r *reader) v2(dir string, constrained bool) sample {
	var s sample
	base := r.l.v2
	r.value(&s, mCPU, base, dir, "cpu.stat", keyed("usage_usec", 1e6))
	if constrained {
		r.value(&s, mCPUs, base, dir, "cpuset.cpus.effective", cpuCount)
	} else {
		s.missing[mCPUs] = true
	}
	r.value(&s, mMemUsed, base, dir, "memory.current", number(1))
	r.value(&s, mMemPeak, base, dir, "memory.peak", number(1))
	r.value(&s, mMemLimit, base, dir, "memory.max", limit)
	// memory.events counts the cgroup's descendants too.
	r.value(&s, mOOM, base, dir, "memory.events", keyed("oom_kill", 1))
	b, missing, ok := r.file(base, dir, "io.stat")
	switch {
	case ok:
		if rd, wr, err := parseIOStat(b); err != nil {
			r.fail("io.stat", "malformed", err)
		} else {
			s.set(mIORead, float64(rd))
			s.set(mIOWritten, float64(wr))
		}
	case missing:
		s.missing[mIORead], s.missing[mIOWritten] = true, true
	}
	return s
}

// cpusetConstrained reports whether a v2 job directory has a cpuset of its
// own; missing is true when the cpuset controller is not enabled for it.
func (r *reader) cpusetConstrained(dir string) (constrained, missing bool) {
	b, missing, ok := r.file(r.l.v2, dir, "cpuset.cpus")
	if !ok {
		return false, missing
	}
	n, err := parseCPUList(b)
	if err != nil {
		r.fail("cpuset.cpus", "malformed", err)
		return false, false
	}
	return n > 0, false
}

// v1 reads a cgroup v1 directory from each controller's hierarchy; depth
// is how far below it processes sit (2 for a job: step, task), for the OOM
// count, which v1 keeps only in the cgroup of the process killed.
func (r *reader) v1(dir string, depth int) sample {
	var s sample
	mem, acct, cpuset := r.l.v1["memory"], r.l.v1["cpuacct"], r.l.v1["cpuset"]
	r.value(&s, mCPU, acct, dir, "cpuacct.usage", number(1e9))
	r.value(&s, mCPUs, cpuset, dir, "cpuset.cpus", cpuCount)
	r.value(&s, mMemUsed, mem, dir, "memory.usage_in_bytes", number(1))
	r.value(&s, mMemPeak, mem, dir, "memory.max_usage_in_bytes", number(1))
	r.value(&s, mMemLimit, mem, dir, "memory.limit_in_bytes", limit)
	budget := maxOOMDirs
	if n, missing, ok := r.oomV1(mem, dir, depth, &budget); ok {
		s.set(mOOM, float64(n))
	} else {
		s.missing[mOOM] = missing
	}
	// Block I/O is read from cgroup v2 only.
	s.missing[mIORead], s.missing[mIOWritten] = true, true
	return s
}

// oomV1 sums memory.oom_control's oom_kill over dir and its descendants
// down to depth. Any directory it cannot read fails the sum: a partial
// count would understate the kills.
func (r *reader) oomV1(base, dir string, depth int, budget *int) (n uint64, missing, ok bool) {
	if *budget--; *budget < 0 {
		r.fail("memory.oom_control", "too_large", errors.New(dir+": too many cgroups below the job"))
		return 0, false, false
	}
	b, missing, ok := r.file(base, dir, "memory.oom_control")
	if !ok {
		return 0, missing, false
	}
	n, err := parseKeyed(b, "oom_kill")
	if err != nil {
		r.fail("memory.oom_control", "malformed", err)
		return 0, false, false
	}
	if depth == 0 {
		return n, false, true
	}
	subs, err := procfs.ReadDirBeneath(base, dir, maxSteps, r.owner)
	if err != nil {
		if removed(err) {
			return n, false, true // it went away with its processes
		}
		r.fail("memory.oom_control", reasonOf(err), err)
		return 0, false, false
	}
	for _, sub := range subs {
		k, gone, ok := r.oomV1(base, path.Join(dir, sub), depth-1, budget)
		if !ok && !gone { // a task cgroup removed meanwhile held no process
			return 0, false, false
		}
		n += k
	}
	return n, false, true
}
