package attribution

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/cgroup/cgrouptest"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/schema"
)

// A task's launch, as slurmstepd runs it: it forks the task as root into
// its own cgroup (the step's slurm leaf), with slurmd's environment; moves
// it into the step (task_special) and its task cgroup; the task takes the
// user's uid and execs the job's program, keeping its pid and start time.
// A probe that samples the task in between is the first to attribute it.
type launchState struct {
	name, cgroup string
	uid          int
	env          string
}

const (
	launchPID   = 2345
	launchStart = 777
	launchScope = "/system.slice/node-a_slurmstepd.scope"
	launchJob   = launchScope + "/job_2"
	slurmdEnv   = "PATH=/usr/sbin:/usr/bin\x00SLURM_CONF=/etc/slurm/slurm.conf\x00"
)

var (
	inLeaf       = launchState{"the step's slurm leaf, root, slurmd's environment", launchJob + "/step_batch/slurm", 0, slurmdEnv}
	atJobLevel   = launchState{"the job's cgroup above any step, root, no environment", launchJob, 0, ""}
	inSpecial    = launchState{"task_special, root, slurmd's environment", launchJob + "/step_batch/user/task_special", 0, slurmdEnv}
	inTaskRoot   = launchState{"its task cgroup, still root", launchJob + "/step_batch/user/task_0", 0, slurmdEnv}
	inTaskPreExe = launchState{"its task cgroup as the user, before the exec", launchJob + "/step_batch/user/task_0", 1001, slurmdEnv}
	launched     = launchState{"launched", launchJob + "/step_batch/user/task_0", 1001,
		"SLURM_JOB_ID=2\x00SLURM_JOB_NAME=gosplit\x00SLURM_JOB_ACCOUNT=physics\x00SLURM_JOB_PARTITION=debug\x00"}
)

// launchRig is a fixture proc tree with one task of job 2 on node-a, whose
// state the test sets, and a resolver with a fake clock.
type launchRig struct {
	t    *testing.T
	root string
	now  time.Time
	r    *Resolver
}

func newLaunchRig(t *testing.T) *launchRig {
	g := &launchRig{t: t, root: t.TempDir(), now: time.Unix(5000, 0)}
	tree := &cgroup.Tree{Root: t.TempDir(), Owner: os.Getuid()}
	for _, s := range []launchState{inLeaf, atJobLevel, inSpecial, launched} {
		cgrouptest.Add(t, tree, true, "", s.cgroup)
	}
	g.r = New(Options{Proc: procfs.New(g.root), Users: fixtureUsers(t), NodeName: "node-a", HostName: "node-a",
		Cgroups: tree, Now: func() time.Time { return g.now }})
	return g
}

func (g *launchRig) set(s launchState) {
	g.t.Helper()
	writeProc(g.t, g.root, launchPID, "0::"+s.cgroup+"\n", launchStart, s.uid)
	must(g.t, os.WriteFile(filepath.Join(g.root, itoa(launchPID), "environ"), []byte(s.env), 0o644))
}

var launchID = procfs.ID{PID: launchPID, Start: launchStart}

// The callers that attribute a process: the stack capture's Admit (the
// cache, then Resolve), the daemon's rescan every second (Refresh), its
// full pass before each drain (Scan), and the host-metrics poll, which
// refreshes and then reads the jobs' cgroups.
var launchCallers = map[string]func(r *Resolver) error{
	"admit": func(r *Resolver) error {
		if _, ok := r.Cached(launchID); ok {
			return nil
		}
		_, err := r.Resolve(launchPID)
		return err
	},
	"resolve": func(r *Resolver) error { _, err := r.Resolve(launchPID); return err },
	"refresh": func(r *Resolver) error { _, err := r.Refresh(); return err },
	"scan":    func(r *Resolver) error { _, err := r.Scan(); return err },
	"host poll": func(r *Resolver) error {
		_, err := r.Refresh()
		r.JobCgroups()
		return err
	},
}

// checkLaunched holds the task, its job, the job's slurmscope_job_info
// (Jobs) and the job's host metrics (JobCgroups) to what the job is.
func (g *launchRig) checkLaunched(how string) {
	g.t.Helper()
	p, ok := g.r.Cached(launchID)
	if !ok || !p.InJob() {
		g.t.Fatalf("%s: task not in a job: %+v (cached %v, last error %v)", how, p, ok, g.r.LastError())
	}
	if p.Step != "batch" || p.Task != "0" || p.Stepd || p.UID != 1001 {
		g.t.Errorf("%s: task at step %q task %q (slurmstepd %v) uid %d, want batch, 0, a task, 1001", how, p.Step, p.Task, p.Stepd, p.UID)
	}
	j := p.Job
	if j.ID != "2" || j.Name != "gosplit" || j.User != "bob" || j.UID != 1001 || j.Value(schema.JobAccount) != "physics" || j.Value(schema.JobPartition) != "debug" {
		g.t.Errorf("%s: job %+v, want 2, gosplit, bob (1001), physics, debug", how, *j)
	}
	var info *Job
	for _, k := range g.r.Jobs() {
		if k.ID == "2" {
			info = k
		}
	}
	if info != j {
		g.t.Errorf("%s: Jobs (slurmscope_job_info) gives %+v, want the task's job %+v", how, info, *j)
	}
	var cgs []JobCgroup
	for _, c := range g.r.JobCgroups() {
		if c.Job != nil && c.Job.ID == "2" {
			cgs = append(cgs, c)
		}
	}
	if len(cgs) != 1 || cgs[0].Job != j || cgs[0].Version != 2 || cgs[0].Dir != launchJob {
		g.t.Errorf("%s: host metrics read %+v, want the job's own cgroup %s with its complete metadata", how, cgs, launchJob)
	}
}

// The task is first attributed from any point of its launch, by any
// caller; a second later (the daemon's rescan interval) it has launched,
// and the next caller, whichever it is, completes the task, its job's
// metadata and its job's host metrics. A cache that believed the first
// look for JobTTL would leave the job of a task caught in the slurm leaf
// nameless and ownerless for its whole life, and a task caught above its
// task cgroup in the wrong step.
func TestTaskFirstSeenMidLaunch(t *testing.T) {
	for _, first := range []launchState{inLeaf, atJobLevel, inSpecial, inTaskRoot, inTaskPreExe} {
		for _, firstBy := range []string{"admit", "refresh", "scan"} {
			for _, nextBy := range []string{"admit", "resolve", "refresh", "scan", "host poll"} {
				if nextBy == "admit" {
					continue // the cache answers: Admit re-reads nothing
				}
				t.Run(first.name+"/"+firstBy+"/then "+nextBy, func(t *testing.T) {
					g := newLaunchRig(t)
					g.set(first)
					must(t, launchCallers[firstBy](g.r))
					p, ok := g.r.Cached(launchID)
					if !ok || !p.InJob() || p.Job.ID != "2" {
						t.Fatalf("first look: %+v, %v", p, ok)
					}
					// What is not known yet is not published on series
					// that carry the job's name and owner.
					if c := g.r.JobCgroups(); len(c) != 0 {
						t.Errorf("first look: host metrics read %+v before the job's name and owner are known", c)
					}
					if js := g.r.Jobs(); len(js) != 0 {
						t.Errorf("first look: slurmscope_job_info has %+v before the job's name and owner are known", js)
					}
					g.set(launched)
					g.now = g.now.Add(time.Second)
					must(t, launchCallers[nextBy](g.r))
					g.checkLaunched("after " + nextBy)
				})
			}
		}
	}
}

// The launch's states come in order, each seen by the next caller in
// turn 300 ms apart (faster than the daemon's rescan): however far the
// task got when each looked, the pass right after the exec completes it.
func TestTaskLaunchSeenAtEveryStep(t *testing.T) {
	steps := []launchState{inLeaf, inSpecial, inTaskRoot, inTaskPreExe, launched}
	order := []string{"admit", "refresh", "scan", "host poll", "resolve"}
	for rot := range order {
		g := newLaunchRig(t)
		for i, s := range steps {
			g.set(s)
			must(t, launchCallers[order[(rot+i)%len(order)]](g.r))
			g.now = g.now.Add(300 * time.Millisecond)
		}
		must(t, launchCallers["refresh"](g.r))
		g.checkLaunched("callers from " + order[rot])
	}
}

// A task read in its task cgroup as root but with the job's environment
// (a member whose uid did not read, or a task between its environment and
// its setuid) makes a complete job owned by root; the next pass that sees
// it as the user must change the owner, not believe root for JobTTL.
func TestRootOwnerIsVotedAgainWhileSettling(t *testing.T) {
	for _, nextBy := range []string{"resolve", "refresh", "scan", "host poll"} {
		t.Run(nextBy, func(t *testing.T) {
			g := newLaunchRig(t)
			rootWithEnv := launched
			rootWithEnv.uid = 0
			g.set(rootWithEnv)
			must(t, launchCallers["refresh"](g.r))
			if p, ok := g.r.Cached(launchID); !ok || p.Job.UID != 0 || p.Job.Name != "gosplit" {
				t.Fatalf("first look: %+v, want job gosplit owned by root", p.Job)
			}
			g.set(launched)
			g.now = g.now.Add(300 * time.Millisecond)
			must(t, launchCallers[nextBy](g.r))
			g.checkLaunched("after " + nextBy)
		})
	}
}

// slurmstepd itself stays in its slurm leaf as root: it is read again
// while a task caught there could still be on its way, and then believed.
func TestSlurmstepdIsBelievedOnceSettled(t *testing.T) {
	g := newLaunchRig(t)
	g.set(inLeaf)
	for range 3 {
		must(t, launchCallers["refresh"](g.r))
		g.now = g.now.Add(time.Second)
	}
	if p, _ := g.r.Cached(launchID); !p.Stepd {
		t.Fatalf("slurmstepd: %+v", p)
	}
	g.now = g.now.Add(settleWindow)
	must(t, launchCallers["refresh"](g.r))
	cold := g.r.Stats().ColdLookups
	for range 20 {
		g.now = g.now.Add(time.Second)
		must(t, launchCallers["refresh"](g.r))
		must(t, launchCallers["scan"](g.r))
	}
	if got := g.r.Stats().ColdLookups - cold; got != 0 {
		t.Errorf("a settled slurmstepd was read %d more times in 20 s", got)
	}
	// A job whose name and owner never come (nothing but slurmstepd here)
	// still gets its host metrics and job info, once it has settled.
	if c := g.r.JobCgroups(); len(c) != 1 || c[0].Dir != launchJob {
		t.Errorf("host metrics of a settled job without a name: %+v", c)
	}
	if js := g.r.Jobs(); len(js) != 1 || js[0].ID != "2" {
		t.Errorf("job info of a settled job without a name: %+v", js)
	}
}
