package cpu

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// fakeAttacher records attaches; events count up on every read unless the
// test freezes them, and closes are checked for double closes.
type fakeAttacher struct {
	t       *testing.T
	fail    map[int]bool
	opened  map[int]int // cpu -> number of attaches
	live    map[*fakeEvent]bool
	frozen  map[int]bool
	badRead map[int]bool
}

type fakeEvent struct {
	f      *fakeAttacher
	cpu    int
	n      uint64
	closed bool
}

func newFakeAttacher(t *testing.T) *fakeAttacher {
	return &fakeAttacher{
		t: t, fail: map[int]bool{}, opened: map[int]int{},
		live: map[*fakeEvent]bool{}, frozen: map[int]bool{}, badRead: map[int]bool{},
	}
}

func (f *fakeAttacher) Attach(cpu int) (event, error) {
	if f.fail[cpu] {
		return nil, fmt.Errorf("no such cpu %d", cpu)
	}
	f.opened[cpu]++
	ev := &fakeEvent{f: f, cpu: cpu}
	f.live[ev] = true
	return ev, nil
}

func (e *fakeEvent) Count() (uint64, error) {
	if e.closed {
		e.f.t.Errorf("read of closed event on cpu %d", e.cpu)
	}
	if e.f.badRead[e.cpu] {
		return 0, errors.New("read failed")
	}
	if !e.f.frozen[e.cpu] {
		e.n += 1000
	}
	return e.n, nil
}

func (e *fakeEvent) Close() error {
	if e.closed {
		e.f.t.Errorf("double close on cpu %d", e.cpu)
	}
	e.closed = true
	delete(e.f.live, e)
	return nil
}

// liveCPUs returns the CPUs with an open event; a CPU listed twice has two.
func (f *fakeAttacher) liveCPUs() []int {
	var cpus []int
	for ev := range f.live {
		cpus = append(cpus, ev.cpu)
	}
	slices.Sort(cpus)
	return cpus
}

func TestCPUSetFollowsHotplug(t *testing.T) {
	f := newFakeAttacher(t)
	s := newCPUSet(f)

	step := func(online []int, want syncResult) {
		t.Helper()
		res, err := s.sync(online)
		if err != nil {
			t.Fatalf("sync(%v): %v", online, err)
		}
		if res != want {
			t.Errorf("sync(%v) = %+v, want %+v", online, res, want)
		}
		if got := f.liveCPUs(); !slices.Equal(got, online) {
			t.Errorf("after sync(%v) open events on %v", online, got)
		}
		if got := s.sorted(); !slices.Equal(got, online) {
			t.Errorf("after sync(%v) bookkeeping has %v", online, got)
		}
	}

	step([]int{0, 1, 2, 3}, syncResult{Attached: 4})
	step([]int{0, 1, 2, 3}, syncResult{})               // steady state: nothing reopened
	step([]int{0, 2, 3}, syncResult{Detached: 1})       // cpu 1 offline
	step([]int{0, 1, 2, 3, 5}, syncResult{Attached: 2}) // back, and a new one
	step([]int{5}, syncResult{Detached: 4})             //
	step(nil, syncResult{Detached: 1})                  // all gone (fixture only)
	step([]int{0, 1}, syncResult{Attached: 2})          //
	if f.opened[1] != 3 || f.opened[5] != 1 {
		t.Errorf("attach counts %v", f.opened)
	}
	if err := s.closeAll(); err != nil {
		t.Fatal(err)
	}
	if len(f.live) != 0 || len(s.cpus) != 0 {
		t.Errorf("closeAll left %v open, bookkeeping %v", f.liveCPUs(), s.sorted())
	}
}

// A CPU that went offline and came back between two syncs is still listed
// online, but the kernel killed its event: the stalled counter gives it away.
func TestCPUSetReattachesStalledEvent(t *testing.T) {
	f := newFakeAttacher(t)
	s := newCPUSet(f)
	if _, err := s.sync([]int{0, 1}); err != nil {
		t.Fatal(err)
	}
	f.frozen[1] = true
	res, err := s.sync([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if res != (syncResult{Reattached: 1}) || f.opened[1] != 2 || f.opened[0] != 1 {
		t.Errorf("stalled cpu 1: %+v, attaches %v", res, f.opened)
	}
	f.frozen[1] = false
	f.badRead[0] = true
	res, err = s.sync([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if res != (syncResult{Reattached: 1}) || f.opened[0] != 2 {
		t.Errorf("unreadable cpu 0: %+v, attaches %v", res, f.opened)
	}
	if got := f.liveCPUs(); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("open events on %v", got)
	}
}

func TestCPUSetRetriesFailedAttach(t *testing.T) {
	f := newFakeAttacher(t)
	s := newCPUSet(f)
	f.fail[2] = true
	res, err := s.sync([]int{0, 1, 2})
	if err == nil {
		t.Fatal("want an error for cpu 2")
	}
	if res != (syncResult{Attached: 2, AttachErrors: 1}) {
		t.Errorf("first sync %+v", res)
	}
	if got := s.sorted(); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("attached %v, want the CPUs that worked", got)
	}
	f.fail[2] = false
	res, err = s.sync([]int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if res != (syncResult{Attached: 1}) {
		t.Errorf("retry %+v", res)
	}
	if got := f.liveCPUs(); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("open events on %v", got)
	}
}

// A reattach that fails leaves the CPU out, closed, and retried next time.
func TestCPUSetFailedReattach(t *testing.T) {
	f := newFakeAttacher(t)
	s := newCPUSet(f)
	if _, err := s.sync([]int{0}); err != nil {
		t.Fatal(err)
	}
	f.frozen[0], f.fail[0] = true, true
	res, err := s.sync([]int{0})
	if err == nil || res != (syncResult{Reattached: 1, AttachErrors: 1}) {
		t.Errorf("sync = %+v, %v", res, err)
	}
	if len(f.live) != 0 || len(s.cpus) != 0 {
		t.Errorf("dead event kept: open %v, bookkeeping %v", f.liveCPUs(), s.sorted())
	}
	f.frozen[0], f.fail[0] = false, false
	if res, err := s.sync([]int{0}); err != nil || res != (syncResult{Attached: 1}) {
		t.Errorf("retry = %+v, %v", res, err)
	}
}
