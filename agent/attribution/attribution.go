// Package attribution turns a pid into the SLURM job it belongs to.
//
// Membership comes only from the process's cgroup, which Slurm sets and the
// job's user cannot change: a login shell that inherited SLURM_JOB_ID is not
// in a job, and neither is a process in a look-alike tree a user built
// (cgroup.Layout says where slurmd makes its tree; cgroup.Tree checks root
// owns it). Metadata is job-level: the job's name, account, partition and
// any other schema.Metadata attribute come from the environment of the
// job's tasks (or slurmctld), where the schema's table says, its owner
// from the uid of its tasks (or the v1 cgroup path, or slurmctld), and the
// id of a SLUID directory from slurmstepd's title, never from an
// environment variable the user controls. So slurmstepd, or a task whose
// environment is unreadable, still carries the job's name and owner. No two
// jobs of one host ever publish the same id. A process's task is its own:
// its local id from its task_<n> cgroup, and with Options.Ranks its rank
// and node index from its own environment, read once per program
// (tasks.go), a claim that labels its samples and decides nothing else.
//
// Lookups are cached per (pid, start time), so a reused pid never inherits a
// dead process's job; job metadata is cached per job with a TTL; processes in
// no job are cached negatively. Cached never touches /proc, so the sampling
// path can call it per sample.
package attribution

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/slurm"
	"github.com/slurmscope/slurmscope/agent/users"
	"github.com/slurmscope/slurmscope/schema"
)

// Job is an immutable snapshot of what is known about a job on this host.
type Job struct {
	ID    string // numeric job id; for an unresolved SLUID job, "s<SLUID>"
	SLUID string
	// Name is the job's schema.JobName, which also names its profiles
	// (service_name) and keys its per-job series.
	Name string
	User string
	UID  int // -1 when not yet known
	// Meta holds the job's other metadata attributes (schema.Metadata)
	// by name, those with a value. Never written once published.
	Meta map[string]string
	Host string // the node this part of the job runs on
	// Cgroup is the job's directory in the cgroup v2 hierarchy (its path
	// as /proc shows it); "" for a v1 job.
	Cgroup string
	// GRES is what slurmctld says the job holds on Host; nil when it was
	// not asked.
	GRES []slurm.GRES
	// GRESPending: slurmctld is being asked about the job for the first
	// time and has not answered yet, so GRES is not known to be missing.
	GRESPending bool
}

// Value is the job's value of a job attribute, or of host.name; "" for any
// other. Labels and slurmscope_job_info take every job attribute of the
// schema through it, so a metadata attribute needs no case here.
func (j *Job) Value(a schema.Attribute) string {
	switch {
	case a.Name == schema.JobID.Name:
		return j.ID
	case a.Name == schema.JobName.Name:
		return j.Name
	case a.Name == schema.JobUser.Name:
		return j.User
	case a.Name == schema.HostName.Name:
		return j.Host
	case a.Scope == schema.ScopeJob:
		return j.Meta[a.Name]
	}
	return ""
}

// Process is the attribution of one process.
type Process struct {
	procfs.ID
	Comm  string
	UID   int
	Host  string
	Step  string
	Task  string
	Stepd bool // slurmstepd itself
	// Rank and NodeIndex are what the process's environment says of its
	// task (slurm.Task), "" until read (Options.Ranks) or where it says
	// nothing valid.
	Rank, NodeIndex string
	// Foreign is set when the process belongs to another slurmd on this host
	// (multiple-slurmd layout) than the node this agent serves.
	Foreign bool
	Job     *Job // nil when the process is in no job
}

// InJob reports whether the process belongs to a job of this node.
func (p Process) InJob() bool { return p.Job != nil && !p.Foreign }

// Options configure a Resolver.
type Options struct {
	Proc  procfs.FS
	Users users.Lookup
	// Layout says where slurmd makes its cgroups; default
	// cgroup.DefaultLayout.
	Layout *cgroup.Layout
	// Cgroups checks that a job's cgroup directories are Slurm's; default
	// cgroup.NewTree("/sys/fs/cgroup"). Tests of fixture proc trees give
	// a fixture tree (cgrouptest.Mirror).
	Cgroups cgroup.Verifier
	// Controller, when set, is asked about each job once per JobTTL; its
	// answer wins over the tasks' environment.
	Controller slurm.Controller
	// Metadata are the job attributes read from the tasks' environment and
	// the Controller's answer, as their schema.Sources say; default
	// schema.Metadata().
	Metadata []schema.Attribute
	// ControllerWait is how long a refresh waits for the Controller
	// before it publishes what the node knows, the answer following when
	// it comes (the callers are the host poll and a new process's
	// announce). Default 100 ms.
	ControllerWait time.Duration
	// NodeName, when set, restricts attribution to this node's jobs where
	// the cgroup path names the node (multiple slurmd on one host).
	NodeName string
	// HostName labels processes whose path names no node; defaults to
	// NodeName.
	HostName    string
	JobTTL      time.Duration // default 60s
	NegativeTTL time.Duration // how long "not in a job" is believed; default 30s
	// MaxEnvReads bounds how many tasks' environments one job refresh
	// reads, and how many one pass reads for ranks.
	MaxEnvReads int
	// Ranks reads the environment of each process of a job once (again
	// after an exec) for its task's rank and node index (Process.Rank,
	// NodeIndex); off, only the tasks that job metadata needs are read.
	Ranks bool
	// ExitGrace is how long an exited process stays in the cache: its
	// samples are drained after it exits and must still find their job.
	// Default 2 minutes.
	ExitGrace time.Duration
	Now       func() time.Time
	// Log gets a debug line per process placed in a job, and per process
	// refused one (see logNew); nil: none.
	Log *slog.Logger
}

// Stats counts what went wrong, so it can be logged once and exported.
type Stats struct {
	ColdLookups     uint64
	Gone            uint64 // processes that exited while being read
	MalformedCgroup uint64
	Unreadable      uint64 // other read errors
	ControllerErrs  uint64
	// ControllerUnknown counts jobs slurmctld did not know (ended, or not
	// made by it).
	ControllerUnknown uint64
	OwnerConflicts    uint64 // slurmctld and the node disagree about the owner
	// Refused counts processes whose Slurm-looking cgroup path was not
	// Slurm's, by reason (cgroup.ReasonOutside, ReasonOwner,
	// ReasonUnverified): they are in no job.
	Refused map[string]uint64
	// IDConflicts counts SLUID jobs whose slurmstepd named an id another
	// job of the host holds (or whose slurmstepds disagree): they keep
	// s<SLUID> as their id.
	IDConflicts uint64
}

// Resolver attributes processes to jobs. It is safe for concurrent use.
type Resolver struct {
	o       Options
	envKeys []string // what a task's environment is read for
	// envGuard bounds the reads of each job's tasks' environments.
	envGuard procfs.Guard

	mu    sync.RWMutex
	procs map[int]*procEntry
	jobs  map[string]*jobEntry

	cold, gone, malformed, unreadable, ctldErrs, ctldUnknown, conflicts, idConflicts atomic.Uint64
	refused                                                                          [len(refusedReasons)]atomic.Uint64
	lastErr                                                                          atomic.Pointer[error]
}

// refusedReasons are the cgroup refusals counted, in Stats' order.
var refusedReasons = [...]string{cgroup.ReasonOutside, cgroup.ReasonOwner, cgroup.ReasonUnverified}

// New returns a Resolver.
func New(o Options) *Resolver {
	if o.Proc.Root == "" {
		o.Proc = procfs.New("")
	}
	if o.Users == nil {
		o.Users = &users.System{}
	}
	if o.Layout == nil {
		l := cgroup.DefaultLayout()
		o.Layout = &l
	}
	if o.Cgroups == nil {
		o.Cgroups = cgroup.NewTree("")
	}
	if o.HostName == "" {
		o.HostName = o.NodeName
	}
	if o.Metadata == nil {
		o.Metadata = schema.Metadata()
	}
	if o.ControllerWait <= 0 {
		o.ControllerWait = 100 * time.Millisecond
	}
	if o.JobTTL <= 0 {
		o.JobTTL = 60 * time.Second
	}
	if o.NegativeTTL <= 0 {
		o.NegativeTTL = 30 * time.Second
	}
	if o.MaxEnvReads <= 0 {
		o.MaxEnvReads = 16
	}
	if o.ExitGrace <= 0 {
		o.ExitGrace = 2 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	keys := slurm.EnvKeys(o.Metadata)
	if o.Ranks {
		// One read of a task serves its job's metadata and its rank.
		keys = append(keys, slurm.TaskEnvKeys()...)
	}
	return &Resolver{o: o, envKeys: keys, procs: map[int]*procEntry{}, jobs: map[string]*jobEntry{}}
}

// Stats returns the error counters.
func (r *Resolver) Stats() Stats {
	st := Stats{ColdLookups: r.cold.Load(), Gone: r.gone.Load(), MalformedCgroup: r.malformed.Load(),
		Unreadable: r.unreadable.Load(), ControllerErrs: r.ctldErrs.Load(), ControllerUnknown: r.ctldUnknown.Load(),
		OwnerConflicts: r.conflicts.Load(), IDConflicts: r.idConflicts.Load(), Refused: map[string]uint64{}}
	for i, reason := range refusedReasons {
		st.Refused[reason] = r.refused[i].Load()
	}
	return st
}

// countRefused counts a cgroup path that was not Slurm's.
func (r *Resolver) countRefused(pid int, ref *cgroup.Refused) {
	for i, reason := range refusedReasons {
		if reason == ref.Reason {
			r.refused[i].Add(1)
		}
	}
	r.remember(fmt.Errorf("pid %d: %w", pid, ref))
}

// LastError returns the most recent non-trivial error, for a one-line log.
func (r *Resolver) LastError() error {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *Resolver) count(err error) {
	if errors.Is(err, procfs.ErrGone) {
		r.gone.Add(1)
		return
	}
	r.unreadable.Add(1)
	r.remember(err)
}

func (r *Resolver) remember(err error) { r.lastErr.Store(&err) }

const maxValue = 1024

// clean makes a value from a hostile source safe to carry (see
// schema.CleanValue).
func clean(s string, limit int) string { return schema.CleanValue(s, limit) }

// HostName is the name processes outside the multiple-slurmd layout are
// labelled with.
func (r *Resolver) HostName() string { return r.o.HostName }
