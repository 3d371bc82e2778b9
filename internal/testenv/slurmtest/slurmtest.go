// Package slurmtest starts a real, throwaway SLURM cluster on the local host
// for slurmscope's integration tests and demos: munged, slurmctld and one
// slurmd per node name, all with their keys, sockets, configs, spools and logs
// under one work directory, using proctrack/cgroup and task/cgroup with either
// cgroup/v1 or cgroup/v2.
//
// Several node names share the one host through Slurm's multiple-slurmd
// layout (slurmd -N <node>, a distinct Port per NodeName, all at 127.0.0.1).
// Debian's slurm-wlm is built with --enable-multiple-slurmd, so its cgroup
// paths carry the node name even with one node:
//
//	v1: /slurm_<node>/uid_<uid>/job_<id>/step_<s>[/task_<n>]
//	v2: /system.slice/<node>_slurmstepd.scope/job_<id>/step_<s>/{slurm,user/task_<n>}
//
// It needs root, and changes the host only where SLURM insists: it creates
// the test users if absent, an /etc/hosts entry if the hostname does not
// resolve (removed again by Stop), and the cgroup directories Slurm makes
// (removed by Stop). Nothing is written under /etc/slurm or /etc/munge.
//
// The core API takes an io.Writer for progress, not a testing.TB, so a demo
// program can use it too; StartT wraps it for tests. Start and Stop drive
// the parts: host.go (host changes), config.go and cgroup.go (configs,
// cgroups), daemons.go (process supervision), jobs.go (jobs).
package slurmtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Mode selects Slurm's cgroup plugin.
type Mode int

const (
	// V1 runs cgroup/v1 against the v1 controller mounts under
	// CgroupRoot (default /sys/fs/cgroup).
	V1 Mode = iota + 1
	// V2 runs cgroup/v2 against the host's cgroup2 mount. On a hybrid
	// host slurmd runs with the internal/testenv/cgv2shim LD_PRELOAD
	// library.
	V2
)

func (m Mode) String() string {
	switch m {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// User is a non-root account jobs are submitted as.
type User struct {
	Name string
	UID  int // also used as the primary group's gid
}

// DefaultUsers are created (if absent) when Options.Users is nil.
var DefaultUsers = []User{{"ssalice", 5001}, {"ssbob", 5002}}

// DefaultNodes is the node list when Options.Nodes is nil.
var DefaultNodes = []string{"node-a", "node-b"}

// Options configures Start.
type Options struct {
	Mode Mode
	// Nodes are the NodeNames, one slurmd each. Default DefaultNodes.
	Nodes []string
	// CPUs per node as configured in slurm.conf; slurmd takes the
	// configured value (SlurmdParameters=config_overrides), so it may
	// exceed the host's. Default 4.
	CPUs int
	// WorkDir holds everything the cluster writes. It must exist or be
	// creatable; it is made traversable by the test users. Required.
	WorkDir string
	// Users to create if absent. Default DefaultUsers.
	Users []User
	// CgroupRoot is where the v1 controllers are mounted. Default
	// /sys/fs/cgroup.
	CgroupRoot string
	// ShimSource is the path of internal/testenv/cgv2shim/cgv2shim.c.
	// Default: found relative to this source file's package in the module.
	ShimSource string
	// Constrain makes task/cgroup confine each job to the CPUs and memory
	// it was allocated (cgroup.conf ConstrainCores=yes, ConstrainRAMSpace=yes),
	// as production clusters do; a job's --mem is then its memory limit.
	// With V2 it needs the cpuset and memory controllers in the unified
	// hierarchy, which a hybrid host does not have (see CanConstrain).
	Constrain bool
	// Log receives progress lines. Default io.Discard.
	Log io.Writer
	// StartTimeout bounds each wait during Start. Default 30s.
	StartTimeout time.Duration
	// GRES are GPU records for gres.conf; see GRES. None by default.
	GRES []GRES
	// TaskProlog, when set, is the text of a script slurmstepd runs as the
	// job's user before each task (slurm.conf TaskProlog); its "export
	// NAME=value" and "unset NAME" lines change the task's environment,
	// as with deploy/slurmscope-taskprolog.sh on a real cluster.
	TaskProlog string
}

// Cluster is a running local SLURM.
type Cluster struct {
	opts        Options
	host        string
	conf        string // slurm.conf path
	mungeSocket string
	logDir      string
	jobDir      string
	cg2Mount    string
	v1Mounts    map[string]string // controller -> mount point
	users       map[string]User
	daemons     []*daemon
	madeSlice   bool   // we created <cg2>/system.slice
	hostsLine   string // the /etc/hosts line we added, if any
	stopOnce    sync.Once
	stopErr     error
	lock        *os.File // host-wide: one cluster at a time
}

// Start brings a cluster up and waits until every node is idle. On error
// everything started so far is stopped again; the error names the logs.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Mode != V1 && o.Mode != V2 {
		return nil, fmt.Errorf("slurmtest: Options.Mode must be V1 or V2, got %v", o.Mode)
	}
	if o.Constrain && !CanConstrain(o.Mode) {
		return nil, fmt.Errorf("slurmtest: Options.Constrain with %s needs the cpuset and memory controllers there, which this host does not have", o.Mode)
	}
	if o.WorkDir == "" {
		return nil, errors.New("slurmtest: Options.WorkDir is required")
	}
	if o.Nodes == nil {
		o.Nodes = DefaultNodes
	}
	if o.CPUs == 0 {
		o.CPUs = 4
	}
	if o.Users == nil {
		o.Users = DefaultUsers
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 30 * time.Second
	}
	if err := CheckPrerequisites(o.Mode); err != nil {
		return nil, err
	}
	wd, err := filepath.Abs(o.WorkDir)
	if err != nil {
		return nil, err
	}
	o.WorkDir = wd
	lock, err := acquireHostLock(ctx)
	if err != nil {
		return nil, err
	}
	c = &Cluster{
		opts:        o,
		conf:        filepath.Join(wd, "etc", "slurm.conf"),
		mungeSocket: filepath.Join(wd, "munge", "munge.socket"),
		logDir:      filepath.Join(wd, "log"),
		jobDir:      filepath.Join(wd, "jobs"),
		users:       map[string]User{},
		lock:        lock,
	}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	if c.host, err = os.Hostname(); err != nil {
		return c, err
	}
	if err = c.mkdirs(); err != nil {
		return c, err
	}
	if err = c.findCgroupMounts(); err != nil {
		return c, err
	}
	if err = c.ensureUsers(); err != nil {
		return c, err
	}
	if err = c.ensureHostResolves(); err != nil {
		return c, err
	}
	// A previous run that died mid-way may have left job cgroups (and
	// stray slurmstepds in them) under our node names.
	if err = c.removeCgroups(); err != nil {
		return c, fmt.Errorf("slurmtest: clearing cgroups left by an earlier run: %w", err)
	}
	if err = c.startMunge(ctx); err != nil {
		return c, err
	}
	if err = c.writeConfig(); err != nil {
		return c, err
	}
	var preload string
	if o.Mode == V2 {
		if preload, err = c.prepareV2(ctx); err != nil {
			return c, err
		}
	}
	if err = c.startCtld(ctx); err != nil {
		return c, err
	}
	for _, n := range o.Nodes {
		env := c.env()
		if preload != "" {
			env = append(env, "LD_PRELOAD="+preload)
		}
		if _, err = c.spawn("slurmd-"+n, env, "slurmd", "-D", "-N", n, "-f", c.conf); err != nil {
			return c, err
		}
	}
	if err = c.waitNodesIdle(ctx); err != nil {
		return c, err
	}
	c.logf("cluster up (%s, nodes %s, work dir %s)", o.Mode, strings.Join(o.Nodes, ","), wd)
	return c, nil
}

// CheckPrerequisites reports what is missing to run mode on this host: root,
// the SLURM and munge programs, a C compiler for v2, the cgroup mounts.
func CheckPrerequisites(mode Mode) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "must run as root")
	}
	progs := []string{"munged", "munge", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo", "useradd", "groupadd"}
	if mode == V2 {
		progs = append(progs, "cc")
	}
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p+" not in PATH")
		}
	}
	mounts, err := cgroupMounts()
	if err != nil {
		missing = append(missing, err.Error())
	} else if mode == V2 && mounts.v2 == "" {
		missing = append(missing, "no cgroup2 mount")
	} else if mode == V1 && mounts.v1["freezer"] == "" {
		missing = append(missing, "no cgroup v1 freezer mount")
	}
	if len(missing) > 0 {
		return fmt.Errorf("slurmtest: prerequisites for %s missing: %s (Debian: apt-get install slurm-wlm munge gcc)", mode, strings.Join(missing, "; "))
	}
	return nil
}

// CanConstrain reports whether this host lets Slurm constrain jobs' CPUs
// and memory under mode: v1 with its cpuset and memory controllers mounted,
// v2 with both in the unified hierarchy's cgroup.controllers.
func CanConstrain(mode Mode) bool {
	m, err := cgroupMounts()
	if err != nil {
		return false
	}
	if mode == V1 {
		return m.v1["cpuset"] != "" && m.v1["memory"] != ""
	}
	if m.v2 == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(m.v2, "cgroup.controllers"))
	if err != nil {
		return false
	}
	ctl := strings.Fields(string(b))
	return slices.Contains(ctl, "cpuset") && slices.Contains(ctl, "memory")
}

// NodeNames returns the SLURM node names, one slurmd each.
func (c *Cluster) NodeNames() []string { return append([]string(nil), c.opts.Nodes...) }

// Mode returns the cgroup mode the cluster runs in.
func (c *Cluster) Mode() Mode { return c.opts.Mode }

// CgroupV2Mount returns the cgroup2 mount point ("" if the host has none).
func (c *Cluster) CgroupV2Mount() string { return c.cg2Mount }

// V1Mount returns the mount point of a v1 controller ("" if none).
func (c *Cluster) V1Mount(controller string) string { return c.v1Mounts[controller] }

// ConfPath returns the slurm.conf path; cgroup.conf sits beside it.
func (c *Cluster) ConfPath() string { return c.conf }

// LogDir returns the directory holding every daemon's log.
func (c *Cluster) LogDir() string { return c.logDir }

// JobDir returns the world-writable directory jobs run in and write to.
func (c *Cluster) JobDir() string { return c.jobDir }

// Hostname returns the host's name, which every NodeHostname is set to.
func (c *Cluster) Hostname() string { return c.host }

// User returns a configured test user.
func (c *Cluster) User(name string) (User, bool) {
	u, ok := c.users[name]
	return u, ok
}

func (c *Cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.opts.Log, "slurmtest: "+format+"\n", args...)
}

// Stop cancels every job, stops the daemons, kills whatever is left in the
// cgroups Slurm made for these nodes and removes them, and undoes the
// /etc/hosts entry, so another cluster (v1 or v2) can start after it. It is
// safe to call more than once; the work dir is left for post-mortems.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.stopErr = c.stop()
		if c.lock != nil {
			c.lock.Close() // releases the flock
		}
	})
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	if len(c.daemons) > 0 {
		// Cancelling first lets slurmstepd tear its own cgroups down; what
		// it leaves is removed below either way.
		c.cancelJobs()
	}
	c.stopDaemons()
	if c.v1Mounts != nil || c.cg2Mount != "" {
		if err := c.removeCgroups(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.madeSlice {
		if err := os.Remove(filepath.Join(c.cg2Mount, "system.slice")); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		} else {
			c.madeSlice = false
		}
	}
	if err := c.restoreHosts(); err != nil {
		errs = append(errs, err)
	}
	c.logf("stopped")
	return errors.Join(errs...)
}
