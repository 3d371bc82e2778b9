// Package simjob makes a simulated SLURM job for tests and benchmarks that
// need a job but not a whole SLURM: a real cgroup v2 directory laid out as
// slurmd lays it out, which real processes are moved into. The agent cannot
// tell it from a job slurmd made, which is the point.
package simjob

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Job is a simulated job's cgroup.
type Job struct {
	ID   string
	Leaf string // .../job_<id>/step_0/user/task_0
	base string
	// Parent is the cgroup its slurmstepd.scope sits in, "/<slice>": the
	// agent takes only that place for Slurm's with
	// --slurm-cgroup-v2-parent (its default is slurmd's, /system.slice).
	Parent string
}

// Create makes <cgroup2>/<slice>/slurmstepd.scope/job_<id>/step_0/user/task_0.
// The slice keeps it apart from a real slurmd's tree on the same host.
func Create(slice, jobID string) (*Job, error) {
	if _, err := strconv.ParseUint(jobID, 10, 32); err != nil {
		return nil, fmt.Errorf("simjob: job id %q: %w", jobID, err)
	}
	mnt, err := Cgroup2Mount()
	if err != nil {
		return nil, err
	}
	base := filepath.Join(mnt, slice)
	leaf := filepath.Join(base, "slurmstepd.scope", "job_"+jobID, "step_0", "user", "task_0")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return nil, fmt.Errorf("simjob: %w", err)
	}
	return &Job{ID: jobID, Leaf: leaf, base: base, Parent: "/" + strings.Trim(slice, "/")}, nil
}

// Add moves a process into the job.
func (j *Job) Add(pid int) error {
	return os.WriteFile(filepath.Join(j.Leaf, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// Remove deletes the job's directories, and the slice's once no other job
// is left in them; its processes must have exited.
func (j *Job) Remove() error {
	var err error
	for p := j.Leaf; strings.HasPrefix(p, j.base); p = filepath.Dir(p) {
		if hasSubdir(p) {
			// Another job's (the shared slurmstepd.scope or slice):
			// waiting for it would only cost each job's cleanup 2 s a level.
			return nil
		}
		for i := 0; i < 100; i++ {
			if err = os.Remove(p); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond) // the kernel frees a dead task's cgroup lazily
		}
	}
	return err
}

// hasSubdir says whether dir has a directory in it: a cgroup with child
// cgroups, which rmdir refuses with the same EBUSY as one whose tasks the
// kernel has not freed yet.
func hasSubdir(dir string) bool {
	es, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range es {
		if e.IsDir() {
			return true
		}
	}
	return false
}

// Cgroup2Mount finds the cgroup2 mount point (/sys/fs/cgroup on a pure v2
// host, /sys/fs/cgroup/unified on a hybrid one).
func Cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" {
				return fields[4], nil
			}
		}
	}
	return "", errors.New("simjob: no cgroup2 mount")
}
