package attribution

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/slurm"
	"github.com/slurmscope/slurmscope/agent/users"
)

// Job metadata: an entry per job with a process on the node, gathered from
// its tasks' environments and slurmctld, refreshed every JobTTL (sooner
// while incomplete), and published as an immutable Job snapshot.

// jobEntry is what is known of one job.
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
	votes := newOwnerVotes()
	for pid, m := range j.members {
		votes.add(m)
		if m.loc.Stepd {
			continue // slurmstepd runs as root with slurmd's environment
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
	uid := votes.owner(j.loc.UID)
	j.uidFromNode = uid
	if ci := j.ctldInfo; ci != nil && ci.UID >= 0 && uid >= 0 && ci.UID != uid {
		r.conflicts.Add(1)
		r.remember(fmt.Errorf("job %s: slurmctld says uid %d, its tasks run as %d; keeping the node's", jobID, ci.UID, uid))
	}
	j.refreshed = now
	j.publish(r.o.Users)
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
