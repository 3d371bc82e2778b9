package attribution

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// The process cache: an entry per process, keyed by pid and valid for one
// start time, positive (in a job) or negative (in none), kept for
// ExitGrace after the process exits so that its drained samples still find
// their job.

// procEntry is the cached attribution of one process.
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
	// seen is when the process (with this start time) was first read.
	seen time.Time
	// recheck marks a process's first "in no job": it may be between its
	// fork and joining a job's cgroup (slurmstepd's task before proctrack
	// adds it, a shell that joins, then execs the job's program), so it is
	// read again at the next refresh instead of believed for NegativeTTL.
	recheck bool
	// rank and node are what its environment says of its task
	// (Process.Rank, NodeIndex), kept while it runs the program (comm)
	// it was read in.
	rank, node string
}

// recheckAfter is how old a first "in no job", or a member of a job that
// may still be on its way to its place (settling), must be before it is
// read again: long past any fork-to-join window, short of an interval.
const recheckAfter = 200 * time.Millisecond

// settleWindow is how long after a process is first seen in a job a
// launch may still be moving it: slurmstepd forks each task as root into
// its own cgroup (the step's slurm leaf) with slurmd's environment, moves
// it to its task cgroup, and only then does the task take the user's uid
// and exec the job's program, keeping its pid and start time. A look in
// between must not be believed for JobTTL.
const settleWindow = 10 * time.Second

// settling reports whether e, a member of a job first seen less than
// settleWindow ago, is where a task's launch passes through rather than
// where a task runs: root's (or of an unknown uid), in the slurm leaf (only
// slurmstepd and its fork before the move are there), or above any step.
// Such a member is read again at every pass, recheckAfter apart, so the
// pass after the exec finds the task's place, owner and environment.
// slurmstepd itself, root's in the leaf for good, is believed once its
// window is over.
func (e *procEntry) settling(now time.Time) bool {
	return e.job != nil && e.goneAt.IsZero() && now.Sub(e.seen) < settleWindow &&
		(e.uid <= 0 || e.loc.Stepd || e.loc.Step == "")
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
		Step: e.loc.Step, Task: e.loc.Task, Stepd: e.loc.Stepd, Foreign: e.foreign, Rank: e.rank, NodeIndex: e.node}
	if e.job != nil {
		p.Job = e.job.snap.Load()
	}
	return p
}

// Resolve attributes a live process, reading /proc only for what the cache
// does not already hold.
func (r *Resolver) Resolve(pid int) (Process, error) { return r.resolvePID(pid, false) }

// resolvePID is Resolve; full (Scan's pass before each drain) also re-reads
// members still settling that were read less than recheckAfter ago, so
// the drain's profiles see a task that exec'd a moment before.
func (r *Resolver) resolvePID(pid int, full bool) (Process, error) {
	st, err := r.o.Proc.Stat(pid)
	if err != nil {
		r.count(err)
		return Process{}, err
	}
	return r.resolve(pid, st, full)
}

func (r *Resolver) resolve(pid int, st procfs.Stat, full bool) (Process, error) {
	now := r.o.Now()
	r.mu.RLock()
	e := r.procs[pid]
	fresh := e != nil && e.start == st.StartTime && now.Sub(e.checked) < r.ttl(e, now) && !(full && e.settling(now)) && !r.execed(e, st)
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
	loc, perr := r.o.Layout.Parse(raw)
	if perr == nil && loc.InJob {
		// The directories must be the ones slurmd made, not a copy.
		if perr = r.o.Cgroups.Verify(loc); perr != nil {
			loc = cgroup.Location{}
		}
	}
	var ref *cgroup.Refused
	switch {
	case errors.As(perr, &ref):
		// A look-alike of Slurm's tree: in no job, cached negatively.
		r.countRefused(pid, ref)
	case perr != nil:
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
	ne := &procEntry{start: st.StartTime, checked: now, seen: now, comm: clean(st.Comm, 64), uid: uid, loc: loc, host: r.o.HostName}
	if loc.Node != "" {
		ne.host = loc.Node
		ne.foreign = r.o.NodeName != "" && loc.Node != r.o.NodeName
	}

	r.mu.Lock()
	old := r.procs[pid]
	isNew := old == nil || old.start != ne.start
	ne.recheck = !loc.InJob && isNew
	if old != nil && old.start == ne.start {
		ne.seen = old.seen
		r.keepTask(pid, old, ne)
	}
	if old != nil && old.job != nil {
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
			j = &jobEntry{key: loc.JobKey(), host: ne.host, seen: now, members: map[int]*procEntry{}, tried: map[int]uint64{}, uidFromNode: loc.UID}
			j.loc = cgroup.Location{InJob: true, JobID: loc.JobID, SLUID: loc.SLUID, Node: loc.Node, UID: loc.UID, Version: loc.Version}
			if loc.Version == 2 {
				j.cgroup = jobDir(loc)
			}
			r.jobs[j.key] = j
			r.publish(j)
			r.jobs[j.key] = j
		}
		if j.loc.UID < 0 && loc.UID >= 0 {
			j.loc.UID = loc.UID
		}
		j.members[pid] = ne
		j.dirty = true
		ne.job = j
		if r.o.Ranks && !ne.loc.Stepd && !j.read(pid, ne) {
			j.unread = true
		}
	}
	// New, or placed anew (adopted into a job, or out of one).
	changed := isNew || old.job != ne.job
	r.mu.Unlock()
	if changed {
		r.logNew(pid, ne.comm, loc, perr, ne.foreign, j)
	}

	if j != nil && r.jobStale(j, now) {
		r.refreshJob(j)
	}
	r.mu.RLock()
	p := ne.process(pid)
	r.mu.RUnlock()
	return p, nil
}

// jobDir is the job's own directory in a v2 location's path: the Slurm
// part down to job_<id> or s<SLUID>.
func jobDir(loc cgroup.Location) string {
	dir := "job_" + loc.JobID
	if loc.JobID == "" {
		dir = "s" + loc.SLUID
	}
	i := strings.Index(loc.Slurm+"/", "/"+dir+"/")
	if i < 0 {
		return ""
	}
	return loc.Slurm[:i+1+len(dir)]
}

func (r *Resolver) ttl(e *procEntry, now time.Time) time.Duration {
	if e.job == nil {
		// pam_slurm_adopt can move an existing process into a job, so "in
		// no job" is only believed for a while.
		if e.recheck {
			return min(recheckAfter, r.o.NegativeTTL)
		}
		return r.o.NegativeTTL
	}
	if e.settling(now) {
		return min(recheckAfter, r.o.JobTTL)
	}
	return r.o.JobTTL
}

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
		p, err := r.resolvePID(pid, true)
		if err != nil {
			continue // counted; a process that exits mid-read is normal
		}
		live[pid] = true
		out = append(out, p)
	}
	r.forgetExcept(live)
	r.readTasks()
	// Metadata may have completed after early members were resolved (the
	// slurmstepd before its tasks), and ranks been read: hand out the
	// final snapshots.
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

// Jobs returns the current snapshot of every job with a live process
// whose metadata has settled (jobEntry.settled), for the series that
// carry it.
func (r *Resolver) Jobs() []*Job {
	now := r.o.Now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Job, 0, len(r.jobs))
	for _, j := range r.jobs {
		if j.settled(now) {
			out = append(out, j.snap.Load())
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Host+"/"+out[a].ID < out[b].Host+"/"+out[b].ID })
	return out
}

// Refresh attributes processes the resolver has not seen and forgets those
// that are gone, without re-reading known ones (but a first "in no job",
// once: procEntry.recheck, and members still settling): cheap enough to
// run every second, so that short-lived processes are labelled before
// they exit.
func (r *Resolver) Refresh() ([]Process, error) {
	pids, err := r.o.Proc.PIDs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	live := make(map[int]bool, len(pids))
	now := r.o.Now()
	r.mu.RLock()
	var fresh []int
	for _, pid := range pids {
		live[pid] = true
		// A pid whose entry is marked exited is back: a new process.
		if e := r.procs[pid]; e == nil || !e.goneAt.IsZero() || (e.recheck || e.settling(now)) && now.Sub(e.checked) >= r.ttl(e, now) {
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
	now = r.o.Now()
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
	r.readTasks()
	return out, nil
}
