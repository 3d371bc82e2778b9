package offcpu

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/schema"
)

// tracer is the Tracer as the source uses it; tests fake it.
type tracer interface {
	Drain() ([]Sample, Stats, error)
	AddJob(cgroupID uint64, v1 bool, group uint32) error
	RemoveJob(cgroupID uint64, v1 bool) error
}

var (
	_ tracer                 = (*Tracer)(nil)
	_ source.Source          = (*Source)(nil)
	_ source.ProcessAttacher = (*Source)(nil)
	_ source.Kind            = (*Kind)(nil)
)

// Source is the off-CPU tracer as a profile source: each drained (process,
// stacks, state) is one off_cpu sample of its switches and its time,
// blocked or runnable. It hands the tracer the cgroup of each profiled
// process's job as the daemon finds it, and drops a job's once its
// directory is gone.
type Source struct {
	t      tracer
	stacks source.Stacks
	m      metrics
	last   Stats
	// trim is the kernel's scheduler entry: frames up to it are the
	// tracepoint's own and are cut.
	trim addrRange

	taskCgroup func(procfs.ID) (int, string, string, bool)
	root       string // where the cgroup hierarchies are mounted
	v1         string // the v1 controller task cgroups are read in ("" none)

	mu        sync.Mutex
	jobs      map[string]jobEntry // task cgroups traced, by absolute directory
	groups    map[string]uint32   // each job's group, by job directory
	lastGroup uint32
}

type jobEntry struct {
	id  uint64
	v1  bool
	job string // its job's directory
}

// addrRange is [start, end) of a kernel function; zero: unknown.
type addrRange struct{ start, end uint64 }

// NewSource makes a source of tracer t. taskCgroup names the cgroup a
// profiled process sits in as a job's task and its job's (version,
// directories under their hierarchy's mount); root is where the
// hierarchies are mounted; v1 is the v1 controller the tracer reads
// cgroups in ("" for none).
func NewSource(t tracer, stacks source.Stacks, taskCgroup func(procfs.ID) (int, string, string, bool), root, v1 string) *Source {
	return &Source{t: t, stacks: stacks, m: newMetrics(), taskCgroup: taskCgroup, root: root, v1: v1,
		jobs: map[string]jobEntry{}, groups: map[string]uint32{}}
}

// Info describes the source to the daemon.
func (s *Source) Info() source.Info {
	return source.Info{Name: "offcpu", Type: profiles.OffCPU, Period: 1, Counted: 0,
		Drained: s.m.switches, Unattributed: s.m.unattributed}
}

// Drain drains the tracer, and stops tracing the jobs that ended.
func (s *Source) Drain() (source.Batch, error) {
	samples, st, err := s.t.Drain()
	var b source.Batch
	if err != nil {
		return b, err
	}
	s.m.observe(s.last, st)
	s.last = st
	b.Warn = s.dropEnded()
	b.Samples = make([]source.Sample, 0, len(samples))
	resolved := map[*bpf.InterpStack]interp.Stack{}
	for _, smp := range samples {
		ns := int64(min(smp.Ns, 1<<62))             // #nosec G115 -- bounded
		vals := []int64{int64(smp.Switches), 0, ns} // #nosec G115 -- switches of one interval
		if smp.Runnable {
			vals[1], vals[2] = ns, 0
		}
		out := source.Sample{Proc: smp.Proc, Kernel: s.trimKernel(smp.Kernel), User: smp.User,
			Setup: source.Setup(smp.Setup), Values: vals}
		if smp.Interp != nil && s.stacks != nil {
			r, ok := resolved[smp.Interp]
			if !ok {
				r = s.stacks.Resolve(uint32(smp.Proc.PID), smp.StartNs, smp.Interp) // #nosec G115 -- a pid is below pid_max
				resolved[smp.Interp] = r
			}
			out.Interp = r
		}
		b.Samples = append(b.Samples, out)
	}
	return b, nil
}

// trimKernel cuts the tracepoint's and the BPF program's frames: what is
// inside the scheduler's entry and before it. A stack without the entry
// is kept whole.
func (s *Source) trimKernel(k []uint64) []uint64 {
	if s.trim.end == 0 {
		return k
	}
	for i, ip := range k {
		if ip-1 >= s.trim.start && ip-1 < s.trim.end {
			return k[i+1:]
		}
	}
	return k
}

// AttachProcess adds the cgroup a profiled process runs in as a job's task
// to the tracer, once per cgroup: its job's tasks are traced, not
// slurmstepd, whose threads wait all the job's life for the job's sake.
func (s *Source) AttachProcess(p procfs.ID) (source.Attach, error) {
	if s.taskCgroup == nil {
		return source.AttachDone, nil
	}
	version, task, job, ok := s.taskCgroup(p)
	if !ok {
		return source.AttachDone, nil
	}
	if task == "" {
		// slurmstepd's cgroup, where a batch script also starts: ask
		// again at the next full rescan.
		return source.AttachRetry, nil
	}
	mnt, v1 := "", version == 1
	switch {
	case version == 2:
		mnt = v2Mount(s.root)
	case v1 && s.v1 != "":
		mnt = filepath.Join(s.root, s.v1)
	default:
		return source.AttachDone, nil
	}
	abs := existing(filepath.Join(mnt, task), filepath.Join(mnt, job))
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.jobs[abs]; ok {
		return source.AttachDone, nil
	}
	id, err := cgroupID(abs)
	if err != nil {
		return source.AttachDone, err
	}
	group, ok := s.groups[job]
	if !ok {
		if s.lastGroup++; s.lastGroup == 0 {
			s.lastGroup++
		}
		group = s.lastGroup
		s.groups[job] = group
	}
	if err := s.t.AddJob(id, v1, group); err != nil {
		return source.AttachRetry, err
	}
	s.jobs[abs] = jobEntry{id: id, v1: v1, job: job}
	s.m.jobs.Set(float64(len(s.jobs)))
	return source.AttachDone, nil
}

// ForgetProcess does nothing: jobs are dropped when their cgroup is gone.
func (s *Source) ForgetProcess(procfs.ID) {}

// dropEnded stops tracing the jobs whose cgroup directory is gone (or now
// another directory: a new job_<id> of a reused id is added again).
func (s *Source) dropEnded() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for dir, j := range s.jobs {
		if id, err := cgroupID(dir); err == nil && id == j.id {
			continue
		}
		delete(s.jobs, dir)
		if err := s.t.RemoveJob(j.id, j.v1); err != nil {
			errs = append(errs, err)
		}
	}
	// A job's group goes with its last task cgroup.
	live := map[string]bool{}
	for _, j := range s.jobs {
		live[j.job] = true
	}
	for job := range s.groups {
		if !live[job] {
			delete(s.groups, job)
		}
	}
	s.m.jobs.Set(float64(len(s.jobs)))
	return errors.Join(errs...)
}

// existing is dir, or where the hierarchy has no such directory (a v1
// controller without task directories) its nearest ancestor down to
// floor, the job's: there the job's slurmstepd is traced with its tasks.
func existing(dir, floor string) string {
	for d := dir; len(d) > len(floor); d = filepath.Dir(d) {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			return d
		}
	}
	return floor
}

// cgroupID is a cgroup directory's id: its inode number (kernfs gives a
// 64-bit cgroup id as the inode on 64-bit machines). Links are not
// followed: the directory is Slurm's, checked by the attribution.
func cgroupID(dir string) (uint64, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.IsDir() {
		return 0, fmt.Errorf("%s: not a cgroup directory", dir)
	}
	return st.Ino, nil
}

// v2Mount is the v2 hierarchy under root: root itself, or root/unified on
// a hybrid host.
func v2Mount(root string) string {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return root
	}
	return filepath.Join(root, "unified")
}

// v1Controllers are the v1 controllers Slurm's cgroups are looked for in,
// in order: proctrack/cgroup always makes the freezer's, of jobs and
// steps (not tasks: there a step's slurmstepd is traced with its tasks);
// task/cgroup makes memory's and cpuset's only where it constrains them.
var v1Controllers = []string{"freezer", "memory", "cpuset", "cpuacct"}

// v1Controller picks the v1 controller mounted under root at its own name,
// and its index in /proc/cgroups (the kernel's subsystem id); -1 when none.
func v1Controller(proc procfs.FS, root string) (string, int) {
	b, err := os.ReadFile(filepath.Join(proc.Root, "cgroups"))
	if err != nil {
		return "", -1
	}
	ids := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for i := 0; sc.Scan(); {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		ids[f[0]] = i
		i++
	}
	for _, c := range v1Controllers {
		id, ok := ids[c]
		if !ok || id >= maxSubsys {
			continue
		}
		// A v1 mount has no cgroup.controllers; a v2 one does.
		dir := filepath.Join(root, c)
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); errors.Is(err, fs.ErrNotExist) {
				return c, id
			}
		}
	}
	return "", -1
}

// schedEntry finds __schedule in kallsyms: [its address, the next
// symbol's). Zero when kallsyms is hidden or unreadable.
func schedEntry(proc procfs.FS) addrRange {
	f, err := os.Open(filepath.Join(proc.Root, "kallsyms"))
	if err != nil {
		return addrRange{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var r addrRange
	for sc.Scan() {
		var addr uint64
		var typ, name string
		if n, _ := fmt.Sscanf(sc.Text(), "%x %s %s", &addr, &typ, &name); n < 3 {
			continue
		}
		if r.start != 0 {
			if addr > r.start {
				r.end = addr
				return r
			}
			continue
		}
		if name == "__schedule" && addr != 0 {
			r.start = addr
		}
	}
	return addrRange{}
}

// Collectors are the source's own metrics.
func (s *Source) Collectors() []prometheus.Collector { return s.m.own() }

type metrics struct {
	switches     prometheus.Counter
	unattributed *prometheus.CounterVec
	notRecorded  *prometheus.CounterVec
	stacksLost   *prometheus.CounterVec
	jobs         prometheus.Gauge
}

func newMetrics() metrics {
	return metrics{
		switches:     promschema.Counter(schema.AgentOffCPUSwitches),
		unattributed: promschema.CounterVec(schema.AgentOffCPUSwitchesUnattributed),
		notRecorded:  promschema.CounterVec(schema.AgentOffCPUSwitchesNotRecorded),
		stacksLost:   promschema.CounterVec(schema.AgentOffCPUStacksLost),
		jobs:         promschema.Gauge(schema.AgentOffCPUCgroups),
	}
}

func (m metrics) own() []prometheus.Collector {
	return []prometheus.Collector{m.notRecorded, m.stacksLost, m.jobs}
}

func (m metrics) observe(prev, cur Stats) {
	add := func(v *prometheus.CounterVec, reason string, p, c uint64) {
		if c > p {
			v.WithLabelValues(reason).Add(float64(c - p))
		}
	}
	add(m.notRecorded, "sampled", prev.SampledOut, cur.SampledOut)
	add(m.notRecorded, "map_full", prev.LostMapFull, cur.LostMapFull)
	add(m.notRecorded, "share", prev.LostShare, cur.LostShare)
	add(m.notRecorded, "no_storage", prev.NoStorage, cur.NoStorage)
	add(m.stacksLost, "stack_error", prev.StackErrors, cur.StackErrors)
	add(m.stacksLost, "stack_map_full", prev.StackMapFull, cur.StackMapFull)
	add(m.stacksLost, "interpreter_stack_map_full", prev.InterpMapFull, cur.InterpMapFull)
	add(m.stacksLost, "evicted", prev.Missing, cur.Missing)
}

// Kind runs the off-CPU tracer (--offcpu-profiling, on by default).
type Kind struct {
	on   bool
	rate int
}

// Flags registers --offcpu-profiling and --offcpu-job-rate.
func (k *Kind) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&k.on, "offcpu-profiling", true, "profile where jobs' threads wait off the CPU (blocked, or runnable waiting for a CPU), with eBPF")
	fs.IntVar(&k.rate, "offcpu-job-rate", defaultJobRate, "switches off the CPU recorded per second per job before sampling (the rest are sampled, their time still counted)")
}

// Check validates the rate.
func (k *Kind) Check() error {
	if k.on && (k.rate < 1 || k.rate > 1000000) {
		return fmt.Errorf("--offcpu-job-rate %d out of range 1..1000000", k.rate)
	}
	return nil
}

// Open loads and attaches the tracer.
func (k *Kind) Open(env source.Env) (source.Source, error) {
	if !k.on {
		return nil, nil
	}
	root := env.CgroupRoot
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	v1, ssid := v1Controller(env.Proc, root)
	o := Options{JobRate: k.rate, ExcludePID: env.ExcludePID, V1Subsys: ssid}
	if env.Stacks != nil {
		o.Stacks = env.Stacks
		o.NewInterp = func(pid uint32, startNs uint64, raw *bpf.InterpStack) { env.Stacks.Resolve(pid, startNs, raw) }
	}
	t, err := New(o)
	if err != nil {
		// The CPU sampler says so when it is privileges; this is most
		// likely a kernel before 5.15: profile the rest.
		env.Log.Warn("no off-CPU profiles: the tracer did not start (it needs Linux 5.15 or later; --offcpu-profiling=false turns it off)", "err", err)
		return nil, nil
	}
	src := &closingSource{Source: NewSource(t, env.Stacks, env.TaskCgroup, root, v1), t: t}
	src.trim = schedEntry(env.Proc)
	env.Reg.MustRegister(src.Collectors()...)
	env.Reg.MustRegister(ProgramMetrics(t.ProgramStats)...)
	env.Log.Info("tracing off-CPU time", "job_rate", k.rate, "v1_controller", v1)
	return src, nil
}

// ProgramMetrics exports the off-CPU program's run time and runs, as the
// kernel counts them.
func ProgramMetrics(stats func() (ns, runs uint64, ok bool)) []prometheus.Collector {
	return []prometheus.Collector{
		promschema.CounterFunc(schema.AgentOffCPUBPFRunTime, func() float64 { ns, _, _ := stats(); return float64(ns) / 1e9 }),
		promschema.CounterFunc(schema.AgentOffCPUBPFRuns, func() float64 { _, n, _ := stats(); return float64(n) }),
	}
}

type closingSource struct {
	*Source
	t *Tracer
}

func (c *closingSource) Close() error { return c.t.Close() }
