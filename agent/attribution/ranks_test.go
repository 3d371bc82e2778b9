package attribution

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/cgroup/cgrouptest"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/schema"
)

// rankRig is a fixture proc tree of job 77 on node-a (step 0, tasks 0 to
// 3) and a resolver with Ranks and a fake clock.
type rankRig struct {
	t    *testing.T
	root string
	now  time.Time
	r    *Resolver
}

const (
	rankJob   = "/system.slice/slurmstepd.scope/job_77"
	rankStart = 500
)

func rankTask(n string) string { return rankJob + "/step_0/user/task_" + n }

func newRankRig(t *testing.T, ranks bool) *rankRig {
	g := &rankRig{t: t, root: t.TempDir(), now: time.Unix(9000, 0)}
	tree := &cgroup.Tree{Root: t.TempDir(), Owner: os.Getuid()}
	for _, n := range []string{"0", "1", "2", "3", "special"} {
		cgrouptest.Add(t, tree, true, "", rankTask(n))
	}
	g.r = New(Options{Proc: procfs.New(g.root), Users: fixtureUsers(t), HostName: "node-a", Cgroups: tree,
		Ranks: ranks, Now: func() time.Time { return g.now }})
	return g
}

// task writes process pid, running comm in cgroup cg, with the
// environment env (NUL-separated entries; SLURM_JOB_ID=77 added first).
func (g *rankRig) task(pid int, comm, cg string, env ...string) {
	g.t.Helper()
	g.proc(pid, comm, cg)
	body := strings.Join(append([]string{"SLURM_JOB_ID=77"}, env...), "\x00") + "\x00"
	must(g.t, os.WriteFile(filepath.Join(g.root, itoa(pid), "environ"), []byte(body), 0o644))
}

// proc writes pid's stat, cgroup and status, owned by bob (1001).
func (g *rankRig) proc(pid int, comm, cg string) {
	g.t.Helper()
	d := filepath.Join(g.root, itoa(pid))
	must(g.t, os.MkdirAll(d, 0o755))
	stat := itoa(pid) + " (" + comm + ") S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " + itoa(rankStart) + " 0 0\n"
	must(g.t, os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644))
	must(g.t, os.WriteFile(filepath.Join(d, "cgroup"), []byte("0::"+cg+"\n"), 0o644))
	must(g.t, os.WriteFile(filepath.Join(d, "status"), []byte("Uid:\t1001\t1001\t1001\t1001\n"), 0o644))
}

// scan runs a full pass and returns the processes by pid.
func (g *rankRig) scan() map[int]Process {
	g.t.Helper()
	procs, err := g.r.Scan()
	if err != nil {
		g.t.Fatal(err)
	}
	out := map[int]Process{}
	for _, p := range procs {
		out[p.PID] = p
	}
	return out
}

// task is what a process's task attributes are, "" where it has none.
type taskWant struct{ rank, local, node string }

func taskOf(p Process) taskWant {
	return taskWant{p.Value(schema.TaskRank), p.Value(schema.TaskLocalID), p.Value(schema.NodeIndex)}
}

// A launcher's rank variable (torchrun's RANK, mpirun's, a PMI server's)
// wins over SLURM_PROCID, which its Slurm task shares with every child it
// starts; the local id is the cgroup's, whatever the environment says.
func TestLauncherRankWinsOverProcID(t *testing.T) {
	g := newRankRig(t, true)
	g.task(7700, "torchrun", rankTask("0"), "SLURM_PROCID=1", "SLURM_NODEID=1", "SLURM_LOCALID=5")
	g.task(7701, "python3", rankTask("0"), "SLURM_PROCID=1", "SLURM_NODEID=1", "RANK=9")
	g.task(7702, "a.out", rankTask("0"), "OMPI_COMM_WORLD_RANK=10", "SLURM_PROCID=1", "SLURM_NODEID=1")
	g.task(7703, "a.out", rankTask("0"), "SLURM_PROCID=1", "PMI_RANK=11", "SLURM_NODEID=1")
	g.task(7704, "a.out", rankTask("0"), "SLURM_PROCID=1", "SLURM_NODEID=1", "PMIX_RANK=12")
	g.task(7705, "a.out", rankTask("0"), "PMI_RANK=99", "SLURM_PROCID=1", "RANK=13", "SLURM_NODEID=1")
	g.task(7706, "python3", rankTask("3"), "SLURM_PROCID=0070", "SLURM_NODEID=2")
	g.task(7707, "bash", rankTask("special"), "SLURM_PROCID=4")
	// Its environment names another job: it describes none of this one's
	// processes, and never moves this one into that job.
	g.proc(7708, "python3", rankTask("1"))
	must(t, os.WriteFile(filepath.Join(g.root, "7708", "environ"), []byte("SLURM_JOB_ID=78\x00SLURM_PROCID=6\x00SLURM_NODEID=1\x00"), 0o644))
	got := g.scan()
	for pid, want := range map[int]taskWant{
		7700: {"1", "0", "1"},
		7701: {"9", "0", "1"},
		7702: {"10", "0", "1"},
		7703: {"11", "0", "1"},
		7704: {"12", "0", "1"},
		7705: {"13", "0", "1"},
		7706: {"70", "3", "2"},
		7707: {"4", "", ""},
		7708: {"", "1", ""},
	} {
		p := got[pid]
		if !p.InJob() || p.Job.ID != "77" || p.Job.User != "bob" {
			t.Errorf("pid %d: not bob's job 77: %+v", pid, p)
			continue
		}
		if g := taskOf(p); g != want {
			t.Errorf("pid %d: task %+v, want %+v", pid, g, want)
		}
	}
	if st := g.r.Stats(); st.Unreadable != 0 || g.r.LastError() != nil {
		t.Errorf("errors: %+v, %v", st, g.r.LastError())
	}
}

// A rank or node index that is no decimal integer from 0 to 2^24-1 leaves
// its label off, quietly: the job's own claim, not the agent's failure. A
// launcher's variable refused does not fall back to SLURM_PROCID (its
// task's, another process's rank).
func TestBadRankLeavesTheLabelOff(t *testing.T) {
	huge := strings.Repeat("7", 10<<20) // 10 MiB of digits in one value
	for name, tc := range map[string]struct {
		env  []string
		want taskWant
	}{
		"text":                 {[]string{"RANK=three", "SLURM_PROCID=2", "SLURM_NODEID=1"}, taskWant{"", "0", "1"}},
		"negative":             {[]string{"SLURM_PROCID=-1", "SLURM_NODEID=-1"}, taskWant{"", "0", ""}},
		"sign":                 {[]string{"SLURM_PROCID=+1", "SLURM_NODEID= 1"}, taskWant{"", "0", ""}},
		"hex and exponent":     {[]string{"PMI_RANK=0x10", "SLURM_NODEID=1e3"}, taskWant{"", "0", ""}},
		"past 2^24-1":          {[]string{"RANK=16777216", "SLURM_NODEID=16777215"}, taskWant{"", "0", "16777215"}},
		"past 64 bits":         {[]string{"SLURM_PROCID=99999999999999999999"}, taskWant{"", "0", ""}},
		"newline":              {[]string{"OMPI_COMM_WORLD_RANK=3\n4", "SLURM_PROCID=2"}, taskWant{"", "0", ""}},
		"empty launcher value": {[]string{"RANK=", "SLURM_PROCID=2"}, taskWant{"2", "0", ""}},
		"10 MiB value":         {[]string{"RANK=" + huge, "SLURM_NODEID=" + huge, "SLURM_PROCID=2"}, taskWant{"", "0", ""}},
		"after 10 MiB":         {[]string{"FILLER=" + huge, "SLURM_PROCID=2", "SLURM_NODEID=3"}, taskWant{"2", "0", "3"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := newRankRig(t, true)
			g.task(7710, "python3", rankTask("0"), tc.env...)
			p := g.scan()[7710]
			if !p.InJob() || p.Job.ID != "77" {
				t.Fatalf("not in job 77: %+v", p)
			}
			if got := taskOf(p); got != tc.want {
				t.Errorf("task %+v, want %+v", got, tc.want)
			}
			if st := g.r.Stats(); st.Unreadable != 0 || st.MalformedCgroup != 0 || g.r.LastError() != nil {
				t.Errorf("a bad value was counted or logged: %+v, %v", st, g.r.LastError())
			}
		})
	}
}

// countedEnv is a process's environment whose reads are counted: the
// opens of its file, as inotify reports them.
type countedEnv struct {
	t    *testing.T
	path string
	fd   int
	n    int
}

func countedEnviron(t *testing.T, path, body string) *countedEnv {
	t.Helper()
	must(t, os.WriteFile(path, []byte(body), 0o644))
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		t.Skipf("inotify: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	// Closes too: inotify merges an event into an unread one just like it,
	// so opens alone would count as one.
	if _, err := syscall.InotifyAddWatch(fd, path, syscall.IN_OPEN|syscall.IN_CLOSE); err != nil {
		t.Skipf("inotify: %v", err)
	}
	return &countedEnv{t: t, path: path, fd: fd}
}

// reads returns how often the environment was opened so far.
func (c *countedEnv) reads() int {
	buf := make([]byte, 4096)
	for {
		k, err := syscall.Read(c.fd, buf)
		if k <= 0 || err != nil {
			return c.n
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= k; {
			if binary.LittleEndian.Uint32(buf[off+4:])&syscall.IN_OPEN != 0 {
				c.n++
			}
			off += syscall.SizeofInotifyEvent + int(binary.LittleEndian.Uint32(buf[off+12:])) // #nosec G115 -- a name's length, below the buffer's
		}
	}
}

// set rewrites the environment, and counts from 0 again.
func (c *countedEnv) set(body string) {
	must(c.t, os.WriteFile(c.path, []byte(body), 0o644))
	c.reads()
	c.n = 0
}

// Each process of a job is read once, whatever the passes and TTLs, and
// again only after an exec (the same pid and start time under another
// name: a launcher's child read before its exec had the launcher's
// environment); a process in no job is never read for it.
func TestEachProcessIsReadOncePerProgram(t *testing.T) {
	g := newRankRig(t, true)
	g.proc(7720, "torchrun", rankTask("0"))
	member := countedEnviron(t, filepath.Join(g.root, "7720", "environ"), "SLURM_JOB_ID=77\x00SLURM_PROCID=0\x00SLURM_NODEID=0\x00")
	g.proc(7721, "sshd", "/user.slice/user-1001.slice/session-3.scope")
	outside := countedEnviron(t, filepath.Join(g.root, "7721", "environ"), "SLURM_JOB_ID=77\x00RANK=1\x00")
	for i := range 6 {
		g.scan()
		if _, err := g.r.Refresh(); err != nil {
			t.Fatal(err)
		}
		g.now = g.now.Add(40 * time.Second) // past the job and negative TTLs
		if p, _ := g.r.Resolve(7720); p.Rank != "0" {
			t.Fatalf("pass %d: rank %q, want 0", i, p.Rank)
		}
	}
	if n := member.reads(); n != 1 {
		t.Errorf("a job's process was read %d times, want once", n)
	}
	if n := outside.reads(); n != 0 {
		t.Errorf("a process in no job was read %d times for its rank", n)
	}
	// It execs: the same pid and start time, another program and
	// environment.
	g.proc(7720, "python3", rankTask("0"))
	member.set("SLURM_JOB_ID=77\x00SLURM_PROCID=0\x00RANK=5\x00SLURM_NODEID=0\x00")
	g.now = g.now.Add(time.Second) // well within the job TTL: the next pass sees it
	if p := g.scan()[7720]; p.Rank != "5" {
		t.Errorf("the pass after its exec: rank %q, want the new program's 5", p.Rank)
	}
	for range 3 {
		g.now = g.now.Add(40 * time.Second)
		g.scan()
	}
	if n := member.reads(); n != 1 {
		t.Errorf("read %d times after its exec, want once", n)
	}
}

// Without Ranks nothing is read for a rank: a job whose metadata one task
// gave is not read again, and no process carries a rank or node index
// (its local id is the cgroup's, read anyway).
func TestRanksOff(t *testing.T) {
	g := newRankRig(t, false)
	g.task(7730, "bash", rankTask("0"), "SLURM_JOB_NAME=one", "SLURM_PROCID=0", "SLURM_NODEID=0")
	g.scan()
	g.proc(7731, "python3", rankTask("1"))
	later := countedEnviron(t, filepath.Join(g.root, "7731", "environ"), "SLURM_JOB_ID=77\x00SLURM_PROCID=1\x00SLURM_NODEID=0\x00")
	got := g.scan()
	if _, err := g.r.Refresh(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{7730, 7731} {
		if w := taskOf(got[pid]); w.rank != "" || w.node != "" {
			t.Errorf("pid %d: task %+v without Ranks", pid, w)
		}
	}
	if got[7731].Job.Name != "one" || got[7731].Value(schema.TaskLocalID) != "1" {
		t.Errorf("pid 7731: %+v", got[7731])
	}
	if n := later.reads(); n != 0 {
		t.Errorf("a task of a job with its metadata was read %d times without Ranks", n)
	}
}

// A job forking more processes than one pass reads (MaxEnvReads) has them
// all labelled over the next passes, and the labels reach Cached, the
// sampling path's lookup.
func TestRanksOfManyProcessesComeOverPasses(t *testing.T) {
	g := newRankRig(t, true)
	const n = 40
	for i := range n {
		g.task(7800+i, "python3", rankTask("0"), "SLURM_JOB_NAME=many", "SLURM_PROCID=0", "LOCAL_RANK="+itoa(i), "RANK="+itoa(i), "SLURM_NODEID=4")
	}
	labelled := 0
	for _, p := range g.scan() {
		if p.Rank != "" {
			labelled++
		}
	}
	// The first task read gave the job its metadata; the rest wait for
	// the passes, MaxEnvReads each.
	if labelled != 1+g.r.o.MaxEnvReads {
		t.Errorf("the first pass read %d processes' ranks, want %d", labelled, 1+g.r.o.MaxEnvReads)
	}
	for range 2 {
		if _, err := g.r.Refresh(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		p, ok := g.r.Cached(procfs.ID{PID: 7800 + i, Start: rankStart})
		if !ok || p.Rank != itoa(i) || p.NodeIndex != "4" {
			t.Errorf("pid %d: %v rank %q node %q, want %d and 4", 7800+i, ok, p.Rank, p.NodeIndex, i)
		}
	}
}

// A member whose environment never answers (a FIFO nobody writes, as a
// page of the job's own FUSE mount would) costs its job one deadline: the
// job's other reads are refused while it is stuck, each process once, and
// later passes neither wait nor count again.
func TestStuckEnvironmentIsTriedOncePerProcess(t *testing.T) {
	g := newRankRig(t, true)
	g.r.envGuard.Timeout = 20 * time.Millisecond
	g.proc(7740, "python3", rankTask("0"))
	fifo := filepath.Join(g.root, "7740", "environ")
	must(t, syscall.Mkfifo(fifo, 0o600))
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	for i := range 3 {
		g.task(7741+i, "python3", rankTask(itoa(i+1)), "SLURM_JOB_NAME=stuck", "SLURM_PROCID="+itoa(i+1))
	}
	g.scan()
	first := g.r.Stats().Unreadable
	for range 4 {
		g.now = g.now.Add(time.Second)
		g.scan()
		if _, err := g.r.Refresh(); err != nil {
			t.Fatal(err)
		}
	}
	if st := g.r.envGuard.Stats(); st.Stalls != 1 {
		t.Errorf("guard %+v, want one stall", st)
	}
	if n := g.r.Stats().Unreadable; first == 0 || n != first || n > 4 {
		t.Errorf("unreadable environments: %d after the first pass, %d after five; want each process once", first, n)
	}
}
