package gputrace

import (
	"cmp"
	"container/list"
	"encoding/binary"
	"math/bits"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// The joiner matches launch events (stack, correlation id) with completed
// kernel records (correlation id, GPU time) per process, and aggregates GPU
// time per (stack, kernel, device) for the interval. It is pure logic: no
// BPF, no /proc, time passed in, so that every rule below is unit tested.
//
// Rules:
//   - Identity is the procfs.ID from the kernel (tgid and start time). Correlation ids, name
//     ids and everything else are only looked up within that process, so
//     one process cannot touch another's state, and a reused pid starts
//     afresh.
//   - Every record's GPU time is counted exactly once, whatever happens to
//     its launch. A record whose launch was not sampled (or whose launch
//     event was lost, evicted or timed out) is "unsampled"; at Drain its
//     time is spread over the stacks sampled for the same kernel name in the
//     same process and interval, in proportion, with integer arithmetic and
//     deterministic remainders, so per-kernel totals stay exact. With no
//     sampled stack it goes under UnsampledFrame.
//   - State is bounded: pending launches and held records per process and
//     in total, names per process and name bytes in total, processes. When a
//     bound is hit the oldest entry goes first and a counter says so.
//   - What a process makes the joiner hold (its launches, names and the
//     interval's aggregate rows) is charged to its job's share of the
//     memory budget, so that a job forging records (the marker functions
//     are exported: any process that loads the library can call them) can
//     exhaust only its own share. Past it, new launches and names are
//     dropped, and records that would open a new row are folded into one
//     row per (process, device) under OverBudgetFrame: the GPU time stays
//     exact, its detail goes. Rows per process and interval are capped too
//     (maxRowsPerProcess), which bounds the cost of a drain.

// Charges, in bytes, of what a process makes the joiner hold. A row is
// charged for what it costs downstream too (its sample, and its share of
// the profile the daemon builds), not only for its map entry.
const (
	procBytes    = 1024
	rowBytes     = 512
	launchBytes  = 160 // plus 8 per frame of its stack
	pyFrameBytes = 48  // an interpreter frame, besides its names
	nameBytes    = 64  // plus the name, raw and demangled
	chargeStep   = 64 << 10
	// maxRowsPerProcess caps one process's rows in an interval, and with
	// them the work of a drain, which every job's interval waits for; a
	// real trainer has hundreds (kernels x sampled call sites x devices).
	maxRowsPerProcess = 4096
)

// OverBudgetFrame is the leaf under which GPU time is put that could not
// get a row of its own: its process's job had used its memory share, or
// the process its row cap.
const OverBudgetFrame = "[gpu time over the memory budget]"

// UntracedFrame is the frame of the wall time during which a process's GPU
// kernels went untraced because the injection library stepped aside for the
// process's own CUPTI client (torch.profiler, Nsight's CUPTI mode): a gap
// in the GPU profile that says why.
const UntracedFrame = "[gpu tracing stepped aside for the job's own CUPTI profiler]"

type limits struct {
	maxProcesses          int
	maxLaunches           int // pending launches, all processes
	maxLaunchesPerProcess int
	maxHeld               int // held records, all processes
	maxNamesPerProcess    int
	maxNameBytes          int // all processes
	launchTimeout         time.Duration
	recordGrace           time.Duration
	// budget and owner charge each process's state to its job; nil
	// budget: nothing is charged.
	budget *budget.Budget
	owner  func(procfs.ID) string
}

type stackID uint32

const noStack stackID = 0

// stackTable interns stacks with reference counts; id 0 is "no stack".
type stackTable struct {
	ids   map[string]stackID
	slots []stackSlot // index = id
	free  []stackID
}

type stackSlot struct {
	key    string
	frames []uint64
	interp interp.Stack // the launching thread's interpreter frames, if any
	setup  uint32       // what of the capture was set up (bpf.Setup*)
	refs   int
}

func newStackTable() *stackTable {
	return &stackTable{ids: map[string]stackID{}, slots: make([]stackSlot, 1)}
}

func (t *stackTable) intern(frames []uint64, in interp.Stack, setup uint32) stackID {
	if len(frames) == 0 {
		return noStack
	}
	buf := make([]byte, 8*len(frames), 8*len(frames)+2)
	for i, pc := range frames {
		binary.LittleEndian.PutUint64(buf[8*i:], pc)
	}
	buf = append(buf, byte(setup)) // #nosec G115 -- two flag bits
	// The interpreter frames are part of the stack's identity: one native
	// stack (the eval loop) runs many interpreted ones.
	if len(in.Frames) > 0 {
		buf = append(buf, 0xff)
		if in.Truncated {
			buf = append(buf, 1)
		}
		for _, f := range in.Frames {
			buf = binary.AppendUvarint(buf, uint64(len(f.Function)))
			buf = append(buf, f.Function...)
			buf = binary.AppendUvarint(buf, uint64(len(f.File)))
			buf = append(buf, f.File...)
			buf = binary.AppendVarint(buf, int64(f.Line))
			if f.Entry {
				buf = append(buf, 1)
			} else {
				buf = append(buf, 0)
			}
		}
	}
	// So are its root frames (the thread's open NVTX ranges): one stack
	// launches under many ranges.
	if len(in.Root) > 0 {
		buf = append(buf, 0xfe)
		for _, f := range in.Root {
			buf = binary.AppendUvarint(buf, uint64(len(f.Function)))
			buf = append(buf, f.Function...)
			buf = binary.AppendUvarint(buf, uint64(len(f.Module)))
			buf = append(buf, f.Module...)
		}
	}
	key := string(buf)
	if id, ok := t.ids[key]; ok {
		t.slots[id].refs++
		return id
	}
	in.Frames = slices.Clone(in.Frames)
	in.Root = slices.Clone(in.Root)
	s := stackSlot{key: key, frames: slices.Clone(frames), interp: in, setup: setup, refs: 1}
	var id stackID
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
		t.slots[id] = s
	} else {
		id = stackID(len(t.slots)) // #nosec G115 -- the slots are bounded by the budget, far below 2^32
		t.slots = append(t.slots, s)
	}
	t.ids[key] = id
	return id
}

func (t *stackTable) ref(id stackID) {
	if id != noStack {
		t.slots[id].refs++
	}
}

func (t *stackTable) unref(id stackID) {
	if id == noStack {
		return
	}
	s := &t.slots[id]
	if s.refs--; s.refs == 0 {
		delete(t.ids, s.key)
		*s = stackSlot{}
		t.free = append(t.free, id)
	}
}

func (t *stackTable) frames(id stackID) []uint64 { return t.slots[id].frames }
func (t *stackTable) interp(id stackID) (interp.Stack, uint32) {
	return t.slots[id].interp, t.slots[id].setup
}
func (t *stackTable) key(id stackID) string { return t.slots[id].key }
func (t *stackTable) live() int             { return len(t.ids) }

type pendingLaunch struct {
	proc   *procState
	cid    uint64
	bytes  int64 // charged
	stack  stackID
	flags  uint32
	alias  uint64 // correlation id of the enclosing/nested launch, 0 if none
	at     time.Time
	global *list.Element // in joiner.launches
	local  *list.Element // in procState.order
}

type heldRecord struct {
	proc *procState
	rec  kernelRecord
	at   time.Time
	elem *list.Element
}

// sampleKey identifies one output row of a process.
type sampleKey struct {
	stack  stackID // noStack: unsampled
	nameID uint64
	device uint32
	gi     uint32
	folded bool // the row of time over the budget (nameID and stack 0)
}

type sums struct{ ns, launches uint64 }

func (s *sums) add(ns, launches uint64) {
	s.ns = satAdd(s.ns, ns)
	s.launches = satAdd(s.launches, launches)
}

func satAdd(a, b uint64) uint64 {
	if s, c := bits.Add64(a, b, 0); c == 0 {
		return s
	}
	return ^uint64(0)
}

type procState struct {
	key       procfs.ID
	names     map[uint64]kernelName
	nameBytes int
	launches  map[uint64]*pendingLaunch
	order     *list.List               // of *pendingLaunch, oldest first
	held      map[uint64][]*heldRecord // sampled records waiting for their launch
	lastOuter map[uint32]uint64        // tid -> last non-nested launch, for aliasing
	agg       map[sampleKey]*sums
	active    bool // saw an event since the last drain
	lru       *list.Element
	// Its charge in the memory budget (nil: none, or refused), the bytes
	// it stands for, and those of agg.
	charge   *budget.Entry
	used     int64
	aggBytes int64
	// While the library stands aside for the process's own CUPTI client:
	// since when (CLOCK_MONOTONIC ns, 0: tracing), and the time aside not
	// yet drained.
	asideSince, asideNs uint64
}

type joinStats struct {
	Launches, Records, Names              uint64
	MatchedRecords, UnsampledRecords      uint64
	ExpiredLaunches, EvictedLaunches      uint64
	HeldRecords, ExpiredHeld, EvictedHeld uint64
	RejectedNames, DroppedNames           uint64
	EvictedProcesses, ExitedProcesses     uint64
	NoStackLaunches, TruncatedStacks      uint64
	// Over the budget: launches and names dropped, records folded into
	// their process's OverBudgetFrame row.
	OverBudgetLaunches, OverBudgetNames, FoldedRecords uint64
	StepAsides, Resumes                                uint64
}

type joiner struct {
	lim       limits
	procs     map[procfs.ID]*procState
	lru       *list.List // of *procState, least recently active first
	stacks    *stackTable
	launches  *list.List // of *pendingLaunch, oldest first
	heldList  *list.List // of *heldRecord, oldest first
	nameBytes int
	st        joinStats
	// mono is CLOCK_MONOTONIC in ns, the clock of state events; tests
	// replace it.
	mono func() uint64
}

func newJoiner(lim limits) *joiner {
	return &joiner{lim: lim, procs: map[procfs.ID]*procState{}, lru: list.New(),
		stacks: newStackTable(), launches: list.New(), heldList: list.New(), mono: monotonicNs}
}

// monotonicNs is CLOCK_MONOTONIC, bpf_ktime_get_ns's clock.
func monotonicNs() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0 // never on Linux; 0 adds no time
	}
	return uint64(ts.Nano()) // #nosec G115 -- a monotonic clock is positive
}

func (j *joiner) proc(k procfs.ID) *procState {
	p := j.procs[k]
	if p != nil {
		p.active = true
		j.lru.MoveToBack(p.lru)
		return p
	}
	for len(j.procs) >= j.lim.maxProcesses {
		j.st.EvictedProcesses++
		j.dropProc(j.lru.Front().Value.(*procState))
	}
	p = &procState{key: k, names: map[uint64]kernelName{}, launches: map[uint64]*pendingLaunch{},
		order: list.New(), held: map[uint64][]*heldRecord{}, lastOuter: map[uint32]uint64{},
		agg: map[sampleKey]*sums{}, active: true}
	if b := j.lim.budget; b != nil {
		owner := budget.Unknown
		if j.lim.owner != nil {
			owner = j.lim.owner(k)
		}
		// Refused (the job's share is full of what cannot be evicted): the
		// process is kept, with everything it brings folded.
		p.charge, _ = b.Charge(owner, budget.GPUAggregation, chargeStep, nil)
		p.used = procBytes
	}
	p.lru = j.lru.PushBack(p)
	j.procs[k] = p
	return p
}

// grow charges n more bytes to p's job, in steps of chargeStep; false when
// they do not fit (nothing is charged then). Without a budget everything
// fits.
func (j *joiner) grow(p *procState, n int64) bool {
	if j.lim.budget == nil {
		return true
	}
	if p.charge == nil {
		return false
	}
	if reserved := p.charge.Size(); p.used+n > reserved {
		if p.charge.Resize((p.used+n+chargeStep-1)/chargeStep*chargeStep) != nil {
			return false
		}
	}
	p.used += n
	return true
}

// shrink returns n bytes of p's charge.
func (j *joiner) shrink(p *procState, n int64) {
	if j.lim.budget == nil || p.charge == nil {
		return
	}
	p.used -= n
	if want := (p.used + chargeStep - 1) / chargeStep * chargeStep; p.charge.Size()-want >= 2*chargeStep {
		p.charge.Resize(want)
	}
}

// dropProc forgets a process with everything it still holds.
func (j *joiner) dropProc(p *procState) {
	for _, l := range p.launches {
		j.launches.Remove(l.global)
		j.stacks.unref(l.stack)
	}
	for _, hs := range p.held {
		for _, h := range hs {
			j.heldList.Remove(h.elem)
		}
	}
	for k := range p.agg {
		j.stacks.unref(k.stack)
	}
	j.nameBytes -= p.nameBytes
	j.lru.Remove(p.lru)
	delete(j.procs, p.key)
	p.charge.Release()
}

func (j *joiner) name(e nameEvent) {
	j.st.Names++
	p := j.proc(e.proc)
	if _, dup := p.names[e.nameID]; dup {
		return // announced again (library table full, or a race): first wins
	}
	n, ok := parseName(e.nameID, e.name, e.partial)
	if !ok {
		j.st.RejectedNames++
		return
	}
	size := len(n.raw) + len(n.demangled)
	if len(p.names) >= j.lim.maxNamesPerProcess || j.nameBytes+size > j.lim.maxNameBytes {
		j.st.DroppedNames++
		return
	}
	if !j.grow(p, int64(nameBytes+size)) {
		j.st.OverBudgetNames++
		return
	}
	p.names[e.nameID] = n
	p.nameBytes += size
	j.nameBytes += size
}

// state notes the library stepping aside for the process's own CUPTI
// client, or coming back. A repeated state (a hostile process can call the
// marker) changes nothing.
func (j *joiner) state(e stateEvent) {
	p := j.proc(e.proc)
	switch {
	case e.aside && p.asideSince == 0:
		j.st.StepAsides++
		p.asideSince = max(e.ktimeNs, 1)
	case !e.aside && p.asideSince != 0:
		j.st.Resumes++
		if e.ktimeNs > p.asideSince {
			p.asideNs += e.ktimeNs - p.asideSince
		}
		p.asideSince = 0
	}
}

// drainAside appends the time p's kernels went untraced since the last
// drain, up to now for a process still aside.
func (j *joiner) drainAside(out []Sample, p *procState) []Sample {
	if p.asideSince != 0 {
		if now := j.mono(); now > p.asideSince {
			p.asideNs += now - p.asideSince
			p.asideSince = now
		}
	}
	if p.asideNs == 0 {
		return out
	}
	out = append(out, Sample{Proc: p.key, Kernel: UntracedFrame, KernelRaw: UntracedFrame,
		Device: DeviceUnknown, GPUInstance: GPUInstanceNone, Untraced: p.asideNs})
	p.asideNs = 0
	return out
}

func (j *joiner) launch(e launchEvent, now time.Time) {
	j.st.Launches++
	if e.stackErr {
		j.st.NoStackLaunches++
	}
	if e.truncated {
		j.st.TruncatedStacks++
	}
	p := j.proc(e.proc)
	if old := p.launches[e.correlationID]; old != nil {
		// A correlation id reused while pending: only a broken or hostile
		// process does that. The newer launch wins.
		j.removeLaunch(old)
	}
	// The stack is charged as it is held: 8 bytes a native frame, and
	// the interpreter frames with their names and files.
	cost := int64(launchBytes + 8*len(e.stack))
	for _, f := range e.interp.Frames {
		cost += pyFrameBytes + int64(len(f.Function)+len(f.File))
	}
	for _, f := range e.interp.Root {
		cost += pyFrameBytes + int64(len(f.Function)+len(f.Module))
	}
	if !j.grow(p, cost) {
		// Over the job's share: the launch is not kept. Its records will
		// count as unsampled, or fold.
		j.st.OverBudgetLaunches++
		return
	}
	l := &pendingLaunch{proc: p, cid: e.correlationID, bytes: cost, stack: j.stacks.intern(e.stack, e.interp, e.setup), flags: e.flags, at: now}
	if e.flags&FlagNested != 0 {
		// Same call stack as the enclosing launch on this thread; the record
		// may carry either id, so matching one retires both.
		if outer, ok := p.lastOuter[e.tid]; ok {
			if o := p.launches[outer]; o != nil && o.alias == 0 {
				o.alias, l.alias = l.cid, outer
			}
		}
	} else {
		if len(p.lastOuter) >= j.lim.maxLaunchesPerProcess {
			clear(p.lastOuter) // a hint only; bounded by dropping it wholesale
		}
		p.lastOuter[e.tid] = e.correlationID
	}
	for p.order.Len() >= j.lim.maxLaunchesPerProcess {
		j.st.EvictedLaunches++
		j.removeLaunch(p.order.Front().Value.(*pendingLaunch))
	}
	for j.launches.Len() >= j.lim.maxLaunches {
		j.st.EvictedLaunches++
		j.removeLaunch(j.launches.Front().Value.(*pendingLaunch))
	}
	l.global = j.launches.PushBack(l)
	l.local = p.order.PushBack(l)
	p.launches[l.cid] = l

	// Records that arrived first (never in order from one ring buffer, but a
	// lost wakeup or a future per-CPU buffer must not cost exactness).
	if hs := p.held[l.cid]; hs != nil {
		delete(p.held, l.cid)
		for _, h := range hs {
			j.heldList.Remove(h.elem)
			j.matched(p, l, h.rec)
		}
	}
}

func (j *joiner) removeLaunch(l *pendingLaunch) {
	p := l.proc
	if p.launches[l.cid] != l {
		return
	}
	delete(p.launches, l.cid)
	p.order.Remove(l.local)
	j.launches.Remove(l.global)
	j.stacks.unref(l.stack)
	j.shrink(p, l.bytes)
	if l.alias != 0 {
		if a := p.launches[l.alias]; a != nil && a.alias == l.cid {
			a.alias = 0
		}
	}
}

func (j *joiner) records(h header, recs []kernelRecord, now time.Time) {
	p := j.proc(h.proc)
	for _, r := range recs {
		j.st.Records++
		l := p.launches[r.correlationID]
		switch {
		case l != nil:
			j.matched(p, l, r)
		case r.sampled:
			j.hold(p, r, now)
		default:
			j.unsampled(p, r)
		}
	}
}

// row returns p's aggregate row for k, opening it if p's job can afford
// it; otherwise the process's folded row of the same device.
func (j *joiner) row(p *procState, k sampleKey) *sums {
	if s := p.agg[k]; s != nil {
		return s
	}
	if len(p.agg) < maxRowsPerProcess && j.grow(p, rowBytes) {
		s := &sums{}
		p.agg[k] = s
		p.aggBytes += rowBytes
		j.stacks.ref(k.stack)
		return s
	}
	j.st.FoldedRecords++
	// One folded row per device and GPU instance: its bytes are the
	// process's base charge, bounded by the devices there are.
	fk := sampleKey{device: k.device, gi: k.gi, folded: true}
	s := p.agg[fk]
	if s == nil {
		s = &sums{}
		p.agg[fk] = s
	}
	return s
}

func (j *joiner) matched(p *procState, l *pendingLaunch, r kernelRecord) {
	j.st.MatchedRecords++
	k := sampleKey{stack: l.stack, nameID: r.nameID, device: r.device, gi: r.gpuInstance}
	j.row(p, k).add(r.duration(), 1)
	// Every kernel of a graph carries the graph launch's id: keep it until
	// it times out. Any other launch completes exactly once.
	if l.flags&FlagGraph == 0 {
		if l.alias != 0 {
			if a := p.launches[l.alias]; a != nil {
				j.removeLaunch(a)
			}
		}
		j.removeLaunch(l)
	}
}

func (j *joiner) unsampled(p *procState, r kernelRecord) {
	j.st.UnsampledRecords++
	k := sampleKey{stack: noStack, nameID: r.nameID, device: r.device, gi: r.gpuInstance}
	j.row(p, k).add(r.duration(), 1)
}

func (j *joiner) hold(p *procState, r kernelRecord, now time.Time) {
	j.st.HeldRecords++
	for j.heldList.Len() >= j.lim.maxHeld {
		j.st.EvictedHeld++
		j.releaseHeld(j.heldList.Front().Value.(*heldRecord))
	}
	h := &heldRecord{proc: p, rec: r, at: now}
	h.elem = j.heldList.PushBack(h)
	p.held[r.correlationID] = append(p.held[r.correlationID], h)
}

// releaseHeld gives up waiting for a record's launch: it counts unsampled.
func (j *joiner) releaseHeld(h *heldRecord) {
	p := h.proc
	j.heldList.Remove(h.elem)
	hs := p.held[h.rec.correlationID]
	if i := slices.Index(hs, h); i >= 0 {
		hs = slices.Delete(hs, i, i+1)
	}
	if len(hs) == 0 {
		delete(p.held, h.rec.correlationID)
	} else {
		p.held[h.rec.correlationID] = hs
	}
	j.unsampled(p, h.rec)
}

// expire applies the timeouts.
func (j *joiner) expire(now time.Time) {
	for e := j.heldList.Front(); e != nil; e = j.heldList.Front() {
		h := e.Value.(*heldRecord)
		if now.Sub(h.at) < j.lim.recordGrace {
			break
		}
		j.st.ExpiredHeld++
		j.releaseHeld(h)
	}
	for e := j.launches.Front(); e != nil; e = j.launches.Front() {
		l := e.Value.(*pendingLaunch)
		if now.Sub(l.at) < j.lim.launchTimeout {
			break
		}
		// Graph launches always end here; others whose kernel never
		// completed (or whose record was lost) too.
		if l.flags&FlagGraph == 0 {
			j.st.ExpiredLaunches++
		}
		j.removeLaunch(l)
	}
}

// Sample is the GPU time of one kernel launched from one stack in one
// process, since the previous Drain.
type Sample struct {
	Proc procfs.ID
	// User is the launching thread's user stack, innermost first (the first
	// frame is inside the injection library's launch marker). nil when
	// Unsampled. Samples may share the slice: treat it as read only.
	User []uint64
	// Interp are the launching thread's interpreter frames, for the
	// daemon to splice into User; Setup what of the capture was set up for
	// the process at the launch (bpf.Setup*).
	Interp interp.Stack
	Setup  uint32
	// Unsampled: no launch of this kernel (in this process and interval)
	// had its stack captured; put the time under UnsampledFrame.
	Unsampled bool
	// Kernel is the kernel's name, demangled, for the leaf frame;
	// KernelRaw the name as the process announced it. Both are printable
	// UTF-8. A name the agent never saw reads "[unknown kernel <id>]".
	Kernel, KernelRaw string
	// Device is the CUDA device ordinal the record names (DeviceUnknown if
	// none); GPUInstance the MIG GPU-instance id, GPUInstanceNone if none.
	Device, GPUInstance uint32
	// GPUTime is kernel execution time in ns; Launches the number of
	// kernels. Unsampled time is included in proportion, so both are
	// estimates per stack but exact per (process, kernel, device).
	GPUTime, Launches uint64
	// Untraced is wall time in ns during which the library stood aside
	// for the process's own CUPTI client, so that none of its kernels
	// was traced; such a sample has Kernel UntracedFrame and nothing else.
	Untraced uint64
}

// drain returns and clears the interval's aggregates. alive tells whether an
// idle process still runs; dead ones are forgotten.
func (j *joiner) drain(now time.Time, alive func(procfs.ID) bool) []Sample {
	j.expire(now)
	keys := make([]procfs.ID, 0, len(j.procs))
	for k := range j.procs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b procfs.ID) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Start, b.Start))
	})
	var out []Sample
	for _, k := range keys {
		p := j.procs[k]
		out = j.drainAside(out, p)
		out = j.drainProc(out, p)
		if !p.active && alive != nil && !alive(k) {
			// Its records were flushed at exit and read before this drain;
			// anything still held will never find its launch.
			for _, hs := range p.held {
				for _, h := range slices.Clone(hs) {
					j.releaseHeld(h)
				}
			}
			out = j.drainProc(out, p)
			j.st.ExitedProcesses++
			j.dropProc(p)
			continue
		}
		p.active = false
	}
	return out
}

func (j *joiner) drainProc(out []Sample, p *procState) []Sample {
	if len(p.agg) == 0 {
		return out
	}
	// Weights per kernel name: the sampled time and launches of each stack,
	// over all devices (a call site does not depend on the device).
	type weight struct {
		stack stackID
		sums
	}
	type stackOf struct {
		nameID uint64
		stack  stackID
	}
	weights := map[uint64][]weight{}
	index := map[stackOf]int{} // into weights[nameID]: no quadratic search
	rows := map[sampleKey]*sums{}
	for k, s := range p.agg {
		if k.stack == noStack {
			continue
		}
		ws := weights[k.nameID]
		i, ok := index[stackOf{k.nameID, k.stack}]
		if !ok {
			ws = append(ws, weight{stack: k.stack})
			i = len(ws) - 1
			index[stackOf{k.nameID, k.stack}] = i
		}
		ws[i].add(s.ns, s.launches)
		weights[k.nameID] = ws
		rows[k] = &sums{s.ns, s.launches}
	}
	// Deterministic order of stacks: by content, not by id.
	for _, ws := range weights {
		slices.SortFunc(ws, func(a, b weight) int { return cmp.Compare(j.stacks.key(a.stack), j.stacks.key(b.stack)) })
	}
	for k, s := range p.agg {
		if k.stack != noStack {
			continue
		}
		ws := weights[k.nameID]
		if len(ws) == 0 || k.folded {
			rows[k] = &sums{s.ns, s.launches}
			continue
		}
		byNs := make([]uint64, len(ws))
		byCount := make([]uint64, len(ws))
		for i, w := range ws {
			byNs[i], byCount[i] = w.ns, w.launches
		}
		// Time in proportion to sampled time (an unbiased ratio estimate
		// when every launch is equally likely to be sampled); if every
		// sampled kernel took 0 ns, in proportion to launches.
		nsShares := apportion(s.ns, byNs)
		if nsShares == nil {
			nsShares = apportion(s.ns, byCount)
		}
		countShares := apportion(s.launches, byCount)
		for i, w := range ws {
			if nsShares[i] == 0 && countShares[i] == 0 {
				continue
			}
			// No reference taken: the stack is held by its sampled agg
			// entry until the end of this function, and frames never change.
			rk := sampleKey{stack: w.stack, nameID: k.nameID, device: k.device, gi: k.gi}
			r := rows[rk]
			if r == nil {
				r = &sums{}
				rows[rk] = r
			}
			r.add(nsShares[i], countShares[i])
		}
	}
	for k, r := range rows {
		s := Sample{Proc: p.key, Device: k.device,
			GPUInstance: k.gi, GPUTime: r.ns, Launches: r.launches}
		if k.stack == noStack {
			s.Unsampled = true
		} else {
			s.User = j.stacks.frames(k.stack)
			s.Interp, s.Setup = j.stacks.interp(k.stack)
		}
		if k.folded {
			s.Kernel, s.KernelRaw = OverBudgetFrame, OverBudgetFrame
		} else if n, ok := p.names[k.nameID]; ok {
			s.Kernel, s.KernelRaw = n.demangled, n.raw
		} else {
			s.Kernel = unknownKernel(k.nameID)
			s.KernelRaw = s.Kernel
		}
		out = append(out, s)
	}
	start := len(out) - len(rows)
	slices.SortFunc(out[start:], compareSamples)
	for k := range p.agg {
		j.stacks.unref(k.stack)
	}
	clear(p.agg)
	j.shrink(p, p.aggBytes)
	p.aggBytes = 0
	return out
}

func compareSamples(a, b Sample) int {
	return cmp.Or(
		cmp.Compare(a.KernelRaw, b.KernelRaw),
		cmp.Compare(a.Device, b.Device),
		cmp.Compare(a.GPUInstance, b.GPUInstance),
		slices.Compare(a.User, b.User),
		cmp.Compare(a.Setup, b.Setup),
		slices.CompareFunc(a.Interp.Frames, b.Interp.Frames, func(x, y interp.Frame) int {
			return cmp.Or(cmp.Compare(x.Function, y.Function), cmp.Compare(x.File, y.File), cmp.Compare(x.Line, y.Line))
		}),
		slices.CompareFunc(a.Interp.Root, b.Interp.Root, func(x, y symbolize.Frame) int {
			return cmp.Or(cmp.Compare(x.Function, y.Function), cmp.Compare(x.Module, y.Module))
		}),
	)
}

// apportion splits total over weights in proportion, exactly: the shares sum
// to total. Each share is floor(total*w/W) (128-bit intermediate, no
// overflow); the remainder goes one unit each to the largest fractional
// parts, ties to the lower index. It returns nil when the weights sum to 0.
func apportion(total uint64, weights []uint64) []uint64 {
	var sum uint64
	for _, w := range weights {
		sum = satAdd(sum, w)
	}
	if sum == 0 {
		return nil
	}
	if sum == ^uint64(0) {
		// Saturated: scale down so the sum is exact again. Only absurd
		// (hostile) durations get here; proportions survive the shift.
		scaled := make([]uint64, len(weights))
		for i, w := range weights {
			scaled[i] = w >> 8
		}
		if r := apportion(total, scaled); r != nil {
			return r
		}
		scaled = make([]uint64, len(weights))
		scaled[0] = 1
		return apportion(total, scaled)
	}
	shares := make([]uint64, len(weights))
	fracs := make([]uint64, len(weights))
	var given uint64
	for i, w := range weights {
		hi, lo := bits.Mul64(total, w)
		shares[i], fracs[i] = bits.Div64(hi, lo, sum) // hi < sum since w <= sum
		given += shares[i]
	}
	order := make([]int, len(weights))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(fracs[b], fracs[a]) })
	for _, i := range order[:total-given] {
		shares[i]++
	}
	return shares
}
