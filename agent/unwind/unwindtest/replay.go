package unwindtest

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Replay is the loaded replay probe: unwind.h's walk, run on demand by
// BPF_PROG_TEST_RUN in the calling thread, so over the calling process's
// memory and the tables loaded for its pid.
type Replay struct{ objs replayObjects }

// Walk is one walk's result.
type Walk struct {
	PCs    []uint64 // innermost first
	End    uint32   // enum unwind_end (agent/unwind EndReasons)
	Loaded bool     // the process's tables applied (UNWIND_STACK_LOADED)
}

// LoadReplay loads the replay probe. replace returns the map replacements
// (agent/unwind's Maps.Replace) for the spec.
func LoadReplay(replace func(*ebpf.CollectionSpec) (map[string]*ebpf.Map, error)) (*Replay, error) {
	spec, err := loadReplay()
	if err != nil {
		return nil, err
	}
	repl, err := replace(spec)
	if err != nil {
		return nil, err
	}
	r := &Replay{}
	if err := spec.LoadAndAssign(&r.objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("%+v", ve)
		}
		return nil, err
	}
	return r, nil
}

// Walk unwinds from pc, sp and rbp as unwind_user does at a sample of the
// calling process.
func (r *Replay) Walk(pc, sp, bp uint64) (Walk, error) {
	ret, err := r.objs.ReplayWalk.Run(&ebpf.RunOptions{Context: []uint64{pc, sp, bp}})
	if err != nil {
		return Walk{}, err
	}
	if ret != 0 {
		return Walk{}, fmt.Errorf("replay_walk returned %d", ret)
	}
	var st replayUnwindStack
	if err := r.objs.ReplayOut.Lookup(uint32(0), &st); err != nil {
		return Walk{}, err
	}
	n := min(int(st.Len), len(st.Ips))
	return Walk{PCs: append([]uint64(nil), st.Ips[:n]...), End: st.End, Loaded: st.Flags&1 != 0}, nil
}

// Close unloads the probe.
func (r *Replay) Close() { r.objs.Close() }
