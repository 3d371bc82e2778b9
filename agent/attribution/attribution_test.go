package attribution

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/cgroup/cgrouptest"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/procfs/procfstest"
	"github.com/slurmscope/slurmscope/agent/slurm"
	"github.com/slurmscope/slurmscope/agent/users"
	"github.com/slurmscope/slurmscope/schema"
)

func fixtureUsers(t testing.TB) users.Passwd {
	p, _, err := users.LoadPasswd("testdata/passwd")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newFixtureResolver(t testing.TB, root string, mod func(*Options)) *Resolver {
	o := Options{Proc: procfs.New(root), Users: fixtureUsers(t), HostName: "node-a", Cgroups: cgrouptest.Mirror(t, root)}
	if mod != nil {
		mod(&o)
	}
	return New(o)
}

func copyTree(t testing.TB, src string) string { return procfstest.CopyTree(t, src) }

type want struct {
	job, name, user, step, task, account, partition, host string
	stepd                                                 bool
}

func TestScanFixtureTree(t *testing.T) {
	r := newFixtureResolver(t, "testdata/proc", nil)
	procs, err := r.Scan()
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]Process{}
	for _, p := range procs {
		got[p.PID] = p
	}
	bobJob := want{job: "4242", name: `train "llama" ✓`, user: "bob", account: "physics", partition: "gpu", host: "node-a"}
	with := func(w want, f func(*want)) want { f(&w); return w }
	cases := map[int]want{
		// v2: slurmstepd, batch, steps, task_special, interactive
		300: with(bobJob, func(w *want) { w.step, w.stepd = "batch", true }),
		301: with(bobJob, func(w *want) { w.step, w.task = "batch", "0" }),
		302: with(bobJob, func(w *want) { w.step, w.task = "0", "0" }),
		303: with(bobJob, func(w *want) { w.step, w.task = "0", "1" }), // environ unreadable
		304: with(bobJob, func(w *want) { w.step, w.task = "extern", "special" }),
		305: with(bobJob, func(w *want) { w.step, w.task = "interactive", "0" }),
		310: with(bobJob, func(w *want) { w.step, w.stepd = "0", true }),
		// multiple slurmd
		400: {job: "4300", name: "multi", user: "alice", account: "bio", partition: "cpu", host: "node-b", step: "0", task: "0"},
		401: {job: "4300", name: "multi", user: "alice", account: "bio", partition: "cpu", host: "node-b", step: "0", stepd: true},
		402: {job: "4300", name: "multi", user: "alice", account: "bio", partition: "cpu", host: "node-a", step: "0", task: "0"},
		// v1: the owner comes from the path even for a root-owned helper
		500: {job: "5000", name: "v1job", user: "alice", host: "node-a", step: "batch", task: "0"},
		501: {job: "5000", name: "v1job", user: "alice", host: "node-a", step: "0", task: "0"},
		502: {job: "5001", user: "alice", host: "node-c", step: "0", task: "3"},
		503: {job: "5000", name: "v1job", user: "alice", host: "node-a", step: "batch"},
		// SLUID: the id comes from the job's tasks
		600: {job: "6000", name: "sluid-job", user: "bob", host: "node-a", step: "0", task: "0"},
		601: {job: "6000", name: "sluid-job", user: "bob", host: "node-a", step: "0", stepd: true},
		700: {job: "7000", name: "evil\nname\uFFFD\"} or {a=\"b", user: "bob", host: "node-a", step: "batch", task: "0"},
		705: {job: "7001", name: "ok", user: "bob", host: "node-a", step: "batch", task: "0"},
		800: {job: "8001", name: "arr", user: "alice", host: "node-a", step: "batch", task: "0"},
		// rewrote SLURM_JOB_ID to 4242: its name is not believed
		900: {job: "9000", user: "bob", host: "node-a", step: "0", task: "0"},
	}
	for pid, w := range cases {
		p, ok := got[pid]
		if !ok {
			t.Errorf("pid %d missing from scan", pid)
			continue
		}
		if !p.InJob() {
			t.Errorf("pid %d not in a job", pid)
			continue
		}
		g := want{job: p.Job.ID, name: p.Job.Name, user: p.Job.User, step: p.Step, task: p.Task,
			account: p.Job.Value(schema.JobAccount), partition: p.Job.Value(schema.JobPartition), host: p.Host, stepd: p.Stepd}
		if g != w {
			t.Errorf("pid %d:\n got %+v\nwant %+v", pid, g, w)
		}
	}
	for _, pid := range []int{1, 2, 200, 701, 702, 703} {
		if p, ok := got[pid]; !ok || p.InJob() {
			t.Errorf("pid %d: want present and in no job, got %+v (present %v)", pid, p, ok)
		}
	}
	if _, ok := got[704]; ok {
		t.Error("pid 704 has no stat (it exited) but was reported")
	}
	if p := got[705]; p.Comm != "a) (b\nc" {
		t.Errorf("comm with parentheses parsed as %q", p.Comm)
	}
	st := r.Stats()
	if st.MalformedCgroup != 3 || st.Gone == 0 {
		t.Errorf("stats = %+v, want 3 malformed and some gone", st)
	}
	if j := got[600].Job; j.SLUID != "0W5FQ2XKD8Y3M" {
		t.Errorf("SLUID = %q", j.SLUID)
	}
}

func TestNodeNameAttributesOnlyItsOwnNode(t *testing.T) {
	r := newFixtureResolver(t, "testdata/proc", func(o *Options) { o.NodeName = "node-a" })
	procs, err := r.Scan()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		switch p.PID {
		case 400, 401, 502:
			if p.InJob() || !p.Foreign {
				t.Errorf("pid %d belongs to another node but is attributed: %+v", p.PID, p)
			}
		case 402, 301:
			if !p.InJob() || p.Host != "node-a" {
				t.Errorf("pid %d should be node-a's: %+v", p.PID, p)
			}
		}
	}
}

func TestCachedIsKeyedByStartTime(t *testing.T) {
	root := copyTree(t, "testdata/proc")
	r := newFixtureResolver(t, root, nil)
	p, err := r.Resolve(301)
	if err != nil || !p.InJob() {
		t.Fatalf("Resolve: %+v %v", p, err)
	}
	if c, ok := r.Cached(procfs.ID{PID: 301, Start: p.Start}); !ok || c.Job.ID != "4242" {
		t.Fatalf("Cached hit = %+v %v", c, ok)
	}
	if _, ok := r.Cached(procfs.ID{PID: 301, Start: p.Start + 1}); ok {
		t.Fatal("a different start time (a reused pid) hit the cache")
	}
	// The pid is reused by a process in no job.
	writeProc(t, root, 301, "0::/user.slice\n", 99999, 1001)
	q, err := r.Resolve(301)
	if err != nil {
		t.Fatal(err)
	}
	if q.InJob() || q.Start != 99999 {
		t.Fatalf("reused pid kept the old job: %+v", q)
	}
}

func writeProc(t testing.TB, root string, pid int, cgroup string, start uint64, uid int) {
	d := filepath.Join(root, itoa(pid))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := itoa(pid) + " (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " + itoa(int(start)) + " 0 0\n"
	must(t, os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644))
	must(t, os.WriteFile(filepath.Join(d, "cgroup"), []byte(cgroup), 0o644))
	must(t, os.WriteFile(filepath.Join(d, "status"), []byte("Uid:\t"+itoa(uid)+"\t0\t0\t0\n"), 0o644))
}

func itoa(i int) string { return strconv.Itoa(i) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pam_slurm_adopt moves an existing process into a job: the negative cache
// must expire.
func TestNegativeCacheExpires(t *testing.T) {
	root := copyTree(t, "testdata/proc")
	now := time.Unix(1000, 0)
	r := newFixtureResolver(t, root, func(o *Options) {
		o.NegativeTTL = 30 * time.Second
		o.Now = func() time.Time { return now }
	})
	if p, _ := r.Resolve(200); p.InJob() {
		t.Fatal("login shell in a job")
	}
	must(t, os.WriteFile(filepath.Join(root, "200", "cgroup"), []byte("0::/system.slice/slurmstepd.scope/job_4242/step_extern/user/task_special\n"), 0o644))
	if p, _ := r.Resolve(200); p.InJob() {
		t.Fatal("negative cache not used within its TTL")
	}
	now = now.Add(31 * time.Second)
	if p, _ := r.Resolve(200); !p.InJob() || p.Job.ID != "4242" || p.Step != "extern" {
		t.Fatalf("adopted process not picked up after the TTL: %+v", p)
	}
}

func TestMegabyteEnvironment(t *testing.T) {
	root := copyTree(t, "testdata/proc")
	big := strings.Repeat("X", 3<<20)
	env := "JUNK=" + big + "\x00MODULEPATH=" + big[:1<<20] + "\x00SLURM_JOB_ID=4242\x00SLURM_JOB_NAME=after-the-junk\x00"
	must(t, os.WriteFile(filepath.Join(root, "301", "environ"), []byte(env), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "302", "environ"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(root, "305", "environ"), nil, 0o644))
	r := newFixtureResolver(t, root, nil)
	p, err := r.Resolve(302)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve(301); err != nil {
		t.Fatal(err)
	}
	p, _ = r.Cached(procfs.ID{PID: 302, Start: p.Start})
	if p.Job.Name != "after-the-junk" {
		t.Fatalf("name = %q", p.Job.Name)
	}
}

type fakeCtld struct {
	info  slurm.JobInfo
	err   error
	calls int
}

func (f *fakeCtld) Job(_ context.Context, id string) (slurm.JobInfo, error) {
	f.calls++
	if f.err != nil {
		return slurm.JobInfo{}, f.err
	}
	i := f.info
	i.ID = id
	return i, nil
}

func TestControllerWinsForMetadataButNotForTheOwner(t *testing.T) {
	ctld := &fakeCtld{info: slurm.JobInfo{User: "alice", UID: 1002, Meta: map[string]string{schema.JobName.Name: "from-ctld", schema.JobAccount.Name: "acct", schema.JobPartition.Name: "part"}}}
	r := newFixtureResolver(t, "testdata/proc", func(o *Options) { o.Controller = ctld })
	p, err := r.Resolve(301)
	if err != nil {
		t.Fatal(err)
	}
	if p.Job.Name != "from-ctld" || p.Job.Value(schema.JobAccount) != "acct" || p.Job.Value(schema.JobPartition) != "part" {
		t.Errorf("controller metadata not used: %+v", p.Job)
	}
	// slurmctld claims uid 1002, the job's tasks run as 1001: a disagreement
	// is counted and the node's own view stays.
	if p.Job.User != "bob" || r.Stats().OwnerConflicts == 0 {
		t.Errorf("owner = %q, conflicts = %d", p.Job.User, r.Stats().OwnerConflicts)
	}
	calls := ctld.calls
	if _, err := r.Resolve(302); err != nil {
		t.Fatal(err)
	}
	if ctld.calls != calls {
		t.Errorf("slurmctld asked again within the TTL (%d calls)", ctld.calls)
	}
}

// slowCtld answers only once released.
type slowCtld struct {
	fakeCtld
	release chan struct{}
}

func (s *slowCtld) Job(ctx context.Context, id string) (slurm.JobInfo, error) {
	<-s.release
	return s.fakeCtld.Job(ctx, id)
}

// A slurmctld that takes its time (squeue and scontrol on a loaded node)
// holds up nobody: the job is published from its tasks' environment, and
// slurmctld's answer replaces it when it comes, without asking twice.
func TestSlowControllerHoldsUpNobody(t *testing.T) {
	ctld := &slowCtld{fakeCtld: fakeCtld{info: slurm.JobInfo{UID: 1001, Meta: map[string]string{schema.JobName.Name: "from-ctld"}}}, release: make(chan struct{})}
	r := newFixtureResolver(t, "testdata/proc", func(o *Options) { o.Controller = ctld })
	p, err := r.Resolve(301)
	if err != nil {
		t.Fatal(err)
	}
	if p.Job.Name != `train "llama" ✓` || !p.Job.GRESPending {
		t.Fatalf("before slurmctld answered: %+v, want the environment's name and GRES pending", p.Job)
	}
	if _, err := r.Resolve(302); err != nil { // a lookup runs: not another
		t.Fatal(err)
	}
	close(ctld.release)
	id := p.ID
	deadline := time.Now().Add(10 * time.Second)
	for {
		if p, _ = r.Cached(id); p.Job.Name == "from-ctld" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slurmctld's late answer never published: %+v", p.Job)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ctld.calls != 1 {
		t.Errorf("slurmctld asked %d times, want 1", ctld.calls)
	}
	if p.Job.GRESPending {
		t.Errorf("GRES still pending once slurmctld answered: %+v", p.Job)
	}
}

// A late lookup that fails ends the wait for the job's GRES: what nobody
// knows is then unknown, not pending.
func TestSlowControllerFailureEndsPending(t *testing.T) {
	ctld := &slowCtld{fakeCtld: fakeCtld{err: errors.New("connection refused")}, release: make(chan struct{})}
	r := newFixtureResolver(t, "testdata/proc", func(o *Options) { o.Controller = ctld })
	p, err := r.Resolve(301)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Job.GRESPending {
		t.Fatalf("while slurmctld is asked: %+v, want GRES pending", p.Job)
	}
	close(ctld.release)
	deadline := time.Now().Add(10 * time.Second)
	for p.Job.GRESPending {
		if time.Now().After(deadline) {
			t.Fatalf("GRES still pending 10 s after slurmctld failed: %+v", p.Job)
		}
		time.Sleep(5 * time.Millisecond)
		p, _ = r.Cached(p.ID)
	}
}

func TestControllerDownFallsBackToEnvironment(t *testing.T) {
	ctld := &fakeCtld{err: errors.New("connection refused")}
	r := newFixtureResolver(t, "testdata/proc", func(o *Options) { o.Controller = ctld })
	p, err := r.Resolve(301)
	if err != nil {
		t.Fatal(err)
	}
	if p.Job.Name != `train "llama" ✓` || r.Stats().ControllerErrs == 0 {
		t.Fatalf("got %+v, stats %+v", p.Job, r.Stats())
	}
}

func TestCachedDoesNotAllocate(t *testing.T) {
	r := newFixtureResolver(t, "testdata/proc", nil)
	p, err := r.Resolve(302)
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, ok := r.Cached(procfs.ID{PID: 302, Start: p.Start}); !ok {
			t.Fatal("miss")
		}
	})
	if allocs != 0 {
		t.Fatalf("Cached allocates %.1f times per call", allocs)
	}
}

func TestCleanBoundsAndRepairs(t *testing.T) {
	if got := clean("a\xffb", 10); got != "a\uFFFDb" {
		t.Errorf("clean = %q", got)
	}
	long := strings.Repeat("✓", 600) // 1800 bytes
	got := clean(long, maxValue)
	if len(got) > maxValue || !strings.HasPrefix(long, got) {
		t.Errorf("clean cut a rune: len %d", len(got))
	}
}

// Samples are drained after their process exits: the cache must still
// answer for it for ExitGrace, then forget it.
func TestExitedProcessesStayForTheGrace(t *testing.T) {
	root := copyTree(t, "testdata/proc")
	now := time.Unix(1000, 0)
	r := newFixtureResolver(t, root, func(o *Options) {
		o.ExitGrace = time.Minute
		o.Now = func() time.Time { return now }
	})
	if _, err := r.Scan(); err != nil {
		t.Fatal(err)
	}
	p, ok := r.Cached(procfs.ID{PID: 302, Start: 1010})
	if !ok {
		t.Fatal("302 not cached")
	}
	must(t, os.RemoveAll(filepath.Join(root, "302")))
	if _, err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if q, ok := r.Cached(procfs.ID{PID: 302, Start: p.Start}); !ok || q.Job == nil || q.Job.ID != "4242" {
		t.Fatalf("exited process forgotten at once: %+v %v", q, ok)
	}
	now = now.Add(2 * time.Minute)
	if _, err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Cached(procfs.ID{PID: 302, Start: p.Start}); ok {
		t.Fatal("exited process kept past the grace")
	}
	// A job whose processes are all gone is forgotten too.
	for _, pid := range []string{"800"} {
		must(t, os.RemoveAll(filepath.Join(root, pid)))
	}
	r.Refresh()
	now = now.Add(2 * time.Minute)
	r.Refresh()
	for _, j := range r.Jobs() {
		if j.ID == "8001" {
			t.Fatal("job 8001 has no process left but is still listed")
		}
	}
}

// A process is forked in no job and joins one before it execs the job's
// program (slurmstepd's task before proctrack adds it, a shell that writes
// cgroup.procs, then execs). Caught before it joins, it must not stay "in
// no job" for NegativeTTL: the next refresh reads it again, once.
func TestCaughtBeforeItJoinsAJob(t *testing.T) {
	root := t.TempDir()
	now := time.Unix(1000, 0)
	task := "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"
	writeProc(t, root, 600, task, 5151, 1001) // for the cgroup tree's mirror
	r := newFixtureResolver(t, root, func(o *Options) { o.Now = func() time.Time { return now } })
	writeProc(t, root, 600, "0::/user.slice/user-0.slice/session-1.scope\n", 5151, 0)
	if _, err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	id := procfs.ID{PID: 600, Start: 5151}
	if p, ok := r.Cached(id); !ok || p.InJob() {
		t.Fatalf("before it joins: %+v %v", p, ok)
	}
	writeProc(t, root, 600, task, 5151, 1001)
	now = now.Add(50 * time.Millisecond)
	if fresh, _ := r.Refresh(); len(fresh) != 0 {
		t.Errorf("a refresh within %v read it again: %+v", recheckAfter, fresh)
	}
	now = now.Add(recheckAfter)
	fresh, err := r.Refresh()
	if err != nil {
		t.Fatal(err)
	}
	if len(fresh) != 1 || !fresh[0].InJob() || fresh[0].Job.ID != "4242" {
		t.Fatalf("the refresh after it joined returned %+v (last error %v)", fresh, r.LastError())
	}
	if p, _ := r.Cached(id); !p.InJob() {
		t.Fatalf("cached after it joined: %+v", p)
	}
	// A process that stays in no job is read twice, not at every refresh.
	writeProc(t, root, 601, "0::/user.slice\n", 6161, 1001)
	r.Refresh()
	now = now.Add(recheckAfter)
	r.Refresh()
	cold := r.Stats().ColdLookups
	for range 3 {
		now = now.Add(recheckAfter)
		r.Refresh()
	}
	if got := r.Stats().ColdLookups - cold; got != 0 {
		t.Errorf("a process confirmed in no job was read %d more times", got)
	}
}

// A pid that comes back after its process exited is a new process.
func TestRefreshSeesAReusedPidOfAnExitedProcess(t *testing.T) {
	root := copyTree(t, "testdata/proc")
	r := newFixtureResolver(t, root, nil)
	if _, err := r.Scan(); err != nil {
		t.Fatal(err)
	}
	must(t, os.RemoveAll(filepath.Join(root, "302")))
	r.Refresh()
	writeProc(t, root, 302, "0::/user.slice\n", 88888, 1001)
	fresh, err := r.Refresh()
	if err != nil {
		t.Fatal(err)
	}
	if len(fresh) != 1 || fresh[0].PID != 302 || fresh[0].InJob() {
		t.Fatalf("Refresh returned %+v", fresh)
	}
	if _, ok := r.Cached(procfs.ID{PID: 302, Start: 1010}); ok {
		t.Error("the old process is still cached under the reused pid")
	}
}

func TestJobUnknownToSlurmctldIsNotAFailure(t *testing.T) {
	ctld := &fakeCtld{err: fmt.Errorf("lookup: %w", slurm.ErrNoSuchJob)}
	r := newFixtureResolver(t, "testdata/proc", func(o *Options) { o.Controller = ctld })
	p, err := r.Resolve(301)
	if err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if p.Job.Name != `train "llama" ✓` || st.ControllerErrs != 0 || st.ControllerUnknown != 1 {
		t.Fatalf("job %+v, stats %+v", p.Job, st)
	}
}

// slurmstepd forks a task into its cgroup as root, then it takes the user's
// uid and execs, keeping pid and start time. A task caught before the exec
// must not leave its job nameless and ownerless until the TTL, nor the
// profile of the interval it started in: the daemon's pass right before
// the drain, a moment after the exec, finds the name.
func TestTaskCaughtBeforeItsExec(t *testing.T) {
	root := t.TempDir()
	now := time.Unix(1000, 0)
	cg := "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n"
	writeProc(t, root, 500, cg, 4242, 0)
	must(t, os.WriteFile(filepath.Join(root, "500", "environ"), []byte("PATH=/usr/sbin\x00"), 0o644))
	r := newFixtureResolver(t, root, func(o *Options) { o.Now = func() time.Time { return now } })
	if _, err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	p, _ := r.Cached(procfs.ID{PID: 500, Start: 4242})
	// Before the exec the task is root's, as far as anyone can tell.
	if p.Job == nil || p.Job.Name != "" {
		t.Fatalf("before the exec: %+v", p.Job)
	}
	// The exec: same pid and start time, the user's uid and environment.
	writeProc(t, root, 500, cg, 4242, 1001)
	must(t, os.WriteFile(filepath.Join(root, "500", "environ"), []byte("SLURM_JOB_ID=77\x00SLURM_JOB_NAME=train\x00"), 0o644))
	now = now.Add(100 * time.Millisecond)
	if _, err := r.Scan(); err != nil {
		t.Fatal(err)
	}
	p, _ = r.Cached(procfs.ID{PID: 500, Start: 4242})
	if p.Job.Name != "train" || p.Job.User != "bob" {
		t.Fatalf("after the exec: %+v", p.Job)
	}
}

// alice builds a look-alike of bob's job 4242 in her systemd user
// manager's subtree and runs more processes there than bob's job has: none
// is in a job, each is counted, and the job stays bob's however the vote
// goes.
func TestLookalikeCgroupIsNotAJob(t *testing.T) {
	r := newFixtureResolver(t, "testdata/proc", func(o *Options) { o.JobTTL = time.Nanosecond })
	for range 2 { // the second scan refreshes every job: its owner is voted again
		procs, err := r.Scan()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if p.PID >= 950 && p.PID <= 954 && (p.InJob() || p.Job != nil) {
				t.Fatalf("look-alike pid %d was placed in job %+v", p.PID, p.Job)
			}
			if p.InJob() && p.Job.ID == "4242" && p.Job.User != "bob" {
				t.Fatalf("job 4242 given to %q by pid %d", p.Job.User, p.PID)
			}
		}
	}
	if st := r.Stats(); st.Refused[cgroup.ReasonOutside] != 5 {
		t.Errorf("refused = %v, want 5 %s", st.Refused, cgroup.ReasonOutside)
	}
}

// A SLUID directory's job id comes from its slurmstepd's title, never from
// the tasks' SLURM_JOB_ID; no two jobs of a host get one id.
func TestSLUIDJobIDComesFromSlurmstepd(t *testing.T) {
	r := newFixtureResolver(t, "testdata/proc", nil)
	procs, err := r.Scan()
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]*Job{}
	for _, p := range procs {
		if p.InJob() {
			got[p.PID] = p.Job
		}
	}
	if j := got[600]; j == nil || j.ID != "6000" || j.Name != "sluid-job" {
		t.Errorf("pid 600: %+v, want job 6000 named sluid-job", j)
	}
	// Its task says 4242: the title says 6100, and a task that names
	// another job names nothing of this one.
	if j := got[610]; j == nil || j.ID != "6100" || j.Name != "" {
		t.Errorf("pid 610: %+v, want job 6100, unnamed", j)
	}
	// A non-root process in the slurm leaf is not slurmstepd.
	if j := got[631]; j == nil || j.ID != "s3CCCCCCCCCCCC" {
		t.Errorf("pid 631: %+v, want the SLUID as its id", j)
	}
	// Both slurmstepds say 6200: one job has it, the other keeps its SLUID.
	a, b := got[621], got[623]
	if a == nil || b == nil || a.ID == b.ID {
		t.Fatalf("twins: %+v and %+v", a, b)
	}
	ids := []string{a.ID, b.ID}
	slices.Sort(ids)
	if ids[0] != "6200" || !strings.HasPrefix(ids[1], "s2") {
		t.Errorf("twins' ids = %q, want 6200 and a SLUID", ids)
	}
	if st := r.Stats(); st.IDConflicts == 0 {
		t.Errorf("the conflict is not counted: %+v", st)
	}
	seen := map[string]bool{}
	for _, j := range r.Jobs() {
		if seen[j.Host+"/"+j.ID] {
			t.Errorf("two jobs of %s have id %s", j.Host, j.ID)
		}
		seen[j.Host+"/"+j.ID] = true
	}
}

// A job whose path names its id takes it back from a SLUID job that
// claimed it first.
func TestPathIDWinsOverSLUID(t *testing.T) {
	root := copyTree(t, "testdata/proc")
	// 630's leaf holds a real slurmstepd now, naming job 4242.
	writeProc(t, root, 630, "0::/system.slice/slurmstepd.scope/s3CCCCCCCCCCCC/step_0/slurm\n", 4299, 0)
	must(t, os.WriteFile(filepath.Join(root, "630", "cmdline"), []byte("slurmstepd: [4242.0]\x00"), 0o644))
	r := newFixtureResolver(t, root, nil)
	if _, err := r.Resolve(630); err != nil {
		t.Fatal(err)
	}
	sluid, err := r.Resolve(631)
	if err != nil || sluid.Job.ID != "4242" {
		t.Fatalf("the SLUID job did not take 4242 first: %+v, %v", sluid.Job, err)
	}
	p, err := r.Resolve(301)
	if err != nil || p.Job.ID != "4242" {
		t.Fatalf("job_4242: %+v, %v", p.Job, err)
	}
	again, _ := r.Cached(sluid.ID)
	if again.Job.ID != "s3CCCCCCCCCCCC" {
		t.Errorf("the SLUID job kept 4242 beside job_4242: %+v", again.Job)
	}
}

// slurmctld's record of a job's GRES is per NodeName: the job gets its
// own node's, the path's under multiple slurmd, else this host's.
func TestJobGRESIsThisNodes(t *testing.T) {
	gres := map[string][]slurm.GRES{
		"node-a": {{Name: "gpu", Count: 1, Index: []int{0}, GPU: true}},
		"node-b": {{Name: "gpu", Count: 2, Index: []int{1, 2}, GPU: true}},
	}
	ctld := &fakeCtld{info: slurm.JobInfo{UID: 1001, Meta: map[string]string{schema.JobName.Name: "x"}, GRES: gres}}
	r := newFixtureResolver(t, "testdata/proc", func(o *Options) { o.Controller = ctld })
	for pid, want := range map[int]int{301: 1, 400: 2, 402: 1} { // node-a by hostname, node-b and node-a by path
		p, err := r.Resolve(pid)
		if err != nil || len(p.Job.GRES) != 1 || p.Job.GRES[0].Count != want {
			t.Errorf("pid %d (%s): GRES %+v, %v; want %d GPUs", pid, p.Host, p.Job.GRES, err, want)
		}
	}
}

// A task's environment whose read never returns (its pages mapped from
// the job's own FUSE mount; here a FIFO that nobody writes) holds the
// refresh for one deadline, once: the job is published without it, its
// later reads are refused at once while the first is stuck, and another
// job's environment is still read.
func TestStuckEnvironmentHoldsUpOnlyItsJob(t *testing.T) {
	root := copyTree(t, "testdata/proc")
	fifo := filepath.Join(root, "301", "environ")
	must(t, os.Remove(fifo))
	must(t, syscall.Mkfifo(fifo, 0o600))
	t.Cleanup(func() {
		// Ends the stuck open: a writer arrives and leaves.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	r := newFixtureResolver(t, root, nil)
	r.envGuard.Timeout = 20 * time.Millisecond
	p, err := r.Resolve(301)
	if err != nil || !p.InJob() {
		t.Fatalf("a task whose environment stalls: %+v, %v", p, err)
	}
	if st := r.envGuard.Stats(); st.Stalls != 1 || st.Stuck != 1 {
		t.Errorf("guard %+v, want one stall, one job stuck", st)
	}
	if q, err := r.Resolve(500); err != nil || q.Job.Name != "v1job" {
		t.Errorf("another job's environment after the stall: %+v, %v", q.Job, err)
	}
}
