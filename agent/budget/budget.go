// Package budget is the agent's one memory budget. Everything a job can make
// the agent grow (parsed symbol tables, perf maps, mapping tables, the GPU
// tracer's aggregation) is charged to it in bytes, on behalf of the job that
// made it grow. A job has a share of the total: when it needs more, its own
// least recently used entries go first, and what does not fit is refused, so
// one job can exhaust only its own share. When the total is short, the owner
// holding the most bytes gives way.
//
// Two kinds of charge:
//
//   - A cache entry (evict non-nil) can be evicted: the budget calls evict,
//     once, and the cache drops what it held. evict runs without the
//     budget's lock but possibly while the caller of Charge or Resize holds
//     its own locks, so it must not block: an atomic store that drops a
//     reference, a flag. The cache notices on its next use.
//   - A pinned charge (evict nil) is data that cannot be thrown away (GPU
//     time not yet drained): it counts until Resized or Released, and a
//     grow that does not fit is refused; the caller degrades (it folds
//     detail away) rather than grows.
//
// Charges are estimates of live bytes, not of the Go heap: the heap is
// about twice the live bytes between collections, which the defaults and
// the agent's GOMEMLIMIT allow for.
package budget

import (
	"container/list"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Kind says what charged bytes are; it labels the budget's metrics.
type Kind string

// The kinds the agent charges. Unwind tables and the interpreters' caches
// have kinds, so their metrics exist, but are not charged yet.
const (
	Symbols        Kind = "symbols"           // parsed ELF symbol tables and Go pclntabs
	PerfMap        Kind = "perf_map"          // JIT perf maps
	Maps           Kind = "maps"              // per-process mapping tables
	GPUAggregation Kind = "gpu_aggregation"   // the GPU tracer's per-process join state and aggregates
	UnwindTables   Kind = "unwind_tables"     // agent/unwind's tables (not charged yet)
	InterpCache    Kind = "interpreter_cache" // the interpreters' caches (agent/python's code objects; not charged yet)
	NVTXNames      Kind = "nvtx_names"        // the NVTX range names processes announced (agent/nvtx)
)

// Kinds lists every kind, for metrics that show zeros too.
var Kinds = []Kind{Symbols, PerfMap, Maps, GPUAggregation, UnwindTables, InterpCache, NVTXNames}

// Shared owns what serves every job alike: files owned by root (the
// system's libraries), which no job can make larger. It has its own share.
const Shared = "shared"

// ErrOverBudget is returned for a charge that does not fit the owner's
// share (or the total) even after eviction.
var ErrOverBudget = errors.New("over the memory budget")

// Defaults fit the systemd unit's MemoryMax=1G with room to spare: the
// heap is about twice the live bytes, plus the runtime, the BPF maps (they
// are charged to the agent's memory cgroup too) and what is not charged.
const (
	DefaultTotal       = 384 << 20
	DefaultJobShare    = 128 << 20
	DefaultSharedShare = 192 << 20
)

// Options size a Budget. Zero values select the defaults; a share larger
// than the total is the total.
type Options struct {
	Total       int64
	JobShare    int64 // the most one job (one owner other than Shared) holds
	SharedShare int64 // the most Shared holds
}

// Budget is safe for concurrent use.
type Budget struct {
	mu          sync.Mutex
	total       int64
	jobShare    int64
	sharedShare int64
	used        int64
	evictable   int64 // bytes held by evictable entries
	owners      map[string]*owner
	kinds       map[Kind]*kindStats
}

type owner struct {
	name      string
	used      int64
	evictable int64
	lru       list.List // of *Entry, evictable only; front: least recently used
	entries   int
}

type kindStats struct {
	used                             int64
	evictions, evictedBytes, refused uint64
}

// Entry is one charge. Its methods are safe for concurrent use; after
// Release or eviction they do nothing.
type Entry struct {
	b     *Budget
	owner *owner
	kind  Kind
	size  int64
	evict func()
	elem  *list.Element // in owner.lru; nil when pinned
	gone  bool
}

// New returns a budget.
func New(o Options) *Budget {
	if o.Total <= 0 {
		o.Total = DefaultTotal
	}
	if o.JobShare <= 0 {
		o.JobShare = DefaultJobShare
	}
	if o.SharedShare <= 0 {
		o.SharedShare = DefaultSharedShare
	}
	b := &Budget{total: o.Total, jobShare: min(o.JobShare, o.Total), sharedShare: min(o.SharedShare, o.Total),
		owners: map[string]*owner{}, kinds: map[Kind]*kindStats{}}
	for _, k := range Kinds {
		b.kinds[k] = &kindStats{}
	}
	return b
}

// Share is the most bytes owner may hold.
func (b *Budget) Share(owner string) int64 {
	if owner == Shared {
		return b.sharedShare
	}
	return b.jobShare
}

// Charge charges size bytes of kind to owner (a job's key, or Shared).
// With evict non-nil the entry is a cache entry the budget may evict;
// with evict nil it is pinned. Room is made by evicting the owner's own
// least recently used entries, then, if the total is short, those of the
// owners holding the most. A charge that still does not fit is refused
// with ErrOverBudget and evicts nothing.
func (b *Budget) Charge(owner string, kind Kind, size int64, evict func()) (*Entry, error) {
	if size < 0 {
		size = 0
	}
	b.mu.Lock()
	o := b.owner(owner)
	var victims []*Entry
	if !b.fits(o, size, nil) {
		b.stats(kind).refused++
		b.dropIfEmpty(o)
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: %d bytes of %s for %s (holding %d of %d; all %d of %d)",
			ErrOverBudget, size, kind, owner, o.used, b.Share(owner), b.used, b.total)
	}
	victims = b.makeRoom(o, size, nil)
	b.owners[owner] = o // evicting its last entries dropped it
	e := &Entry{b: b, owner: o, kind: kind, size: size, evict: evict}
	o.entries++
	b.add(e, size)
	if evict != nil {
		e.elem = o.lru.PushBack(e)
	}
	b.mu.Unlock()
	runEvictions(victims)
	return e, nil
}

// Resize changes the entry's charge to size bytes, making room as Charge
// does. A grow that does not fit is refused with ErrOverBudget and leaves
// the charge as it was. A released or evicted entry is refused too.
func (e *Entry) Resize(size int64) error {
	if e == nil {
		return ErrOverBudget
	}
	if size < 0 {
		size = 0
	}
	b := e.b
	b.mu.Lock()
	if e.gone {
		b.mu.Unlock()
		return fmt.Errorf("%w: entry was evicted", ErrOverBudget)
	}
	grow := size - e.size
	var victims []*Entry
	if grow > 0 {
		if !b.fits(e.owner, grow, e) {
			b.stats(e.kind).refused++
			b.mu.Unlock()
			return fmt.Errorf("%w: %d more bytes of %s for %s", ErrOverBudget, grow, e.kind, e.owner.name)
		}
		victims = b.makeRoom(e.owner, grow, e)
	}
	b.add(e, grow)
	e.size = size
	if e.elem != nil {
		e.owner.lru.MoveToBack(e.elem)
	}
	b.mu.Unlock()
	runEvictions(victims)
	return nil
}

// Touch marks a cache entry as just used.
func (e *Entry) Touch() {
	if e == nil {
		return
	}
	e.b.mu.Lock()
	if !e.gone && e.elem != nil {
		e.owner.lru.MoveToBack(e.elem)
	}
	e.b.mu.Unlock()
}

// Release returns the entry's bytes. Its evict is not called.
func (e *Entry) Release() {
	if e == nil {
		return
	}
	b := e.b
	b.mu.Lock()
	if !e.gone {
		b.remove(e)
	}
	b.mu.Unlock()
}

// Size is the entry's charge now; 0 once released or evicted.
func (e *Entry) Size() int64 {
	if e == nil {
		return 0
	}
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if e.gone {
		return 0
	}
	return e.size
}

func (b *Budget) owner(name string) *owner {
	o := b.owners[name]
	if o == nil {
		o = &owner{name: name}
		b.owners[name] = o
	}
	return o
}

func (b *Budget) stats(k Kind) *kindStats {
	s := b.kinds[k]
	if s == nil {
		s = &kindStats{}
		b.kinds[k] = s
	}
	return s
}

// fits reports whether n more bytes for o can be made room for; self (the
// entry that grows, or nil) is never evicted for its own growth.
func (b *Budget) fits(o *owner, n int64, self *Entry) bool {
	selfEvictable := int64(0)
	if self != nil && self.elem != nil {
		selfEvictable = self.size
	}
	share := b.Share(o.name)
	if n > share || n > b.total {
		return false
	}
	ownEvictable := o.evictable - selfEvictable
	needOwn := o.used + n - share
	if needOwn > ownEvictable {
		return false
	}
	// After evicting needOwn of its own, the total must fit with what
	// every owner can give.
	needTotal := b.used + n - max(needOwn, 0) - b.total
	return needTotal <= b.evictable-selfEvictable-max(needOwn, 0)
}

// makeRoom evicts for n more bytes of o, which fits said it can; the
// evicted entries' callbacks are for the caller to run unlocked.
func (b *Budget) makeRoom(o *owner, n int64, self *Entry) []*Entry {
	var victims []*Entry
	share := b.Share(o.name)
	for o.used+n > share {
		v := oldest(o, self)
		if v == nil {
			break
		}
		victims = append(victims, b.evictLocked(v))
	}
	for b.used+n > b.total {
		// The owner holding the most (evictable) bytes gives way.
		var big *owner
		for _, x := range b.owners {
			if x.evictable-evictableOf(self, x) > 0 && (big == nil || x.used > big.used) {
				big = x
			}
		}
		if big == nil {
			break
		}
		v := oldest(big, self)
		if v == nil {
			break
		}
		victims = append(victims, b.evictLocked(v))
	}
	return victims
}

func evictableOf(self *Entry, o *owner) int64 {
	if self != nil && self.owner == o && self.elem != nil {
		return self.size
	}
	return 0
}

func oldest(o *owner, self *Entry) *Entry {
	for el := o.lru.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*Entry); e != self {
			return e
		}
	}
	return nil
}

func (b *Budget) evictLocked(e *Entry) *Entry {
	s := b.stats(e.kind)
	s.evictions++
	s.evictedBytes += uint64(e.size) // #nosec G115 -- Charge and Resize clamp sizes at 0
	b.remove(e)
	return e
}

func (b *Budget) add(e *Entry, n int64) {
	e.owner.used += n
	b.used += n
	if e.evict != nil {
		e.owner.evictable += n
		b.evictable += n
	}
	b.stats(e.kind).used += n
}

func (b *Budget) remove(e *Entry) {
	b.add(e, -e.size)
	if e.elem != nil {
		e.owner.lru.Remove(e.elem)
		e.elem = nil
	}
	e.gone = true
	e.owner.entries--
	b.dropIfEmpty(e.owner)
}

func (b *Budget) dropIfEmpty(o *owner) {
	if o.entries == 0 && o.used == 0 {
		delete(b.owners, o.name)
	}
}

func runEvictions(victims []*Entry) {
	for _, v := range victims {
		if v.evict != nil {
			v.evict()
		}
	}
}

// Stats is a snapshot of the budget.
type Stats struct {
	Total, Used int64
	Owners      int
	// By kind: bytes held, entries evicted and their bytes, charges refused.
	Kinds map[Kind]KindStats
}

// KindStats are one kind's numbers.
type KindStats struct {
	Used                    int64
	Evictions, EvictedBytes uint64
	Refused                 uint64
}

// Stats returns a snapshot.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Stats{Total: b.total, Used: b.used, Owners: len(b.owners), Kinds: map[Kind]KindStats{}}
	for k, s := range b.kinds {
		st.Kinds[k] = KindStats{Used: s.used, Evictions: s.evictions, EvictedBytes: s.evictedBytes, Refused: s.refused}
	}
	return st
}

// Held is what owner holds now.
func (b *Budget) Held(owner string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if o := b.owners[owner]; o != nil {
		return o.used
	}
	return 0
}

// Owner keys. A job's processes share one; processes in no job are charged
// per user, so that forking does not buy a process more room.
func JobOwner(jobID string) string { return "job " + jobID }

// OwnerJob is the job id of a JobOwner key, "" for any other owner.
func OwnerJob(owner string) string {
	id, _ := strings.CutPrefix(owner, "job ")
	if id == owner {
		return ""
	}
	return id
}

// UserOwner is the owner of a user's processes in no job.
func UserOwner(uid int) string { return "uid " + strconv.Itoa(uid) }

// Unknown owns what is charged for a process that could not be attributed
// (it exited before the agent looked).
const Unknown = "unknown"
