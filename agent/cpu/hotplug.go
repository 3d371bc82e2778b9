package cpu

import (
	"errors"
	"fmt"
	"io"
	"slices"
)

// event is one perf event opened on one CPU with the program attached.
type event interface {
	io.Closer
	// Count reads the event's counter. For cpu-clock it is the nanoseconds
	// the event has been running, so it grows on every healthy event.
	Count() (uint64, error)
}

// attacher opens events; the real one calls perf_event_open, tests use a
// fake.
type attacher interface {
	Attach(cpu int) (event, error)
}

type attachedCPU struct {
	ev        event
	lastCount uint64
}

// cpuSet keeps one event per online CPU. It is not safe for concurrent use;
// the Sampler serialises calls.
type cpuSet struct {
	att  attacher
	cpus map[int]*attachedCPU
}

// syncResult says what one reconcile changed; the counts feed Stats.
type syncResult struct {
	Attached, Detached, Reattached int
	AttachErrors                   int
}

func newCPUSet(att attacher) *cpuSet {
	return &cpuSet{att: att, cpus: make(map[int]*attachedCPU)}
}

// sync makes the set of attached CPUs equal to online: it attaches new CPUs,
// closes events of CPUs that went away and re-attaches events that stopped
// counting. The last case covers a CPU that went offline and came back
// between two calls: the kernel leaves a per-CPU event dead when its CPU goes
// down, and the online list alone cannot show that it ever left.
//
// A CPU that fails to attach is retried on the next call. The error joins
// every failure; the set is still updated as far as it could be.
func (s *cpuSet) sync(online []int) (syncResult, error) {
	var res syncResult
	var errs []error
	want := make(map[int]bool, len(online))
	for _, c := range online {
		want[c] = true
	}
	for _, c := range s.sorted() {
		if !want[c] {
			errs = append(errs, s.detach(c))
			res.Detached++
		}
	}
	for _, c := range online {
		a, ok := s.cpus[c]
		if ok {
			n, err := a.ev.Count()
			if err == nil && n != a.lastCount {
				a.lastCount = n
				continue
			}
			// Unreadable or not advancing: replace it.
			errs = append(errs, s.detach(c))
			res.Reattached++
		}
		ev, err := s.att.Attach(c)
		if err != nil {
			res.AttachErrors++
			errs = append(errs, fmt.Errorf("attach cpu %d: %w", c, err))
			continue
		}
		n, _ := ev.Count()
		s.cpus[c] = &attachedCPU{ev: ev, lastCount: n}
		if !ok {
			res.Attached++
		}
	}
	return res, errors.Join(errs...)
}

func (s *cpuSet) detach(c int) error {
	a := s.cpus[c]
	delete(s.cpus, c)
	if err := a.ev.Close(); err != nil {
		return fmt.Errorf("close event of cpu %d: %w", c, err)
	}
	return nil
}

// sorted returns the attached CPUs in ascending order.
func (s *cpuSet) sorted() []int {
	cpus := make([]int, 0, len(s.cpus))
	for c := range s.cpus {
		cpus = append(cpus, c)
	}
	slices.Sort(cpus)
	return cpus
}

func (s *cpuSet) closeAll() error {
	var errs []error
	for _, c := range s.sorted() {
		errs = append(errs, s.detach(c))
	}
	return errors.Join(errs...)
}
