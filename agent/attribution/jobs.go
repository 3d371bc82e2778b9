package attribution

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/slurm"
	"github.com/slurmscope/slurmscope/agent/users"
	"github.com/slurmscope/slurmscope/schema"
)

// Job metadata: an entry per job with a process on the node, gathered from
// its tasks' environments and slurmctld, refreshed every JobTTL (sooner
// while incomplete), and published as an immutable Job snapshot.

// jobEntry is what is known of one job.
type jobEntry struct {
	key     string
	loc     cgroup.Location // job-level fields only: JobID, SLUID, Node, UID
	host    string
	seen    time.Time // when its first member was read
	snap    atomic.Pointer[Job]
	members map[int]*procEntry
	tried   map[int]uint64    // pid -> start time whose environment was read
	env     map[string]string // metadata attribute name -> the tasks' value
	// refreshed is when metadata was last gathered; dirty is set when a
	// member joined since, which may carry what is still missing.
	refreshed time.Time
	dirty     bool
	ctldInfo  *slurm.JobInfo
	ctldAt    time.Time
	// ctldAsking is set while a lookup of the job in slurmctld runs;
	// ctldFailed once one has ended without an answer.
	ctldAsking, ctldFailed bool
	// uidFromNode is the owner as the node sees it (path or task uid).
	uidFromNode int
	// exited counts processes that left the job but are still cached.
	exited int
	// cgroup is the job's v2 directory (Job.Cgroup).
	cgroup string
	// stepdID is the job id slurmstepd's title gives a SLUID directory;
	// stepdTried holds the slurmstepds read (pid -> start time).
	stepdID    string
	stepdTried map[int]uint64
	// idConflict is set while the id slurmstepd gives is another job's.
	idConflict bool
	// unread is set while a member's environment may still be due a read
	// for its rank (Options.Ranks; readTasks).
	unread bool
}

func (r *Resolver) jobStale(j *jobEntry, now time.Time) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return j.refreshed.IsZero() || now.Sub(j.refreshed) >= r.o.JobTTL ||
		(!j.complete() || j.rootForNow(now)) && (j.dirty || now.Sub(j.refreshed) >= incompleteRetry)
}

// rootForNow reports whether the job's owner is root by a vote taken in
// its settle window: a task read between its move and its setuid, or a
// member whose uid could not be read, may have decided it; the vote is
// taken again until the window ends (a job root submitted stays root).
// Under load a v2 job was labelled root for its first intervals. Called
// with Resolver.mu held.
func (j *jobEntry) rootForNow(now time.Time) bool {
	return j.snap.Load().UID == 0 && j.loc.UID < 0 && now.Sub(j.seen) < settleWindow
}

// complete reports whether the job's name, owner and id are known. Called
// with Resolver.mu held.
func (j *jobEntry) complete() bool {
	snap := j.snap.Load()
	return snap.Name != "" && snap.UID >= 0 && j.idKnown() && !j.idConflict
}

// settled reports whether the job's metadata is as complete as it will
// get, so that series which carry it (host metrics, slurmscope_job_info)
// may be published: complete, or incomplete for longer than a launch takes.
// A series published before its job's name and owner are known would be
// another series than the job's from then on. Called with Resolver.mu held.
func (j *jobEntry) settled(now time.Time) bool {
	return j.complete() && !j.rootForNow(now) || now.Sub(j.seen) >= settleWindow
}

// incompleteRetry is how soon a job still missing its name or owner is
// looked at again: its tasks may have been caught before their exec.
const incompleteRetry = 2 * time.Second

func (j *jobEntry) idKnown() bool { return j.loc.JobID != "" || j.stepdID != "" }

// jobID is the job's id as far as it is known: its path's, or for a SLUID
// directory slurmstepd's; "" while unknown.
func (j *jobEntry) jobID() string {
	if j.loc.JobID != "" {
		return j.loc.JobID
	}
	return j.stepdID
}

func (j *jobEntry) drop(pid int) { delete(j.members, pid) }

// refreshJob gathers the job's metadata from its members and slurmctld.
func (r *Resolver) refreshJob(j *jobEntry) {
	now := r.o.Now()
	// Members caught mid-launch are read again by the cache (settling);
	// what is read here is what they are now.
	r.mu.RLock()
	var stepds []stepdRead
	if j.loc.JobID == "" {
		for pid, m := range j.members {
			if t, ok := j.stepdTried[pid]; m.loc.Stepd && (!ok || t != m.start) {
				stepds = append(stepds, stepdRead{pid: pid, start: m.start, step: m.loc.Step})
			}
		}
	}
	r.mu.RUnlock()
	for i := range stepds {
		stepds[i].id = r.stepdJobID(stepds[i])
	}

	r.mu.Lock()
	r.absorbStepds(j, stepds)
	var cands []envCand
	votes := newOwnerVotes()
	for pid, m := range j.members {
		votes.add(m)
		if m.loc.Stepd {
			continue // slurmstepd runs as root with slurmd's environment
		}
		if t, ok := j.tried[pid]; ok && t == m.start {
			continue
		}
		cands = append(cands, newEnvCand(pid, m))
	}
	j.dirty = false
	jobID := j.jobID()
	if jobID == "" {
		// A SLUID job whose slurmstepd is not read yet: its tasks'
		// environments cannot be checked against its id, so wait.
		cands = nil
	}
	askCtld := r.o.Controller != nil && jobID != "" && !j.ctldAsking && (j.ctldInfo == nil || now.Sub(j.ctldAt) >= r.o.JobTTL)
	j.ctldAsking = askCtld
	r.mu.Unlock()

	reads := r.readEnvs(j, r.firstCands(cands))

	var info *slurm.JobInfo
	late := false
	if askCtld {
		// The lookup runs two Slurm commands, which take seconds on a
		// loaded node or with a slow slurmctld; the callers (the host
		// poll, a new process's announce) wait for it only briefly, and
		// a late answer is published when it comes.
		answer := make(chan *slurm.JobInfo, 1)
		go func() { answer <- r.askController(jobID) }()
		select {
		case info = <-answer:
		case <-time.After(r.o.ControllerWait):
			late = true
			go func() {
				info := <-answer
				r.mu.Lock()
				defer r.mu.Unlock()
				j.ctldAsking = false
				if info != nil {
					j.ctldInfo, j.ctldAt = info, r.o.Now()
					r.checkOwner(j, j.uidFromNode)
				} else {
					j.ctldFailed = true
				}
				r.publish(j)
			}()
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.absorbReads(j, reads, jobID, now)
	if askCtld && !late {
		j.ctldAsking = false
		j.ctldFailed = j.ctldFailed || info == nil
	}
	if info != nil {
		j.ctldInfo, j.ctldAt = info, now
	}
	uid := votes.owner(j.loc.UID)
	j.uidFromNode = uid
	r.checkOwner(j, uid)
	j.refreshed = now
	r.publish(j)
	// A task whose environment has not named the job yet may be a moment
	// before its exec: look again at the next pass (the daemon's, right
	// before each drain) rather than in incompleteRetry, or the
	// interval's profile goes out without the job's name. Members still
	// settling are read again by the cache, which marks the job dirty.
	if !j.complete() {
		for pid, m := range j.members {
			if t, ok := j.tried[pid]; !m.loc.Stepd && m.goneAt.IsZero() && now.Sub(m.seen) < settleWindow && (!ok || t != m.start) {
				j.dirty = true
				break
			}
		}
	}
}

// askController looks job id up in slurmctld; nil when it does not answer
// (counted) or does not know the job.
func (r *Resolver) askController(id string) *slurm.JobInfo {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := r.o.Controller.Job(ctx, id)
	switch {
	case errors.Is(err, slurm.ErrNoSuchJob):
		// Ended a moment ago, or a cgroup slurmctld never made: not a
		// failure of slurmctld. The tasks' environment stands.
		r.ctldUnknown.Add(1)
		return nil
	case err != nil:
		r.ctldErrs.Add(1)
		r.remember(fmt.Errorf("job %s: %w", id, err))
		return nil
	}
	return &got
}

// checkOwner counts a disagreement between slurmctld and the node (uid)
// about the job's owner; the node's stands. Called with r.mu held.
func (r *Resolver) checkOwner(j *jobEntry, uid int) {
	if ci := j.ctldInfo; ci != nil && ci.UID >= 0 && uid >= 0 && ci.UID != uid {
		r.conflicts.Add(1)
		r.remember(fmt.Errorf("job %s: slurmctld says uid %d, its tasks run as %d; keeping the node's", j.jobID(), ci.UID, uid))
	}
}

// stepdRead is one slurmstepd of a SLUID job, and the job id its title
// gives ("" when it gives none this process can be trusted with).
type stepdRead struct {
	pid   int
	start uint64
	step  string
	id    string
}

// stepdJobID reads the job id from the title of a process in the step's
// slurm leaf. Only root can put a process there, and slurmstepd runs as
// root, so the title is believed only of a root process, read between two
// reads of its identity, and only when it names the step whose leaf holds
// it.
func (r *Resolver) stepdJobID(s stepdRead) string {
	uid, err := r.o.Proc.UID(s.pid)
	if err != nil || uid != 0 {
		return ""
	}
	cmd, err := r.o.Proc.Cmdline(s.pid)
	if err != nil {
		r.count(err)
		return ""
	}
	st, err := r.o.Proc.Stat(s.pid)
	if err != nil || st.StartTime != s.start {
		return ""
	}
	if uid, err := r.o.Proc.UID(s.pid); err != nil || uid != 0 {
		return ""
	}
	id, step, ok := slurm.ParseStepdTitle(cmd)
	if !ok || step != s.step {
		return ""
	}
	return id
}

// absorbStepds records what a SLUID job's slurmstepds say its id is. They
// must agree: a disagreement leaves the job without an id (and counted).
// Callers hold r.mu.
func (r *Resolver) absorbStepds(j *jobEntry, reads []stepdRead) {
	for _, s := range reads {
		if j.stepdTried == nil {
			j.stepdTried = map[int]uint64{}
		}
		j.stepdTried[s.pid] = s.start
		switch {
		case s.id == "":
		case j.stepdID == "":
			j.stepdID = s.id
		case j.stepdID != s.id:
			r.idConflicts.Add(1)
			r.remember(fmt.Errorf("SLUID job %s: its slurmstepds name jobs %s and %s; it keeps its SLUID", j.loc.SLUID, j.stepdID, s.id))
			j.stepdID, j.idConflict = "", true
		}
	}
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

// absorbEnv records what a task's environment says of the job's
// metadata, the first value of each attribute, and reports whether it
// gave one the job lacked. Callers hold r.mu.
func (r *Resolver) absorbEnv(j *jobEntry, env map[string]string, jobID string) bool {
	if id := env[slurm.EnvJobID]; id == "" || id != jobID {
		// A task that rewrote its own environment describes some other
		// job: ignore it rather than mislabel this one.
		return false
	}
	added := false
	for _, a := range r.o.Metadata {
		v := env[a.From.Env]
		if a.From.Decide&schema.FromEnv == 0 || v == "" || j.env[a.Name] != "" {
			continue
		}
		if j.env == nil {
			j.env = map[string]string{}
		}
		j.env[a.Name] = v
		added = true
	}
	return added
}

// publish builds and swaps in a new snapshot. No two jobs of a host
// publish one id: a SLUID job whose slurmstepd names an id another job of
// the host holds keeps s<SLUID>, and a job whose path names the id takes
// it back from a SLUID job. Callers hold r.mu.
func (r *Resolver) publish(j *jobEntry) {
	s := &Job{ID: j.jobID(), SLUID: j.loc.SLUID, UID: j.uidFromNode, Host: j.host, Cgroup: j.cgroup,
		GRESPending: j.ctldInfo == nil && j.ctldAsking && !j.ctldFailed}
	// Metadata: slurmctld's word, else the tasks' environment, each only
	// where the schema lets it decide (absorbEnv checks the environment).
	for _, a := range r.o.Metadata {
		v := j.env[a.Name]
		if ci := j.ctldInfo; ci != nil && a.From.Decide&schema.FromSlurmctld != 0 && ci.Value(a) != "" {
			v = ci.Value(a)
		}
		if v = clean(v, maxValue); v == "" {
			continue
		}
		if a.Name == schema.JobName.Name {
			s.Name = v
			continue
		}
		if s.Meta == nil {
			s.Meta = map[string]string{}
		}
		s.Meta[a.Name] = v
	}
	var demote []*jobEntry
	if s.ID != "" {
		for _, o := range r.jobs {
			if o == j || o.host != j.host || o.snap.Load() == nil || o.snap.Load().ID != s.ID {
				continue
			}
			if j.loc.JobID == "" {
				if !j.idConflict {
					r.idConflicts.Add(1)
					r.remember(fmt.Errorf("SLUID job %s: its slurmstepd names job %s, which another job of %s holds; it keeps its SLUID", j.loc.SLUID, s.ID, j.host))
				}
				j.idConflict, s.ID = true, ""
				break
			}
			demote = append(demote, o)
		}
		if s.ID != "" && j.loc.JobID == "" {
			j.idConflict = false
		}
	}
	if s.ID == "" {
		s.ID = "s" + j.loc.SLUID
	}
	if ci := j.ctldInfo; ci != nil {
		if s.UID < 0 && ci.UID >= 0 {
			s.UID = ci.UID
		}
		// slurmctld names the node by its NodeName: the path's under
		// multiple slurmd, else this agent's (--node-name, or the short
		// hostname, which is the NodeName on almost every cluster).
		s.GRES = ci.GRES[j.host]
	}
	if s.UID >= 0 {
		s.User = clean(users.NameOrID(r.o.Users, s.UID), maxValue)
		if ci := j.ctldInfo; ci != nil && ci.UID == s.UID && ci.User != "" {
			s.User = clean(ci.User, maxValue)
		}
	}
	j.snap.Store(s)
	for _, o := range demote {
		r.publish(o)
	}
}
