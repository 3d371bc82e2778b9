package budget

import (
	"errors"
	"sync"
	"testing"
)

// evicted records which entries the budget evicted.
type evicted struct {
	mu    sync.Mutex
	names []string
}

func (e *evicted) fn(name string) func() {
	return func() { e.mu.Lock(); e.names = append(e.names, name); e.mu.Unlock() }
}

func (e *evicted) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.names...)
}

func mustCharge(t *testing.T, b *Budget, owner string, kind Kind, size int64, evict func()) *Entry {
	t.Helper()
	e, err := b.Charge(owner, kind, size, evict)
	if err != nil {
		t.Fatalf("Charge(%s, %d): %v", owner, size, err)
	}
	return e
}

func TestAJobEvictsItsOwnLeastRecentlyUsedFirst(t *testing.T) {
	b := New(Options{Total: 1000, JobShare: 300, SharedShare: 500})
	var ev evicted
	a1 := mustCharge(t, b, "job a", Symbols, 100, ev.fn("a1"))
	mustCharge(t, b, "job a", Symbols, 100, ev.fn("a2"))
	mustCharge(t, b, "job b", Symbols, 100, ev.fn("b1"))
	a1.Touch() // a2 is now a's least recently used
	mustCharge(t, b, "job a", PerfMap, 150, ev.fn("a3"))
	if got := ev.list(); len(got) != 1 || got[0] != "a2" {
		t.Fatalf("evicted %v, want [a2]: a job's own LRU entry goes first, by bytes", got)
	}
	if got := b.Held("job a"); got != 250 {
		t.Errorf("job a holds %d, want 250", got)
	}
	if got := b.Held("job b"); got != 100 {
		t.Errorf("job b holds %d, want 100 (untouched)", got)
	}
	st := b.Stats()
	if st.Kinds[Symbols].Evictions != 1 || st.Kinds[Symbols].EvictedBytes != 100 || st.Used != 350 {
		t.Errorf("stats %+v", st)
	}
}

func TestOneJobCannotExhaustAnothersShare(t *testing.T) {
	b := New(Options{Total: 1000, JobShare: 400})
	var ev evicted
	mustCharge(t, b, "job victim", Symbols, 300, ev.fn("victim"))
	// The attacker charges as much as it likes: it only ever evicts itself.
	for i := range 50 {
		if _, err := b.Charge("job attacker", Symbols, 90, ev.fn("attacker")); err != nil {
			t.Fatalf("charge %d: %v", i, err)
		}
	}
	for _, n := range ev.list() {
		if n == "victim" {
			t.Fatal("the attacker's charges evicted the victim's entry")
		}
	}
	if got := b.Held("job attacker"); got > 400 {
		t.Errorf("attacker holds %d, over its share 400", got)
	}
	// Bigger than a share: refused outright, evicting nothing.
	before := len(ev.list())
	if _, err := b.Charge("job attacker", Symbols, 401, ev.fn("huge")); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("a charge over the share: %v, want ErrOverBudget", err)
	}
	if len(ev.list()) != before {
		t.Error("a refused charge evicted entries")
	}
	if b.Stats().Kinds[Symbols].Refused != 1 {
		t.Errorf("refused = %d, want 1", b.Stats().Kinds[Symbols].Refused)
	}
}

func TestTotalShortTheLargestOwnerGivesWay(t *testing.T) {
	// Shares add up to more than the total: the total binds first.
	b := New(Options{Total: 500, JobShare: 300})
	var ev evicted
	mustCharge(t, b, "job big", Symbols, 150, ev.fn("big1"))
	mustCharge(t, b, "job big", Symbols, 150, ev.fn("big2"))
	mustCharge(t, b, "job small", Symbols, 100, ev.fn("small1"))
	mustCharge(t, b, "job new", Symbols, 120, ev.fn("new1"))
	if got := ev.list(); len(got) != 1 || got[0] != "big1" {
		t.Fatalf("evicted %v, want [big1]: the owner holding the most gives way", got)
	}
	if st := b.Stats(); st.Used > st.Total {
		t.Errorf("used %d over total %d", st.Used, st.Total)
	}
}

func TestPinnedChargesAreNeverEvicted(t *testing.T) {
	b := New(Options{Total: 1000, JobShare: 300})
	var ev evicted
	p := mustCharge(t, b, "job a", GPUAggregation, 200, nil)
	mustCharge(t, b, "job a", Symbols, 100, ev.fn("sym"))
	// Growing the pinned charge evicts the job's cache entry...
	if err := p.Resize(250); err != nil {
		t.Fatal(err)
	}
	if got := ev.list(); len(got) != 1 || got[0] != "sym" {
		t.Fatalf("evicted %v, want [sym]", got)
	}
	// ...but nothing evicts the pinned charge: past the share it is refused
	// and keeps its size.
	if err := p.Resize(301); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("grow past the share: %v", err)
	}
	if p.Size() != 250 {
		t.Errorf("size after a refused grow = %d, want 250", p.Size())
	}
	if _, err := b.Charge("job a", Symbols, 60, ev.fn("sym2")); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("a cache entry where pinned bytes fill the share: %v", err)
	}
	if err := p.Resize(0); err != nil {
		t.Fatal(err)
	}
	mustCharge(t, b, "job a", Symbols, 60, ev.fn("sym2"))
	p.Release()
	if got := b.Held("job a"); got != 60 {
		t.Errorf("held %d after release, want 60", got)
	}
}

func TestSharedHasItsOwnShare(t *testing.T) {
	b := New(Options{Total: 1000, JobShare: 100, SharedShare: 600})
	mustCharge(t, b, Shared, Symbols, 500, func() {})
	if _, err := b.Charge("job a", Symbols, 101, func() {}); !errors.Is(err, ErrOverBudget) {
		t.Errorf("a job charge over the job share: %v", err)
	}
}

func TestReleasedAndEvictedEntriesAreInert(t *testing.T) {
	b := New(Options{Total: 100, JobShare: 100})
	var ev evicted
	e := mustCharge(t, b, "job a", Maps, 60, ev.fn("e"))
	mustCharge(t, b, "job a", Maps, 60, ev.fn("f")) // evicts e
	e.Touch()
	e.Release()
	if err := e.Resize(10); err == nil {
		t.Error("an evicted entry grew")
	}
	if e.Size() != 0 || b.Held("job a") != 60 {
		t.Errorf("size %d, held %d", e.Size(), b.Held("job a"))
	}
	if got := ev.list(); len(got) != 1 {
		t.Errorf("evict called %d times, want once", len(got))
	}
	var nilEntry *Entry
	nilEntry.Touch()
	nilEntry.Release()
	if b.Stats().Owners != 1 {
		t.Errorf("owners = %d, want 1", b.Stats().Owners)
	}
}

// An evict callback may charge the budget itself (a cache that re-charges
// what it still holds): it runs without the budget's lock.
func TestEvictRunsUnlocked(t *testing.T) {
	b := New(Options{Total: 100, JobShare: 100})
	done := false
	mustCharge(t, b, "job a", Symbols, 80, func() {
		if _, err := b.Charge("job z", Symbols, 1, func() {}); err != nil {
			t.Error(err)
		}
		done = true
	})
	mustCharge(t, b, "job a", Symbols, 80, func() {})
	if !done {
		t.Fatal("evict not called")
	}
}

func TestConcurrentCharges(t *testing.T) {
	b := New(Options{Total: 10000, JobShare: 3000})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := JobOwner(string(rune('a' + g%3)))
			for i := range 2000 {
				e, err := b.Charge(owner, Symbols, int64(10+i%90), func() {})
				if err == nil && i%3 == 0 {
					e.Touch()
					e.Resize(int64(i % 50))
				}
				if err == nil && i%5 == 0 {
					e.Release()
				}
			}
		}()
	}
	wg.Wait()
	st := b.Stats()
	if st.Used > st.Total {
		t.Errorf("used %d over total %d", st.Used, st.Total)
	}
	var sum int64
	for _, k := range st.Kinds {
		sum += k.Used
	}
	if sum != st.Used {
		t.Errorf("kinds sum to %d, used %d", sum, st.Used)
	}
	for _, o := range []string{"a", "b", "c"} {
		if h := b.Held(JobOwner(o)); h > 3000 {
			t.Errorf("%s holds %d over its share", o, h)
		}
	}
}
