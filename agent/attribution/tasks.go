package attribution

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/slurm"
)

// Reading the environments of a job's members: some of them for the job's
// metadata (refreshJob) and, with Options.Ranks, each of them for its own
// task's rank and node index (readTasks). One read serves both, and a
// member is read once for each program it runs. What a read gives is the
// job's word about itself: it never decides an identity.

// envCand is a member whose environment is due a read.
type envCand struct {
	pid   int
	start uint64
	comm  string // the program it ran when chosen
	order int    // its step's stepRank
}

func newEnvCand(pid int, m *procEntry) envCand {
	return envCand{pid: pid, start: m.start, comm: m.comm, order: stepRank(m.loc.Step)}
}

// envRead is what the read of one candidate found: env is nil when it
// failed with err (counted).
type envRead struct {
	envCand
	env map[string]string
	err error
}

// firstCands orders candidates, the batch script and the first steps
// first (they carry the job's own environment; the extern step's
// processes, adopted ssh sessions, may not), and keeps MaxEnvReads.
func (r *Resolver) firstCands(cands []envCand) []envCand {
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].order != cands[b].order {
			return cands[a].order < cands[b].order
		}
		return cands[a].start < cands[b].start
	})
	return cands[:min(len(cands), r.o.MaxEnvReads)]
}

// readEnvs reads the candidates' environments for r.envKeys.
func (r *Resolver) readEnvs(j *jobEntry, cands []envCand) []envRead {
	reads := make([]envRead, 0, len(cands))
	for _, c := range cands {
		// Reading a task's environment faults its pages in: a task can map
		// a file of its own FUSE mount over them, whose daemon never
		// answers. The guard bounds that to one deadline per job.
		// A stuck read may still set got and gotErr after Do returns:
		// they are read only when it finished in time.
		var got, env map[string]string
		var gotErr, err error
		if gerr := r.envGuard.Do(j.key, func(func()) { got, gotErr = r.o.Proc.Environ(c.pid, r.envKeys...) }); gerr != nil {
			err = fmt.Errorf("environment of pid %d: %w", c.pid, gerr)
		} else {
			env, err = got, gotErr
		}
		if err != nil {
			r.count(err)
		}
		reads = append(reads, envRead{c, env, err})
	}
	return reads
}

// absorbReads records what reads found: the job's metadata (absorbEnv),
// each member's task (with Ranks), and which members are not to be read
// again. It reports whether the job's metadata gained a value. Callers
// hold r.mu.
func (r *Resolver) absorbReads(j *jobEntry, reads []envRead, jobID string, now time.Time) bool {
	added := false
	for _, rd := range reads {
		// An environment without SLURM_JOB_ID is slurmstepd's, before
		// the task's exec: read it again next time.
		final := rd.env[slurm.EnvJobID] != ""
		m := j.members[rd.pid]
		if r.o.Ranks {
			// A member that has run another program since was read in
			// the wrong one; one past its launch is not read again,
			// whatever it gave (an emptied environment), nor one whose
			// job's file system stalled (procfs.Guard: one deadline per
			// job, not per process).
			same := m != nil && m.start == rd.start && m.comm == rd.comm
			final = same && (final || now.Sub(m.seen) >= settleWindow || errors.Is(rd.err, procfs.ErrStalled))
			if same && rd.env[slurm.EnvJobID] == jobID {
				m.rank, m.node = slurm.Task(rd.env)
			}
		}
		if final {
			j.tried[rd.pid] = rd.start
		}
		added = r.absorbEnv(j, rd.env, jobID) || added
	}
	return added
}

// read reports whether member m's environment has been read for good.
// Called with r.mu held.
func (j *jobEntry) read(pid int, m *procEntry) bool {
	t, ok := j.tried[pid]
	return ok && t == m.start
}

// readTasks reads, for their ranks, the environments of the members of
// each job that have none read in the program they run: at most
// MaxEnvReads a job and pass, so that a job forking thousands of
// processes is labelled over a few passes instead of holding one up.
func (r *Resolver) readTasks() {
	if !r.o.Ranks {
		return
	}
	r.mu.RLock()
	var due []*jobEntry
	for _, j := range r.jobs {
		if j.unread {
			due = append(due, j)
		}
	}
	r.mu.RUnlock()
	for _, j := range due {
		r.readJobTasks(j)
	}
}

// readJobTasks is readTasks for one job.
func (r *Resolver) readJobTasks(j *jobEntry) {
	now := r.o.Now()
	r.mu.RLock()
	jobID := j.jobID()
	var cands []envCand
	for pid, m := range j.members {
		// A member still on its way to its place (settling) runs with
		// slurmd's environment; the cache reads it again once there.
		if !m.loc.Stepd && !j.read(pid, m) && !m.settling(now) {
			cands = append(cands, newEnvCand(pid, m))
		}
	}
	r.mu.RUnlock()
	if jobID == "" {
		// A SLUID job whose slurmstepd is not read yet: its members'
		// environments cannot be checked against its id.
		return
	}
	reads := r.readEnvs(j, r.firstCands(cands))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.absorbReads(j, reads, jobID, now) {
		r.publish(j)
	}
	j.unread = false
	for pid, m := range j.members {
		if !m.loc.Stepd && !j.read(pid, m) {
			j.unread = true
			break
		}
	}
}

// execed reports whether e, a member of a job, now runs another program
// than when it was read: the same pid and start time under another name
// is an exec, after which its environment, and so its rank, are the new
// program's (a launcher's child read between its fork and its exec has
// the launcher's). Only with Ranks, and only for a job's processes: no
// process in no job is read again for it.
func (r *Resolver) execed(e *procEntry, st procfs.Stat) bool {
	return r.o.Ranks && e.job != nil && e.comm != clean(st.Comm, 64)
}

// keepTask hands ne what old, the same process read before, knew of its
// task while it runs the same program; after an exec its environment is
// due a read again. Called with r.mu held.
func (r *Resolver) keepTask(pid int, old, ne *procEntry) {
	switch {
	case old.comm == ne.comm:
		ne.rank, ne.node = old.rank, old.node
	case r.o.Ranks && old.job != nil:
		delete(old.job.tried, pid)
	}
}
