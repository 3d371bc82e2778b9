// Package offcpu profiles the time the threads of profiled jobs spend off
// the CPU, with the stacks they left it in: blocked (sleeping, on I/O, a
// futex, a socket) or runnable (preempted, waiting for a CPU), kept apart.
//
// One eBPF program on the sched_switch tracepoint (offcpu.bpf.c) decides
// per switch, from the task's cgroup, whether it is a profiled job's
// thread: the rest of the node pays a lookup. A job's thread switching out
// has its stacks captured (the same capture as the CPU sampler's,
// bpf/include/stack.h), and its time is counted when it switches back in.
// Above a rate of switches per job (Options.JobRate), switches are
// recorded with a probability set per 20 ms window and their time scaled,
// so that a job switching 100,000 times a second costs about what one at
// the rate does, and the totals stay right.
//
// Counts are drained in two generations, as agent/cpu's; stacks are kept
// in least-recently-used maps that outlive generations, because a thread
// that sleeps for minutes is counted when it wakes.
package offcpu

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Options configures a Tracer. Zero values select the defaults.
type Options struct {
	// JobRate is how many switches per second of one job are recorded
	// before sampling starts. Default 1000.
	JobRate int
	// MaxCountEntries is the number of distinct (process, stacks, state)
	// keys per generation; MaxStackEntries the stacks kept (kernel and
	// user, about 1 KiB each); MaxInterpStackEntries the interpreter
	// stacks (1.5 KiB each). A job may fill an eighth of each in a
	// generation. Defaults 16384, 16384, 4096.
	MaxCountEntries, MaxStackEntries, MaxInterpStackEntries int
	// V1Subsys is the index in /proc/cgroups of the cgroup v1 controller
	// whose hierarchy job cgroups are added from (AddJob with v1 true);
	// -1: v2 only.
	V1Subsys int
	// ExcludePID is a process not to trace, normally the agent itself.
	ExcludePID int
	// Stacks readies the program's stack capture (stackwalk.Walker); nil:
	// frame pointers only, no interpreter frames.
	Stacks Preparer
	// NewInterp, when set, is called with each interpreter stack new to
	// the program's map, while its process lives (see agent/cpu).
	NewInterp func(pid uint32, startNs uint64, raw *bpf.InterpStack)
}

// Preparer readies a program that includes stack.h (stackwalk.Walker).
type Preparer interface {
	Prepare(spec *ebpf.CollectionSpec) (consts map[string]any, maps map[string]*ebpf.Map, err error)
}

const (
	defaultJobRate = 1000
	defaultCounts  = 16384
	defaultStacks  = 16384
	defaultInterp  = 4096
	shares         = 8 // a job fills at most 1/shares of a map in a generation
	maxMapEntries  = 1 << 22
	interpNewBytes = 1 << 20
	endFrameLimit  = 1 // UNWIND_END_FRAME_LIMIT
	v1Key          = 1 << 63
	maxSubsys      = 16
	stateRunnable  = 1 // OFFCPU_RUNNABLE
)

// Sample is one distinct (process, stacks, state) and its switches since
// the previous Drain.
type Sample struct {
	Proc    procfs.ID
	Kernel  []uint64 // innermost first; nil when not captured
	User    []uint64
	Interp  *bpf.InterpStack // nil for none
	StartNs uint64           // the leader's start_boottime, for Resolve
	Setup   uint32
	// Runnable: preempted while runnable; else blocked.
	Runnable bool
	Switches uint64
	// Ns is the time off the CPU, scaled by the sampling.
	Ns uint64
}

// Stats are counters since New, through the latest Drain.
type Stats struct {
	// Switches: switch-outs of profiled jobs' threads; SampledOut of them
	// not recorded (above the rate), Captured recorded. Recorded: switch-
	// ins counted, which the drained samples add up to.
	Switches, SampledOut, Captured, Recorded uint64
	// Lost: captures or switch-ins dropped, by reason (map_full, share,
	// no_storage).
	LostMapFull, LostShare, NoStorage uint64
	// Stacks not kept (the switch counted without them): map full or an
	// error; and stacks a count referred to that were evicted (Missing).
	StackMapFull, StackErrors, InterpMapFull, InterpNewLost, Missing uint64
}

type generation struct {
	counts, quota, stats *ebpf.Map
}

// Tracer traces switches until Close. Its methods are safe for concurrent
// use.
type Tracer struct {
	mu        sync.Mutex
	objs      offcpuObjects
	gens      [2]generation
	flip      *bpf.Generations
	link      link.Link
	stats     Stats
	closed    bool
	jobsGen   uint32
	interpNew *ringbuf.Reader
	done      chan struct{}
}

// New loads the program and attaches it to sched_switch. It needs root
// (CAP_BPF and CAP_PERFMON), BTF and Linux 5.15 (task storage in tracing
// programs, bpf_task_pt_regs).
func New(o Options) (*Tracer, error) {
	if o.JobRate == 0 {
		o.JobRate = defaultJobRate
	}
	if o.MaxCountEntries == 0 {
		o.MaxCountEntries = defaultCounts
	}
	if o.MaxStackEntries == 0 {
		o.MaxStackEntries = defaultStacks
	}
	if o.MaxInterpStackEntries == 0 {
		o.MaxInterpStackEntries = defaultInterp
	}
	for _, n := range []int{o.JobRate, o.MaxCountEntries, o.MaxStackEntries, o.MaxInterpStackEntries} {
		if n < 1 || n > maxMapEntries {
			return nil, fmt.Errorf("off-CPU tracer: an option out of range 1..%d in %+v", maxMapEntries, o)
		}
	}
	if o.ExcludePID < 0 || o.V1Subsys >= maxSubsys {
		return nil, fmt.Errorf("off-CPU tracer: bad option in %+v", o)
	}
	spec, err := loadOffcpu()
	if err != nil {
		return nil, fmt.Errorf("off-CPU tracer: %w", err)
	}
	for name, n := range map[string]int{offcpuMapCounts0: o.MaxCountEntries, offcpuMapCounts1: o.MaxCountEntries,
		offcpuMapStacks: o.MaxStackEntries, offcpuMapInterpStacks: o.MaxInterpStackEntries} {
		spec.Maps[name].MaxEntries = uint32(n) // #nosec G115 -- checked above
	}
	spec.Maps[offcpuMapInterpNew].MaxEntries = interpNewBytes
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("off-CPU tracer: stack hash seed: %w", err)
	}
	v1 := ^uint32(0)
	if o.V1Subsys >= 0 {
		v1 = uint32(o.V1Subsys) // #nosec G115 -- checked above
	}
	consts := map[string]any{
		offcpuVarExcludeTgid:   uint32(o.ExcludePID), // #nosec G115 -- a pid is below pid_max
		offcpuVarStackHashSeed: binary.NativeEndian.Uint64(seed[:]),
		offcpuVarJobRate:       uint32(o.JobRate),                  // #nosec G115 -- checked above
		offcpuVarCountShare:    uint32(o.MaxCountEntries / shares), // #nosec G115 -- checked above
		offcpuVarStackShare:    uint32(o.MaxStackEntries / shares), // #nosec G115 -- checked above
		offcpuVarV1Subsys:      v1,
	}
	var shared map[string]*ebpf.Map
	if o.Stacks != nil {
		c, m, err := o.Stacks.Prepare(spec)
		if err != nil {
			return nil, fmt.Errorf("off-CPU tracer: %w", err)
		}
		for k, v := range c {
			consts[k] = v
		}
		shared = m
	}
	t := &Tracer{}
	if err := bpf.LoadWith(spec, consts, shared, &t.objs); err != nil {
		return nil, fmt.Errorf("off-CPU tracer: %w", err)
	}
	t.gens = [2]generation{
		{counts: t.objs.Counts0, quota: t.objs.Quota0, stats: t.objs.Stats0},
		{counts: t.objs.Counts1, quota: t.objs.Quota1, stats: t.objs.Stats1},
	}
	if t.flip, err = bpf.NewGenerations(t.objs.GenSwitch, t.objs.Gen0, t.objs.Gen1); err != nil {
		t.objs.Close()
		return nil, fmt.Errorf("off-CPU tracer: %w", err)
	}
	if o.NewInterp != nil {
		if t.interpNew, err = ringbuf.NewReader(t.objs.InterpNew); err != nil {
			t.objs.Close()
			return nil, fmt.Errorf("off-CPU tracer: %w", err)
		}
		t.done = make(chan struct{})
		go t.readInterpNew(o.NewInterp)
	}
	if t.link, err = link.AttachTracing(link.TracingOptions{Program: t.objs.OnSwitch}); err != nil {
		t.Close()
		return nil, fmt.Errorf("off-CPU tracer: attach to sched_switch: %w", err)
	}
	return t, nil
}

// AddJob profiles the job whose cgroup directory has id cgroupID (its
// inode number), in the v1 hierarchy of Options.V1Subsys when v1, and every
// cgroup below it. group is the job's group for the shares (non-zero).
func (t *Tracer) AddJob(cgroupID uint64, v1 bool, group uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("off-CPU tracer: closed")
	}
	if v1 {
		cgroupID |= v1Key
	}
	if err := t.objs.Jobs.Update(cgroupID, offcpuOffcpuJob{Group: group}, ebpf.UpdateNoExist); err != nil {
		if errors.Is(err, ebpf.ErrKeyExist) {
			return nil
		}
		return fmt.Errorf("off-CPU tracer: add job cgroup %d: %w", cgroupID, err)
	}
	return t.bumpLocked()
}

// RemoveJob stops profiling a job's cgroup (it ended).
func (t *Tracer) RemoveJob(cgroupID uint64, v1 bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	if v1 {
		cgroupID |= v1Key
	}
	if err := t.objs.Jobs.Delete(cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("off-CPU tracer: remove job cgroup %d: %w", cgroupID, err)
	}
	return t.bumpLocked()
}

// bumpLocked makes the program check every cached cgroup verdict again.
func (t *Tracer) bumpLocked() error {
	t.jobsGen++
	return t.objs.JobsGen.Put(uint32(0), t.jobsGen)
}

// Drain returns the switches counted since the previous Drain and the
// counters since New.
func (t *Tracer) Drain() ([]Sample, Stats, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, Stats{}, errors.New("off-CPU tracer: closed")
	}
	i, err := t.flip.Flip()
	if err != nil {
		return nil, Stats{}, fmt.Errorf("off-CPU tracer: %w", err)
	}
	old := t.gens[i]
	samples, err := t.read(old)
	if err == nil {
		err = t.addStats(old)
	}
	if cerr := clear(old); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, Stats{}, fmt.Errorf("off-CPU tracer: %w", err)
	}
	return samples, t.stats, nil
}

func (t *Tracer) read(g generation) ([]Sample, error) {
	stacks := map[uint64][]uint64{}
	native := func(key uint64) []uint64 {
		if key == 0 {
			return nil
		}
		if st, ok := stacks[key]; ok {
			return st
		}
		var v bpf.UnwindStack
		if err := t.objs.Stacks.Lookup(key, &v); err != nil {
			t.stats.Missing++
			stacks[key] = nil
			return nil
		}
		n := min(int(v.Len), len(v.Ips))
		st := append([]uint64(nil), v.Ips[:n]...)
		stacks[key] = st
		return st
	}
	interps := map[uint64]*bpf.InterpStack{}
	interp := func(key uint64) *bpf.InterpStack {
		if key == 0 {
			return nil
		}
		if in, ok := interps[key]; ok {
			return in
		}
		in := new(bpf.InterpStack)
		if err := t.objs.InterpStacks.Lookup(key, in); err != nil {
			t.stats.Missing++
			in = nil
		}
		interps[key] = in
		return in
	}
	var out []Sample
	err := bpf.EachEntry(g.counts, false, func(k *offcpuCountKey, v *offcpuCountVal) {
		out = append(out, Sample{
			Proc:     procfs.ID{PID: int(k.Tgid), Start: procfs.StartFromBoottime(k.StartBoottimeNs)},
			Kernel:   native(k.KernelStack),
			User:     native(k.UserStack),
			Interp:   interp(k.InterpStack),
			StartNs:  k.StartBoottimeNs,
			Setup:    k.Setup,
			Runnable: k.State == stateRunnable,
			Switches: v.Switches,
			Ns:       v.Ns,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read counts: %w", err)
	}
	return out, nil
}

// clear empties a quiescent generation.
func clear(g generation) error {
	if err := bpf.EachEntry(g.counts, true, func(*offcpuCountKey, *offcpuCountVal) {}); err != nil {
		return fmt.Errorf("clear counts: %w", err)
	}
	if err := bpf.EachEntry(g.quota, true, func(*uint64, *uint32) {}); err != nil {
		return fmt.Errorf("clear quota: %w", err)
	}
	if err := bpf.ZeroPerCPU(g.stats, uint32(offcpuStatIndexSTAT_MAX)); err != nil {
		return fmt.Errorf("clear stats: %w", err)
	}
	return nil
}

func (t *Tracer) addStats(g generation) error {
	st := &t.stats
	fields := map[offcpuStatIndex]*uint64{
		offcpuStatIndexSTAT_SWITCHES:        &st.Switches,
		offcpuStatIndexSTAT_SAMPLED_OUT:     &st.SampledOut,
		offcpuStatIndexSTAT_CAPTURED:        &st.Captured,
		offcpuStatIndexSTAT_RECORDED:        &st.Recorded,
		offcpuStatIndexSTAT_LOST_MAP_FULL:   &st.LostMapFull,
		offcpuStatIndexSTAT_LOST_SHARE:      &st.LostShare,
		offcpuStatIndexSTAT_NO_STORAGE:      &st.NoStorage,
		offcpuStatIndexSTAT_INTERP_MAP_FULL: &st.InterpMapFull,
		offcpuStatIndexSTAT_INTERP_NEW_LOST: &st.InterpNewLost,
	}
	var perCPU []uint64
	for idx, dst := range fields {
		if err := g.stats.Lookup(uint32(idx), &perCPU); err != nil {
			return fmt.Errorf("read stats: %w", err)
		}
		*dst += bpf.SumPerCPU(perCPU)
	}
	for _, pair := range [][2]offcpuStatIndex{
		{offcpuStatIndexSTAT_KSTACK_MAP_FULL, offcpuStatIndexSTAT_USTACK_MAP_FULL},
		{offcpuStatIndexSTAT_KSTACK_ERROR, offcpuStatIndexSTAT_USTACK_ERROR},
	} {
		var n uint64
		for _, idx := range pair {
			if err := g.stats.Lookup(uint32(idx), &perCPU); err != nil {
				return fmt.Errorf("read stats: %w", err)
			}
			n += bpf.SumPerCPU(perCPU)
		}
		if pair[0] == offcpuStatIndexSTAT_KSTACK_MAP_FULL {
			st.StackMapFull += n
		} else {
			st.StackErrors += n
		}
	}
	return nil
}

func (t *Tracer) readInterpNew(fn func(pid uint32, startNs uint64, raw *bpf.InterpStack)) {
	defer close(t.done)
	bpf.ReadInterpNew(t.interpNew, fn)
}

// ProgramStats returns the program's run time and runs, as the kernel
// counts them while kernel.bpf_stats_enabled is 1.
func (t *Tracer) ProgramStats() (runNs, runCount uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, 0, false
	}
	return bpf.RunStats(t.objs.OnSwitch)
}

// Close detaches and unloads the program.
func (t *Tracer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	if t.link != nil {
		errs = append(errs, t.link.Close())
	}
	if t.interpNew != nil {
		errs = append(errs, t.interpNew.Close())
		<-t.done
	}
	errs = append(errs, t.objs.Close())
	return errors.Join(errs...)
}
