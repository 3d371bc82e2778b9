package bpf

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Generations points a probe at one of two sets of maps (include/
// generations.h), so that user space drains one while the program writes
// the other. Flip replaces the inner map of the program's ARRAY_OF_MAPS,
// and the kernel does not return from that update before every program
// that may still use the old value has finished (it waits for an RCU
// grace period, see maybe_wait_bpf_programs in kernel/bpf/syscall.c; the
// kernel selftests rely on the same guarantee). The drained generation is
// then quiescent: reading and clearing it cannot lose or double count, as
// iterate-and-delete on a live map would.
type Generations struct {
	sw     *ebpf.Map
	sel    [2]*ebpf.Map
	active int
}

// NewGenerations fills a probe's gen_0 and gen_1 with their numbers and
// points gen_switch at gen_0.
func NewGenerations(sw, gen0, gen1 *ebpf.Map) (*Generations, error) {
	g := &Generations{sw: sw, sel: [2]*ebpf.Map{gen0, gen1}}
	for i, m := range g.sel {
		gen := uint32(i) // #nosec G115 -- i is 0 or 1, the two generations
		if err := m.Put(uint32(0), gen); err != nil {
			return nil, fmt.Errorf("init generation: %w", err)
		}
	}
	if err := sw.Put(uint32(0), gen0); err != nil {
		return nil, fmt.Errorf("init generation: %w", err)
	}
	return g, nil
}

// Active is the generation the program writes to now.
func (g *Generations) Active() int { return g.active }

// Flip points the program at the other generation and returns the one it
// left, quiescent once Flip returns.
func (g *Generations) Flip() (int, error) {
	next := 1 - g.active
	if err := g.sw.Put(uint32(0), g.sel[next]); err != nil {
		return 0, fmt.Errorf("switch generation: %w", err)
	}
	old := g.active
	g.active = next
	return old, nil
}

// SumPerCPU sums the per-CPU values of a BPF counter.
func SumPerCPU(vals []uint64) uint64 {
	var t uint64
	for _, v := range vals {
		t += v
	}
	return t
}

// ZeroPerCPU zeroes the first n slots of a per-CPU counter array.
func ZeroPerCPU(m *ebpf.Map, n uint32) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	zeros := make([]uint64, ncpu)
	for idx := range n {
		if err := m.Put(idx, zeros); err != nil {
			return err
		}
	}
	return nil
}

// InterpNewEvent is struct interp_new_event (include/stackstore.h): an
// interpreter stack new to a probe's map.
type InterpNewEvent = stackInterpNewEvent

// ReadInterpNew hands each interpreter stack announced on r to fn until r
// is closed.
func ReadInterpNew(r *ringbuf.Reader, fn func(pid uint32, startNs uint64, raw *InterpStack)) {
	var rec ringbuf.Record
	for {
		if err := r.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		var ev InterpNewEvent
		if len(rec.RawSample) < int(unsafe.Sizeof(ev)) {
			continue
		}
		ev = *(*InterpNewEvent)(unsafe.Pointer(&rec.RawSample[0]))
		fn(ev.Tgid, ev.StartBoottimeNs, &ev.Stack)
	}
}

// RunStats returns a program's cumulative run time and runs, which the
// kernel counts only while kernel.bpf_stats_enabled is 1; ok is false with
// nothing to report.
func RunStats(p *ebpf.Program) (runNs, runs uint64, ok bool) {
	st, err := p.Stats()
	if err != nil || st.RunCount == 0 {
		return 0, 0, false
	}
	return uint64(st.Runtime.Nanoseconds()), st.RunCount, true // #nosec G115 -- the kernel's run time, not negative
}
