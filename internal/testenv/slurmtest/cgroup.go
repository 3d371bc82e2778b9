package slurmtest

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type mounts struct {
	v2 string
	v1 map[string]string // controller (or name=...) -> mount point
}

// cgroupMounts reads /proc/self/mountinfo for cgroup and cgroup2 mounts.
func cgroupMounts() (mounts, error) {
	m := mounts{v1: map[string]string{}}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return m, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch qf[0] {
		case "cgroup2":
			if m.v2 == "" {
				m.v2 = pf[4]
			}
		case "cgroup":
			for _, o := range strings.Split(qf[2], ",") {
				switch o {
				case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "clone_children":
				default:
					if !strings.Contains(o, "=") || strings.HasPrefix(o, "name=") {
						m.v1[o] = pf[4]
					}
				}
			}
		}
	}
	return m, s.Err()
}

func (c *Cluster) findCgroupMounts() error {
	m, err := cgroupMounts()
	if err != nil {
		return err
	}
	c.cg2Mount, c.v1Mounts = m.v2, m.v1
	if c.opts.Mode == V1 && c.opts.CgroupRoot != "/sys/fs/cgroup" {
		// Honour a non-default v1 root: controllers at <root>/<ctrl>.
		for k := range c.v1Mounts {
			c.v1Mounts[k] = filepath.Join(c.opts.CgroupRoot, strings.TrimPrefix(k, "name="))
		}
	}
	return nil
}

// nodeCgroupDirs are the per-node cgroup directories Slurm creates, in every
// hierarchy, whether or not they exist now.
func (c *Cluster) nodeCgroupDirs() []string {
	var dirs []string
	for _, n := range c.opts.Nodes {
		if c.cg2Mount != "" {
			dirs = append(dirs, filepath.Join(c.cg2Mount, "system.slice", n+"_slurmstepd.scope"))
		}
		seen := map[string]bool{}
		for _, mnt := range c.v1Mounts {
			if !seen[mnt] {
				seen[mnt] = true
				dirs = append(dirs, filepath.Join(mnt, "slurm_"+n))
			}
		}
	}
	sort.Strings(dirs)
	return dirs
}

// removeCgroups kills every process left in the nodes' cgroups (stray
// slurmstepds, job tasks) and removes the directories, deepest first.
func (c *Cluster) removeCgroups() error {
	var errs []error
	for _, dir := range c.nodeCgroupDirs() {
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		if err := removeTree(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeTree(root string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var dirs []string
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range dirs {
			for _, pid := range readPids(filepath.Join(d, "cgroup.procs")) {
				if pid != os.Getpid() {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		// Deepest first: a cgroup with children cannot be removed.
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		var last error
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				last = err
			}
		}
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slurmtest: removing cgroup %s: %w", root, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readPids(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Proc is a process found in a job's cgroup tree: the ground truth the
// agent's attribution is checked against.
type Proc struct {
	PID    int
	Node   string // the node whose slurmd's tree holds it
	JobID  string
	Step   string // "batch", "extern", "0", ... ("" when directly in job_<id>)
	Cgroup string // path relative to the hierarchy's mount, as /proc/<pid>/cgroup shows it
	UID    int    // real uid, -1 if the process has gone
	Comm   string
	// Stepd is true for slurmstepd itself (v2: the step's "slurm" leaf;
	// v1: slurmstepd sits in job_<id>), as opposed to the step's tasks.
	Stepd bool
}

// JobProcs returns the processes in the cgroup tree of jobID on every node,
// read from the hierarchy proctrack/cgroup uses (v2, or v1 freezer).
func (c *Cluster) JobProcs(jobID string) ([]Proc, error) {
	if _, err := strconv.Atoi(jobID); err != nil {
		return nil, fmt.Errorf("slurmtest: job id %q is not a number (array tasks have their own; see Jobs)", jobID)
	}
	mnt := c.cg2Mount
	if c.opts.Mode == V1 {
		mnt = c.v1Mounts["freezer"]
	}
	var procs []Proc
	for _, n := range c.opts.Nodes {
		var roots []string
		if c.opts.Mode == V2 {
			roots = []string{filepath.Join(mnt, "system.slice", n+"_slurmstepd.scope", "job_"+jobID)}
		} else {
			roots, _ = filepath.Glob(filepath.Join(mnt, "slurm_"+n, "uid_*", "job_"+jobID))
		}
		for _, root := range roots {
			err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					if errors.Is(err, os.ErrNotExist) {
						return nil // a step ended while we walked
					}
					return err
				}
				if !d.IsDir() {
					return nil
				}
				rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, mnt), "/")
				for _, pid := range readPids(filepath.Join(p, "cgroup.procs")) {
					procs = append(procs, newProc(pid, n, jobID, rel))
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return procs, nil
}

func newProc(pid int, node, jobID, rel string) Proc {
	p := Proc{PID: pid, Node: node, JobID: jobID, Cgroup: rel, UID: -1}
	for _, part := range strings.Split(rel, "/") {
		if s, ok := strings.CutPrefix(part, "step_"); ok {
			p.Step = s
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		p.Comm = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
				p.UID, _ = strconv.Atoi(f[1])
			}
		}
	}
	p.Stepd = p.Comm == "slurmstepd" || strings.HasSuffix(rel, "/slurm")
	return p
}

// JobPIDs returns the pids in jobID's cgroup tree, per node.
func (c *Cluster) JobPIDs(jobID string) (map[string][]int, error) {
	procs, err := c.JobProcs(jobID)
	if err != nil {
		return nil, err
	}
	m := map[string][]int{}
	for _, p := range procs {
		m[p.Node] = append(m[p.Node], p.PID)
	}
	return m, nil
}
