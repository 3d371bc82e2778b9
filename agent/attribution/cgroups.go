package attribution

import (
	"sort"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// JobCgroup is the cgroup directory Slurm made for a job of this node.
type JobCgroup struct {
	Job     *Job
	Version int // 1 or 2
	// Dir is the job's own directory (job_<id>, or its SLUID), relative
	// to its hierarchy's mount, as its members' /proc/<pid>/cgroup gave it.
	Dir string
}

// JobCgroups returns the cgroup directory of every job of this node that
// has a live member and whose metadata has settled (its host metrics carry
// its name and owner, and on v1 read its user's step directories), from
// the paths its members were attributed by: the job's own directory
// whichever level a member sits at. It reads nothing, and holds the lock
// only to copy.
func (r *Resolver) JobCgroups() []JobCgroup {
	now := r.o.Now()
	r.mu.RLock()
	var out []JobCgroup
	for _, j := range r.jobs {
		if !j.settled(now) {
			continue
		}
		best, dir, version := -1, "", 0
		for pid, m := range j.members {
			if m.foreign || (best >= 0 && pid > best) {
				continue
			}
			if d := m.loc.JobDir(); d != "" {
				best, dir, version = pid, d, m.loc.Version
			}
		}
		if dir != "" {
			out = append(out, JobCgroup{Job: j.snap.Load(), Version: version, Dir: dir})
		}
	}
	r.mu.RUnlock()
	sort.Slice(out, func(a, b int) bool { return out[a].Dir < out[b].Dir })
	return out
}

// TaskCgroupOf returns the cgroup directory a cached process of this node
// sits in (its own, as its /proc/<pid>/cgroup named it:
// .../job_<id>/step_<s>/user/task_<n> on v2) and its job's directory;
// false for a process in no job. task is "" for slurmstepd's own cgroup,
// whose waits are not the job's, and where a task starts before it is
// moved to its own.
func (r *Resolver) TaskCgroupOf(id procfs.ID) (task string, job JobCgroup, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e := r.procs[id.PID]
	if e == nil || e.start != id.Start || e.job == nil || e.foreign {
		return "", JobCgroup{}, false
	}
	d := e.loc.JobDir()
	if d == "" || e.loc.Path == "" {
		return "", JobCgroup{}, false
	}
	job = JobCgroup{Job: e.job.snap.Load(), Version: e.loc.Version, Dir: d}
	if e.loc.Stepd {
		return "", job, true
	}
	return e.loc.Path, job, true
}
