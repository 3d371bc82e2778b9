// Package cpu samples on-CPU stacks of every process on the node with an eBPF
// program on the software cpu-clock perf event, one event per online CPU.
//
// # Draining without races
//
// The program writes to one of two generations of maps (a counts hash and a
// stacks hash each); Drain flips it to the other (agent/bpf Generations)
// and reads and clears the quiescent one.
//
// Each generation has its own stacks map so that clearing stacks after a
// drain can never delete a stack that a not yet drained count still refers
// to.
//
// # Stacks
//
// The program keys each stack by a 64-bit hash of its frames that it
// computes itself, and stores the frames in a hash map under that key (see
// stack_hash in sampler.bpf.c). The kernel's STACK_TRACE map would fail
// for a stack whose hash bucket another stack holds, and every sample of
// that stack would lose its stack for the whole generation; a hash map
// only refuses a new stack when it is full, which Stats counts.
package cpu

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Options configures a Sampler. Zero values select the defaults.
type Options struct {
	// SampleRate is the sampling frequency per CPU in Hz. Default 97: not a
	// divisor of common timer rates, so samples do not lock step with
	// periodic work.
	SampleRate int
	// SysRoot is where sysfs is mounted. Default "/sys".
	SysRoot string
	// MaxStackEntries is the number of distinct stacks each generation can
	// hold (kernel and user stacks count separately). The kernel
	// preallocates it: each entry takes a little over 1 KiB, twice over for
	// the two generations. A sample whose stack finds the map full is still
	// counted, without that stack (Stats.KernelStackMapFull,
	// UserStackMapFull). Default: see MapSizes.
	MaxStackEntries int
	// MaxCountEntries is the number of distinct (process, kernel stack, user
	// stack) keys per generation. Default: see MapSizes.
	MaxCountEntries int
	// Interval is how often the maps are drained (the daemon's interval),
	// and CPUs how many CPUs are sampled, for the default map sizes; 0:
	// 15 s, and the CPUs online at New.
	Interval time.Duration
	CPUs     int
	// MaxInterpStackEntries is the number of distinct interpreter stacks
	// (per process) each generation can hold, preallocated like the
	// stacks, at 1.5 KiB each. A sample that finds the map full keeps its
	// native stack (Stats.InterpStackMapFull). Default 4096.
	MaxInterpStackEntries int
	// ExcludePID is a process (thread-group id) not to sample, normally the
	// agent itself. 0 excludes nothing.
	ExcludePID int
	// Stacks readies the program's user-stack capture (stack.h): the table
	// unwinder and the interpreter walks, with their shared maps. nil:
	// frame pointers only, no interpreter frames.
	Stacks Preparer
	// NewInterp, when set, is called from a goroutine of the sampler with
	// each interpreter stack that is new to its generation, as the program
	// stored it, so that what its frames name is read while the process
	// lives (the Walker's Resolve; the result is cached for the drain).
	NewInterp func(pid uint32, startNs uint64, raw *bpf.InterpStack)
}

// Preparer readies a program that includes stack.h (stackwalk.Walker).
type Preparer interface {
	Prepare(spec *ebpf.CollectionSpec) (consts map[string]any, maps map[string]*ebpf.Map, err error)
}

const (
	defaultSampleRate       = 97
	defaultInterval         = 15 * time.Second
	defaultMaxInterpEntries = 4096
	// interpShares: one job group may fill at most 1/interpShares of the
	// interpreter stacks map in a generation.
	interpShares = 8
	// stackDepth is the most frames of a stack (struct unwind_stack in
	// unwind.h): the default of kernel.perf_event_max_stack.
	stackDepth = 127
	// endFrameLimit is UNWIND_END_FRAME_LIMIT: a stack cut at stackDepth.
	endFrameLimit  = 1
	interpNewBytes = 1 << 20 // the interp_new ring buffer: over 600 new stacks between reads
)

// Bounds of the map sizes MapSizes picks. The maps are shared by every job
// on the node and preallocated by the kernel (charged to the agent's
// memory cgroup): a counts entry is about 100 bytes, a stacks entry about
// 1.1 KiB, twice over for the two generations. At the caps that is 50 MiB
// and 140 MiB. The interpreter stacks map keeps MaxInterpStackEntries (one
// interpreter stack, 1.5 KiB, is worth a stacks entry and a half); when it
// is full, slurmscope_agent_cpu_maps_full_total says so too.
const (
	minMapEntries       = 16384
	maxCountEntriesAuto = 1 << 18
	maxStackEntriesAuto = 1 << 16
)

// MapSizes returns the counts and stacks map sizes for cpus CPUs sampled
// at rate Hz and drained every interval: room for every sample of a
// generation to be a key of its own (a quarter more, for a drain that runs
// late), so that one job's many distinct stacks cannot fill the maps and
// drop the other jobs' samples until the next drain. Within the bounds
// above; past them, Stats and slurmscope_agent_cpu_maps_full_total say
// which job filled them.
func MapSizes(cpus, rate int, interval time.Duration) (counts, stacks int) {
	perGen := float64(cpus) * float64(rate) * interval.Seconds() * 1.25
	n := int(min(perGen, float64(maxCountEntriesAuto)))
	counts = min(max(n, minMapEntries), maxCountEntriesAuto)
	stacks = min(max(n, minMapEntries), maxStackEntriesAuto)
	return counts, stacks
}

// maxMapEntries bounds a map size set in Options: a BPF map's size is a
// u32, and far below that the kernel refuses the memory anyway.
const maxMapEntries = 1 << 24

// ErrHotplug marks a Drain that could not follow CPU hotplug; its samples
// are good.
var ErrHotplug = errors.New("following CPU hotplug")

// Sample is one distinct (process, kernel stack, user stack) and how many
// times it was seen since the previous Drain.
type Sample struct {
	// Proc is the thread-group leader's, so that a sample names one process
	// even when pids are reused.
	Proc procfs.ID
	// Comm is the thread-group leader's name when the key was first seen.
	Comm string
	// Kernel and User are instruction addresses, innermost first; nil when
	// the stack was not captured (a sample in user mode has no kernel stack,
	// a kernel thread no user stack). Samples may share these slices: treat
	// them as read only.
	Kernel []uint64
	User   []uint64
	// Interp is the sampled thread's interpreter frames as the program
	// captured them (name them with the Walker's Resolve); nil for none.
	// StartNs is the leader's start_boottime, which Resolve takes.
	Interp  *bpf.InterpStack
	StartNs uint64
	// Setup is what of the capture was set up for the process when the
	// sample was taken (bpf.Setup*).
	Setup uint32
	Count uint64
}

// Stats are counters since New, up to the latest Drain; they only grow.
// They are exact: the BPF side counts every event in per-CPU counters of the
// same generation as the samples, and Drain adds a generation's counters
// when it drains its samples.
type Stats struct {
	// Samples counted into the maps. The samples a Drain returns add up to
	// the growth of Samples since the previous Drain.
	Samples uint64
	// LostMapFull counts samples dropped because the counts map was full.
	LostMapFull uint64
	// LostStackErrors is the sum of the four stack counters below: samples
	// that were counted but miss a stack they should have.
	LostStackErrors uint64
	// Kernel/User stack map full: the stack was new and the generation's
	// stacks map had no room for it (Options.MaxStackEntries). Errors: any
	// other failure, e.g. an unreadable user stack (-EFAULT).
	KernelStackMapFull, KernelStackErrors uint64
	UserStackMapFull, UserStackErrors     uint64
	// TruncatedStacks counts drained stacks that filled all 127 frames and
	// were probably cut by the kernel; they are returned as they are (the
	// innermost frames).
	TruncatedStacks uint64
	// MissingStacks counts stack keys a count referred to that the stacks
	// map did not hold. It stays 0 unless something else deletes stacks.
	MissingStacks uint64
	// SkippedSelf counts samples of Options.ExcludePID.
	SkippedSelf uint64
	// InterpWalks counts the interpreter walks by outcome (indexed by
	// bpf.InterpStatus); InterpStackMapFull the interpreter stacks not
	// kept for a full map, InterpNewLost those not announced to NewInterp
	// (ring buffer full).
	InterpWalks                       [bpf.InterpStatusMax]uint64
	InterpStackMapFull, InterpNewLost uint64
	// InterpShare counts interpreter stacks not kept because their job
	// group had its share of the map (an eighth of it) in the generation:
	// the samples keep their native stacks.
	InterpShare uint64
	// AttachedCPUs is the number of CPUs sampled right now.
	AttachedCPUs int
	// CPUAttaches, CPUDetaches and CPUReattaches count hotplug events
	// followed; AttachErrors counts failed attempts (retried next Drain).
	CPUAttaches, CPUDetaches, CPUReattaches, AttachErrors uint64
}

// generation is one set of maps the program can write to.
type generation struct {
	counts *ebpf.Map
	stacks *ebpf.Map
	interp *ebpf.Map
	quota  *ebpf.Map // each job group's count of new interpreter stacks
	stats  *ebpf.Map
}

// Sampler samples stacks until Close. Its methods are safe for concurrent
// use.
type Sampler struct {
	mu      sync.Mutex
	sysRoot string
	objs    samplerObjects
	gens    [2]generation
	flip    *bpf.Generations
	cpus    *cpuSet
	stats   Stats // totals through the last drained generation
	closed  bool
	// hashSeed is the program's stack_hash_seed, for tests.
	hashSeed uint64
	// The map sizes chosen, per generation.
	countEntries, stackEntries int
	interpNew                  *ringbuf.Reader
	interpDone                 chan struct{}
}

// MapEntries returns the sizes of the counts and stacks maps, per
// generation.
func (s *Sampler) MapEntries() (counts, stacks int) { return s.countEntries, s.stackEntries }

// New loads the program and attaches it on every online CPU. It needs
// CAP_BPF and CAP_PERFMON (or root).
func New(opts Options) (*Sampler, error) {
	if opts.SampleRate == 0 {
		opts.SampleRate = defaultSampleRate
	}
	if opts.SysRoot == "" {
		opts.SysRoot = "/sys"
	}
	if opts.MaxStackEntries > maxMapEntries || opts.MaxCountEntries > maxMapEntries || opts.MaxInterpStackEntries > maxMapEntries {
		return nil, fmt.Errorf("cpu sampler: a map of more than %d entries in %+v", maxMapEntries, opts)
	}
	if opts.SampleRate < 0 || opts.MaxStackEntries < 0 || opts.MaxCountEntries < 0 || opts.MaxInterpStackEntries < 0 ||
		opts.ExcludePID < 0 || opts.Interval < 0 || opts.CPUs < 0 {
		return nil, fmt.Errorf("cpu sampler: negative option in %+v", opts)
	}
	if opts.Interval == 0 {
		opts.Interval = defaultInterval
	}
	if opts.CPUs == 0 {
		online, err := readOnlineCPUs(opts.SysRoot)
		if err != nil {
			return nil, fmt.Errorf("cpu sampler: %w", err)
		}
		opts.CPUs = len(online)
	}
	counts, stacks := MapSizes(opts.CPUs, opts.SampleRate, opts.Interval)
	if opts.MaxStackEntries == 0 {
		opts.MaxStackEntries = stacks
	}
	if opts.MaxCountEntries == 0 {
		opts.MaxCountEntries = counts
	}
	if opts.MaxInterpStackEntries == 0 {
		opts.MaxInterpStackEntries = defaultMaxInterpEntries
	}

	spec, err := loadSampler()
	if err != nil {
		return nil, fmt.Errorf("cpu sampler: %w", err)
	}
	for _, name := range []string{samplerMapCounts0, samplerMapCounts1} {
		spec.Maps[name].MaxEntries = uint32(opts.MaxCountEntries) // #nosec G115 -- at most maxMapEntries (checked above)
	}
	for _, name := range []string{samplerMapStacks0, samplerMapStacks1} {
		spec.Maps[name].MaxEntries = uint32(opts.MaxStackEntries) // #nosec G115 -- at most maxMapEntries (checked above)
	}
	for _, name := range []string{samplerMapInterpStacks0, samplerMapInterpStacks1} {
		spec.Maps[name].MaxEntries = uint32(opts.MaxInterpStackEntries) // #nosec G115 -- at most maxMapEntries (checked above)
	}
	spec.Maps[samplerMapInterpNew].MaxEntries = interpNewBytes
	// A secret seed per load: no process can predict the key of any stack,
	// so none can craft user stack frames that collide with another's.
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("cpu sampler: stack hash seed: %w", err)
	}
	hashSeed := binary.NativeEndian.Uint64(seed[:])

	s := &Sampler{sysRoot: opts.SysRoot, hashSeed: hashSeed, countEntries: opts.MaxCountEntries, stackEntries: opts.MaxStackEntries}
	consts := map[string]any{samplerVarExcludeTgid: uint32(opts.ExcludePID), samplerVarStackHashSeed: hashSeed, // #nosec G115 -- a pid is below pid_max (at most 2^22)
		samplerVarInterpShare: uint32(opts.MaxInterpStackEntries / interpShares)} // #nosec G115 -- at most maxMapEntries
	var shared map[string]*ebpf.Map
	if opts.Stacks != nil {
		c, m, err := opts.Stacks.Prepare(spec)
		if err != nil {
			return nil, fmt.Errorf("cpu sampler: %w", err)
		}
		for k, v := range c {
			consts[k] = v
		}
		shared = m
	}
	if err := bpf.LoadWith(spec, consts, shared, &s.objs); err != nil {
		return nil, fmt.Errorf("cpu sampler: %w", err)
	}
	s.gens = [2]generation{
		{counts: s.objs.Counts0, stacks: s.objs.Stacks0, interp: s.objs.InterpStacks0, quota: s.objs.InterpQuota0, stats: s.objs.Stats0},
		{counts: s.objs.Counts1, stacks: s.objs.Stacks1, interp: s.objs.InterpStacks1, quota: s.objs.InterpQuota1, stats: s.objs.Stats1},
	}
	if s.flip, err = bpf.NewGenerations(s.objs.GenSwitch, s.objs.Gen0, s.objs.Gen1); err != nil {
		s.objs.Close()
		return nil, fmt.Errorf("cpu sampler: %w", err)
	}

	if opts.NewInterp != nil {
		if s.interpNew, err = ringbuf.NewReader(s.objs.InterpNew); err != nil {
			s.objs.Close()
			return nil, fmt.Errorf("cpu sampler: %w", err)
		}
		s.interpDone = make(chan struct{})
		go s.readInterpNew(opts.NewInterp)
	}
	s.cpus = newCPUSet(perfAttacher{progFD: s.objs.SampleCpu.FD(), hz: uint64(opts.SampleRate)})
	if err := s.syncCPUs(); err != nil && len(s.cpus.cpus) == 0 {
		s.Close()
		return nil, fmt.Errorf("cpu sampler: %w", err)
	}
	// A partial attach (some CPUs failed) is not fatal; Drain retries and
	// Stats.AttachErrors shows it.
	return s, nil
}

func (s *Sampler) syncCPUs() error {
	online, err := readOnlineCPUs(s.sysRoot)
	if err != nil {
		return fmt.Errorf("read online cpus: %w", err)
	}
	res, err := s.cpus.sync(online)
	s.stats.CPUAttaches += uint64(res.Attached)      // #nosec G115 -- counts of CPUs, not negative
	s.stats.CPUDetaches += uint64(res.Detached)      // #nosec G115 -- as above
	s.stats.CPUReattaches += uint64(res.Reattached)  // #nosec G115 -- as above
	s.stats.AttachErrors += uint64(res.AttachErrors) // #nosec G115 -- as above
	return err
}

// Drain returns the samples counted since the previous Drain (or New) and
// clears them, together with the counters since New. It also follows CPU
// hotplug. A process that exited in the meantime is still returned: only
// the maps are read, never /proc.
//
// An error from following hotplug does not stop the drain; it is returned
// with the samples, wrapping ErrHotplug. Any other error returns no
// samples, and they are lost.
func (s *Sampler) Drain() ([]Sample, Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, Stats{}, errors.New("cpu sampler: closed")
	}
	hotplugErr := s.syncCPUs()

	i, err := s.flip.Flip()
	if err != nil {
		return nil, Stats{}, fmt.Errorf("cpu sampler: %w", err)
	}
	old := s.gens[i]

	samples, err := s.readGeneration(old)
	if err == nil {
		err = s.addStats(old)
	}
	// Clear even after a failed read: otherwise a bad generation would fill
	// up and stay full.
	if cerr := clearGeneration(old); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, Stats{}, fmt.Errorf("cpu sampler: %w", err)
	}
	if hotplugErr != nil {
		hotplugErr = fmt.Errorf("cpu sampler: %w: %w", ErrHotplug, hotplugErr)
	}
	st := s.stats
	st.AttachedCPUs = len(s.cpus.cpus)
	return samples, st, hotplugErr
}

// readInterpNew hands each new interpreter stack to fn until the sampler
// closes. At the default priority, unlike the table loaders (agent/prio):
// a raised goroutine is locked to its thread, and handing it its thread at
// every new stack cost a fifth of the agent's CPU with 32 busy Python
// processes (steady 0.52-0.59% raised, 0.43% not; go run
// ./tools/bench/agent --load python --procs 32). A short process's code
// objects are still read within milliseconds of its first samples, and
// forked siblings share them through their parent.
func (s *Sampler) readInterpNew(fn func(pid uint32, startNs uint64, raw *bpf.InterpStack)) {
	defer close(s.interpDone)
	bpf.ReadInterpNew(s.interpNew, fn)
}

func (s *Sampler) readGeneration(g generation) ([]Sample, error) {
	stacks, truncated, err := readStacks(g.stacks)
	if err != nil {
		return nil, err
	}
	s.stats.TruncatedStacks += truncated
	interps, err := readInterpStacks(g.interp)
	if err != nil {
		return nil, err
	}

	lookup := func(key uint64) []uint64 {
		if key == 0 { // no stack
			return nil
		}
		st, ok := stacks[key]
		if !ok {
			s.stats.MissingStacks++
		}
		return st
	}

	var samples []Sample
	err = bpf.EachEntry(g.counts, false, func(key *samplerCountKey, val *samplerCountVal) {
		smp := Sample{
			Proc:    procfs.ID{PID: int(key.Tgid), Start: procfs.StartFromBoottime(key.StartBoottimeNs)},
			Comm:    commString(val.Comm),
			Kernel:  lookup(key.KernelStack),
			User:    lookup(key.UserStack),
			StartNs: key.StartBoottimeNs,
			Setup:   key.Setup,
			Count:   val.Count,
		}
		if key.InterpStack != 0 {
			if smp.Interp = interps[key.InterpStack]; smp.Interp == nil {
				s.stats.MissingStacks++
			}
		}
		samples = append(samples, smp)
	})
	if err != nil {
		return nil, fmt.Errorf("read counts: %w", err)
	}
	return samples, nil
}

// readStacks reads a stacks map: frames by key, and how many stacks were
// cut at stackDepth frames.
func readStacks(m *ebpf.Map) (map[uint64][]uint64, uint64, error) {
	stacks := make(map[uint64][]uint64)
	var truncated uint64
	err := bpf.EachEntry(m, false, func(key *uint64, st *bpf.UnwindStack) {
		frames, trunc := stackFrames(st)
		if trunc {
			truncated++
		}
		stacks[*key] = frames
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read stacks: %w", err)
	}
	return stacks, truncated, nil
}

// readInterpStacks reads an interp_stacks map.
func readInterpStacks(m *ebpf.Map) (map[uint64]*bpf.InterpStack, error) {
	out := make(map[uint64]*bpf.InterpStack)
	err := bpf.EachEntry(m, false, func(key *uint64, raw *bpf.InterpStack) {
		c := *raw // the batch buffer is reused
		out[*key] = &c
	})
	if err != nil {
		return nil, fmt.Errorf("read interpreter stacks: %w", err)
	}
	return out, nil
}

// clearGeneration empties a quiescent generation. Deleting every stack, not
// only those the counts refer to, also frees stacks whose count was lost to
// a full counts map; left behind they would fill the stacks map for good.
func clearGeneration(g generation) error {
	if err := bpf.EachEntry(g.counts, true, func(*samplerCountKey, *samplerCountVal) {}); err != nil {
		return fmt.Errorf("clear %s: %w", g.counts, err)
	}
	if err := bpf.EachEntry(g.stacks, true, func(*uint64, *bpf.UnwindStack) {}); err != nil {
		return fmt.Errorf("clear %s: %w", g.stacks, err)
	}
	if err := bpf.EachEntry(g.interp, true, func(*uint64, *bpf.InterpStack) {}); err != nil {
		return fmt.Errorf("clear %s: %w", g.interp, err)
	}
	if err := bpf.EachEntry(g.quota, true, func(*uint32, *uint32) {}); err != nil {
		return fmt.Errorf("clear %s: %w", g.quota, err)
	}
	if err := bpf.ZeroPerCPU(g.stats, uint32(samplerStatIndexSTAT_MAX)); err != nil {
		return fmt.Errorf("clear stats: %w", err)
	}
	return nil
}

// addStats adds the counters of a drained generation to the totals. The
// generation's counters are zeroed by clearGeneration.
func (s *Sampler) addStats(g generation) error {
	st := &s.stats
	fields := map[samplerStatIndex]*uint64{
		samplerStatIndexSTAT_SAMPLES:         &st.Samples,
		samplerStatIndexSTAT_LOST_MAP_FULL:   &st.LostMapFull,
		samplerStatIndexSTAT_KSTACK_MAP_FULL: &st.KernelStackMapFull,
		samplerStatIndexSTAT_KSTACK_ERROR:    &st.KernelStackErrors,
		samplerStatIndexSTAT_USTACK_MAP_FULL: &st.UserStackMapFull,
		samplerStatIndexSTAT_USTACK_ERROR:    &st.UserStackErrors,
		samplerStatIndexSTAT_SKIPPED_SELF:    &st.SkippedSelf,
	}
	fields[samplerStatIndexSTAT_INTERP_MAP_FULL] = &st.InterpStackMapFull
	fields[samplerStatIndexSTAT_INTERP_NEW_LOST] = &st.InterpNewLost
	fields[samplerStatIndexSTAT_INTERP_SHARE] = &st.InterpShare
	for i := range st.InterpWalks {
		fields[samplerStatIndexSTAT_INTERP_STATUS+samplerStatIndex(i)] = &st.InterpWalks[i] // #nosec G115 -- i indexes a short fixed array
	}
	var perCPU []uint64
	for idx, dst := range fields {
		if err := g.stats.Lookup(uint32(idx), &perCPU); err != nil {
			return fmt.Errorf("read stats: %w", err)
		}
		*dst += bpf.SumPerCPU(perCPU)
	}
	st.LostStackErrors = st.KernelStackMapFull + st.KernelStackErrors + st.UserStackMapFull + st.UserStackErrors
	return nil
}

// ProgramStats returns the BPF program's cumulative run time and run count,
// which the kernel collects only while kernel.bpf_stats_enabled is 1 (or a
// BPF_ENABLE_STATS fd is open). ok is false when there is nothing to report.
// runNs / runCount is the cost of one sample.
func (s *Sampler) ProgramStats() (runNs, runCount uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, 0, false
	}
	return bpf.RunStats(s.objs.SampleCpu)
}

// Close detaches from every CPU and unloads the program. Undrained samples
// are discarded.
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.cpus != nil {
		errs = append(errs, s.cpus.closeAll())
	}
	if s.interpNew != nil {
		errs = append(errs, s.interpNew.Close())
		<-s.interpDone
	}
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}
