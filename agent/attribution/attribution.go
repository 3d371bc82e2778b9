// Package attribution turns a pid into the SLURM job it belongs to.
//
// Membership comes only from the process's cgroup, which Slurm sets and the
// job's user cannot change: a login shell that inherited SLURM_JOB_ID is not
// in a job. Metadata is job-level: the job's name, account and partition come
// from the environment of the job's tasks (or slurmctld), and its owner from
// the uid of its tasks (or the v1 cgroup path, or slurmctld), never from an
// environment variable the user controls. So slurmstepd, or a task whose
// environment is unreadable, still carries the job's name and owner.
//
// Lookups are cached per (pid, start time), so a reused pid never inherits a
// dead process's job; job metadata is cached per job with a TTL; processes in
// no job are cached negatively. Cached never touches /proc, so the sampling
// path can call it per sample.
package attribution

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
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
	ID        string // numeric job id; for an unresolved SLUID job, "s<SLUID>"
	SLUID     string
	Name      string
	User      string
	UID       int // -1 when not yet known
	Account   string
	Partition string
	Host      string // the node this part of the job runs on
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
	// Controller, when set, is asked about each job once per JobTTL; its
	// answer wins over the tasks' environment.
	Controller slurm.Controller
	// NodeName, when set, restricts attribution to this node's jobs where
	// the cgroup path names the node (multiple slurmd on one host).
	NodeName string
	// HostName labels processes whose path names no node; defaults to
	// NodeName.
	HostName    string
	JobTTL      time.Duration // default 60s
	NegativeTTL time.Duration // how long "not in a job" is believed; default 30s
	// MaxEnvReads bounds how many tasks' environments one job refresh reads.
	MaxEnvReads int
	// ExitGrace is how long an exited process stays in the cache: its
	// samples are drained after it exits and must still find their job.
	// Default 2 minutes.
	ExitGrace time.Duration
	Now       func() time.Time
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
}

// Resolver attributes processes to jobs. It is safe for concurrent use.
type Resolver struct {
	o Options

	mu    sync.RWMutex
	procs map[int]*procEntry
	jobs  map[string]*jobEntry

	cold, gone, malformed, unreadable, ctldErrs, ctldUnknown, conflicts atomic.Uint64
	lastErr                                                             atomic.Pointer[error]
}

type procEntry struct {
	start   uint64
	checked time.Time
	comm    string
	uid     int
	loc     cgroup.Location
	host    string
	foreign bool
	job     *jobEntry // nil: in no job (negative entry)
	goneAt  time.Time // when a scan first missed it; zero while it lives
}

type jobEntry struct {
	key     string
	loc     cgroup.Location // job-level fields only: JobID, SLUID, Node, UID
	host    string
	snap    atomic.Pointer[Job]
	members map[int]*procEntry
	tried   map[int]uint64 // pid -> start time whose environment was read
	env     envFacts
	// refreshed is when metadata was last gathered; dirty is set when a
	// member joined since, which may carry what is still missing.
	refreshed time.Time
	dirty     bool
	ctldInfo  *slurm.JobInfo
	ctldAt    time.Time
	// uidFromNode is the owner as the node sees it (path or task uid).
	uidFromNode int
	// exited counts processes that left the job but are still cached.
	exited int
}

type envFacts struct {
	name, account, partition string
	ids                      map[string]int // SLURM_JOB_ID values seen (for SLUID jobs)
}

// New returns a Resolver.
func New(o Options) *Resolver {
	if o.Proc.Root == "" {
		o.Proc = procfs.New("")
	}
	if o.Users == nil {
		o.Users = &users.System{}
	}
	if o.HostName == "" {
		o.HostName = o.NodeName
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
	return &Resolver{o: o, procs: map[int]*procEntry{}, jobs: map[string]*jobEntry{}}
}

// Cached returns the attribution of process id if it is cached. It never
// reads /proc and never allocates: the sampling path calls it per sample. A
// different start time means the pid was reused: no answer.
func (r *Resolver) Cached(id procfs.ID) (Process, bool) {
	pid := id.PID
	r.mu.RLock()
	e := r.procs[pid]
	if e == nil || e.start != id.Start {
		r.mu.RUnlock()
		return Process{}, false
	}
	p := e.process(pid)
	r.mu.RUnlock()
	return p, true
}

func (e *procEntry) process(pid int) Process {
	p := Process{ID: procfs.ID{PID: pid, Start: e.start}, Comm: e.comm, UID: e.uid, Host: e.host,
		Step: e.loc.Step, Task: e.loc.Task, Stepd: e.loc.Stepd, Foreign: e.foreign}
	if e.job != nil {
		p.Job = e.job.snap.Load()
	}
	return p
}

// Resolve attributes a live process, reading /proc only for what the cache
// does not already hold.
func (r *Resolver) Resolve(pid int) (Process, error) {
	st, err := r.o.Proc.Stat(pid)
	if err != nil {
		r.count(err)
		return Process{}, err
	}
	return r.resolve(pid, st)
}

func (r *Resolver) resolve(pid int, st procfs.Stat) (Process, error) {
	now := r.o.Now()
	r.mu.RLock()
	e := r.procs[pid]
	fresh := e != nil && e.start == st.StartTime && now.Sub(e.checked) < r.ttl(e)
	var j *jobEntry
	if fresh {
		j = e.job
	}
	r.mu.RUnlock()
	if fresh {
		if j != nil && r.jobStale(j, now) {
			r.refreshJob(j)
		}
		r.mu.RLock()
		p := e.process(pid)
		r.mu.RUnlock()
		return p, nil
	}

	r.cold.Add(1)
	raw, err := r.o.Proc.Cgroup(pid)
	if err != nil {
		r.count(err)
		return Process{}, err
	}
	loc, perr := cgroup.Parse(raw)
	if perr != nil {
		// Malformed Slurm path: the process is not placed in a job on a
		// guess. It is cached negatively like any other.
		r.malformed.Add(1)
		r.remember(fmt.Errorf("pid %d: %w", pid, perr))
	}
	uid, err := r.o.Proc.UID(pid)
	if err != nil {
		r.count(err)
		if errors.Is(err, procfs.ErrGone) {
			return Process{}, err
		}
		uid = -1
	}
	ne := &procEntry{start: st.StartTime, checked: now, comm: clean(st.Comm, 64), uid: uid, loc: loc, host: r.o.HostName}
	if loc.Node != "" {
		ne.host = loc.Node
		ne.foreign = r.o.NodeName != "" && loc.Node != r.o.NodeName
	}

	r.mu.Lock()
	if old := r.procs[pid]; old != nil && old.job != nil {
		// The job entry stays: the process (or the pid's new owner)
		// usually rejoins it below; empty jobs are collected by scans.
		if old.goneAt.IsZero() {
			old.job.drop(pid)
		} else {
			old.job.exited--
		}
	}
	r.procs[pid] = ne
	if loc.InJob {
		j = r.jobs[loc.JobKey()]
		if j == nil {
			j = &jobEntry{key: loc.JobKey(), host: ne.host, members: map[int]*procEntry{}, tried: map[int]uint64{}, uidFromNode: loc.UID}
			j.loc = cgroup.Location{InJob: true, JobID: loc.JobID, SLUID: loc.SLUID, Node: loc.Node, UID: loc.UID}
			j.publish(r.o.Users)
			r.jobs[j.key] = j
		}
		if j.loc.UID < 0 && loc.UID >= 0 {
			j.loc.UID = loc.UID
		}
		j.members[pid] = ne
		j.dirty = true
		ne.job = j
	}
	r.mu.Unlock()

	if j != nil && r.jobStale(j, now) {
		r.refreshJob(j)
	}
	r.mu.RLock()
	p := ne.process(pid)
	r.mu.RUnlock()
	return p, nil
}

func (r *Resolver) ttl(e *procEntry) time.Duration {
	if e.job == nil {
		// pam_slurm_adopt can move an existing process into a job, so "in
		// no job" is only believed for a while.
		return r.o.NegativeTTL
	}
	return r.o.JobTTL
}

func (r *Resolver) jobStale(j *jobEntry, now time.Time) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	snap := j.snap.Load()
	complete := snap.Name != "" && snap.UID >= 0 && j.idKnown()
	return j.refreshed.IsZero() || now.Sub(j.refreshed) >= r.o.JobTTL ||
		!complete && (j.dirty || now.Sub(j.refreshed) >= incompleteRetry)
}

// incompleteRetry is how soon a job still missing its name or owner is
// looked at again: its tasks may have been caught before their exec.
const incompleteRetry = 2 * time.Second

func (j *jobEntry) idKnown() bool { return j.loc.JobID != "" || j.resolvedID() != "" }

func (j *jobEntry) drop(pid int) { delete(j.members, pid) }

// Scan resolves every process under the proc root, forgets processes that
// are gone and jobs with no process left, and returns the attributions.
func (r *Resolver) Scan() ([]Process, error) {
	pids, err := r.o.Proc.PIDs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	sort.Ints(pids)
	live := make(map[int]bool, len(pids))
	out := make([]Process, 0, len(pids))
	for _, pid := range pids {
		p, err := r.Resolve(pid)
		if err != nil {
			continue // counted; a process that exits mid-read is normal
		}
		live[pid] = true
		out = append(out, p)
	}
	r.forgetExcept(live)
	// Metadata may have completed after early members were resolved (the
	// slurmstepd before its tasks): hand out the final snapshots.
	r.mu.RLock()
	for i := range out {
		if e := r.procs[out[i].PID]; e != nil && e.start == out[i].Start {
			out[i] = e.process(out[i].PID)
		}
	}
	r.mu.RUnlock()
	return out, nil
}

// Forget drops a process that is known to have exited.
func (r *Resolver) Forget(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(pid)
}

func (r *Resolver) forgetLocked(pid int) {
	e := r.procs[pid]
	if e == nil {
		return
	}
	delete(r.procs, pid)
	if j := e.job; j != nil {
		if e.goneAt.IsZero() {
			j.drop(pid)
		} else {
			j.exited--
		}
		if len(j.members) == 0 && j.exited == 0 {
			delete(r.jobs, j.key)
		}
	}
}

// forgetExcept forgets processes that have been gone for ExitGrace. Until
// then Cached still answers for them (keyed by start time, so a reused pid
// cannot inherit the job), while they no longer count as job members.
func (r *Resolver) forgetExcept(live map[int]bool) {
	now := r.o.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid, e := range r.procs {
		switch {
		case live[pid]:
			e.goneAt = time.Time{}
		case e.goneAt.IsZero():
			e.goneAt = now
			if j := e.job; j != nil {
				j.drop(pid)
				j.exited++
			}
		case now.Sub(e.goneAt) >= r.o.ExitGrace:
			r.forgetLocked(pid)
		}
	}
	for key, j := range r.jobs {
		if len(j.members) == 0 && j.exited == 0 {
			delete(r.jobs, key)
		}
	}
}

// Jobs returns the current snapshot of every job with a live process.
func (r *Resolver) Jobs() []*Job {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Job, 0, len(r.jobs))
	for _, j := range r.jobs {
		out = append(out, j.snap.Load())
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Host+"/"+out[a].ID < out[b].Host+"/"+out[b].ID })
	return out
}

// Stats returns the error counters.
func (r *Resolver) Stats() Stats {
	return Stats{ColdLookups: r.cold.Load(), Gone: r.gone.Load(), MalformedCgroup: r.malformed.Load(),
		Unreadable: r.unreadable.Load(), ControllerErrs: r.ctldErrs.Load(), ControllerUnknown: r.ctldUnknown.Load(),
		OwnerConflicts: r.conflicts.Load()}
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

// refreshJob gathers the job's metadata from its members and slurmctld.
func (r *Resolver) refreshJob(j *jobEntry) {
	now := r.o.Now()
	type cand struct {
		pid   int
		start uint64
		rank  int
	}
	// A task is forked by slurmstepd (root, slurmd's environment) and only
	// then takes the user's uid and execs the job's program, keeping its
	// pid and start time. Members first seen in that moment are read again.
	r.mu.RLock()
	var recheck []int
	for pid, m := range j.members {
		if !m.loc.Stepd && m.uid <= 0 {
			recheck = append(recheck, pid)
		}
	}
	r.mu.RUnlock()
	type fresh struct {
		pid  int
		st   procfs.Stat
		uid  int
		fail bool
	}
	var reread []fresh
	for _, pid := range recheck {
		st, err := r.o.Proc.Stat(pid)
		uid, err2 := r.o.Proc.UID(pid)
		reread = append(reread, fresh{pid, st, uid, err != nil || err2 != nil})
	}

	r.mu.Lock()
	for _, f := range reread {
		if m := j.members[f.pid]; m != nil && !f.fail && m.start == f.st.StartTime {
			m.uid, m.comm = f.uid, clean(f.st.Comm, 64)
		}
	}
	var cands []cand
	// Owner votes. slurmstepd and the extern step's placeholder run as
	// root in every job, so they never vote; an adopted ssh session in the
	// extern step votes only when no task does.
	taskVotes, externVotes := map[int]int{}, map[int]int{}
	for pid, m := range j.members {
		if m.loc.Stepd {
			continue // slurmstepd runs as root with slurmd's environment
		}
		if m.uid >= 0 {
			if m.loc.Step == "extern" || m.loc.Task == "special" {
				externVotes[m.uid]++
			} else {
				taskVotes[m.uid]++
			}
		}
		if t, ok := j.tried[pid]; ok && t == m.start {
			continue
		}
		cands = append(cands, cand{pid, m.start, stepRank(m.loc.Step)})
	}
	j.dirty = false
	jobID := j.loc.JobID
	if jobID == "" {
		jobID = j.resolvedID()
	}
	askCtld := r.o.Controller != nil && jobID != "" && (j.ctldInfo == nil || now.Sub(j.ctldAt) >= r.o.JobTTL)
	r.mu.Unlock()

	// The batch script and the first steps carry the job's own environment;
	// the extern step's processes (adopted ssh sessions) may not.
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].rank != cands[b].rank {
			return cands[a].rank < cands[b].rank
		}
		return cands[a].start < cands[b].start
	})
	if len(cands) > r.o.MaxEnvReads {
		cands = cands[:r.o.MaxEnvReads]
	}
	type envRead struct {
		pid   int
		start uint64
		env   map[string]string
	}
	var reads []envRead
	for _, c := range cands {
		env, err := r.o.Proc.Environ(c.pid, slurm.EnvKeys...)
		if err != nil {
			r.count(err)
		}
		reads = append(reads, envRead{c.pid, c.start, env})
	}

	var info *slurm.JobInfo
	if askCtld {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := r.o.Controller.Job(ctx, jobID)
		cancel()
		switch {
		case errors.Is(err, slurm.ErrNoSuchJob):
			// Ended a moment ago, or a cgroup slurmctld never made: not
			// a failure of slurmctld. The tasks' environment stands.
			r.ctldUnknown.Add(1)
		case err != nil:
			r.ctldErrs.Add(1)
			r.remember(fmt.Errorf("job %s: %w", jobID, err))
		default:
			info = &got
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rd := range reads {
		// An environment without SLURM_JOB_ID is slurmstepd's, before
		// the task's exec: read it again next time.
		if rd.env[slurm.EnvJobID] != "" {
			j.tried[rd.pid] = rd.start
		}
		j.env.absorb(rd.env, j.loc.JobID)
	}
	if info != nil {
		j.ctldInfo, j.ctldAt = info, now
	}
	// The owner: the v1 path names it; otherwise the tasks' uid, by
	// majority (ties to the lower uid, so the answer is stable).
	uid := j.loc.UID
	if uid < 0 {
		uid = ownerByVote(taskVotes, true)
	}
	if uid < 0 {
		uid = ownerByVote(externVotes, false)
	}
	j.uidFromNode = uid
	if ci := j.ctldInfo; ci != nil && ci.UID >= 0 && uid >= 0 && ci.UID != uid {
		r.conflicts.Add(1)
		r.remember(fmt.Errorf("job %s: slurmctld says uid %d, its tasks run as %d; keeping the node's", jobID, ci.UID, uid))
	}
	j.refreshed = now
	j.publish(r.o.Users)
}

// ownerByVote picks the job owner from the real uids of its processes. A
// non-root uid wins over root: in a user's job, root processes are Slurm's
// own helpers, while the user cannot gain a root real uid. Root owns the job
// only when every task runs as root (rootOK), which is a job root submitted.
// Ties go to the lower uid, so the answer is stable.
func ownerByVote(votes map[int]int, rootOK bool) int {
	best := -1
	for u, n := range votes {
		if u == 0 {
			continue
		}
		if best < 0 || n > votes[best] || n == votes[best] && u < best {
			best = u
		}
	}
	if best < 0 && rootOK && votes[0] > 0 {
		best = 0
	}
	return best
}

func stepRank(step string) int {
	switch {
	case step == "batch":
		return 0
	case step == "interactive":
		return 2
	case step == "extern":
		return 4
	case step == "":
		return 3
	}
	return 1
}

func (f *envFacts) absorb(env map[string]string, jobID string) {
	id := env[slurm.EnvJobID]
	if id == "" {
		return
	}
	if jobID == "" {
		// SLUID directory: the id must come from the job itself.
		if _, err := strconv.ParseUint(id, 10, 32); err == nil {
			if f.ids == nil {
				f.ids = map[string]int{}
			}
			f.ids[id]++
		}
	} else if id != jobID {
		// A task that rewrote its own environment describes some other
		// job: ignore it rather than mislabel this one.
		return
	}
	if f.name == "" {
		f.name = env[slurm.EnvJobName]
	}
	if f.account == "" {
		f.account = env[slurm.EnvJobAccount]
	}
	if f.partition == "" {
		f.partition = env[slurm.EnvJobPartition]
	}
}

// resolvedID is the job id of a SLUID job: the one id all its tasks agree on.
func (j *jobEntry) resolvedID() string {
	if len(j.env.ids) != 1 {
		return ""
	}
	for id := range j.env.ids {
		return id
	}
	return ""
}

// publish builds and swaps in a new snapshot. Callers hold r.mu (or own j).
func (j *jobEntry) publish(u users.Lookup) {
	s := &Job{ID: j.loc.JobID, SLUID: j.loc.SLUID, UID: j.uidFromNode, Host: j.host,
		Name: clean(j.env.name, maxValue), Account: clean(j.env.account, maxValue), Partition: clean(j.env.partition, maxValue)}
	if s.ID == "" {
		if s.ID = j.resolvedID(); s.ID == "" {
			s.ID = "s" + j.loc.SLUID
		}
	}
	if ci := j.ctldInfo; ci != nil {
		if ci.Name != "" {
			s.Name = clean(ci.Name, maxValue)
		}
		if ci.Account != "" {
			s.Account = clean(ci.Account, maxValue)
		}
		if ci.Partition != "" {
			s.Partition = clean(ci.Partition, maxValue)
		}
		if s.UID < 0 && ci.UID >= 0 {
			s.UID = ci.UID
		}
	}
	if s.UID >= 0 {
		s.User = clean(users.NameOrID(u, s.UID), maxValue)
		if ci := j.ctldInfo; ci != nil && ci.UID == s.UID && ci.User != "" {
			s.User = clean(ci.User, maxValue)
		}
	}
	j.snap.Store(s)
}

const maxValue = 1024

// clean makes a value from a hostile source safe to carry (see
// schema.CleanValue).
func clean(s string, limit int) string { return schema.CleanValue(s, limit) }

// HostName is the name processes outside the multiple-slurmd layout are
// labelled with.
func (r *Resolver) HostName() string { return r.o.HostName }

// Refresh attributes processes the resolver has not seen and forgets those
// that are gone, without re-reading known ones: cheap enough to run every
// second, so that short-lived processes are labelled before they exit.
func (r *Resolver) Refresh() ([]Process, error) {
	pids, err := r.o.Proc.PIDs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	live := make(map[int]bool, len(pids))
	r.mu.RLock()
	var fresh []int
	for _, pid := range pids {
		live[pid] = true
		// A pid whose entry is marked exited is back: a new process.
		if e := r.procs[pid]; e == nil || !e.goneAt.IsZero() {
			fresh = append(fresh, pid)
		}
	}
	r.mu.RUnlock()
	var out []Process
	for _, pid := range fresh {
		if p, err := r.Resolve(pid); err == nil { // errors are counted; a process may exit meanwhile
			out = append(out, p)
		}
	}
	r.forgetExcept(live)
	// Jobs still missing metadata are retried here too, so profiles get
	// their names within seconds of the tasks' exec.
	now := r.o.Now()
	r.mu.RLock()
	var stale []*jobEntry
	for _, j := range r.jobs {
		stale = append(stale, j)
	}
	r.mu.RUnlock()
	for _, j := range stale {
		if r.jobStale(j, now) {
			r.refreshJob(j)
		}
	}
	return out, nil
}
