// Package bpf is what the agent's eBPF programs share: the C headers under
// include/ (types, UAPI constants, registers, and stack.h, the user-stack
// capture of every probe: the table unwinder and the interpreter walks),
// which bpf2go finds through -I../bpf/include; the Go types of the structs
// they share with user space, generated once (gen.go); and Load, the one
// way their Go halves load a program.
package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// Load loads the programs and maps of spec into objs (a bpf2go objects
// struct), with the program's constants (volatile const) set from consts
// first. Map sizes are the caller's to set on spec before. It lifts the
// memlock limit, which kernels before 5.11 charge BPF memory to, and a
// verifier rejection comes with the verifier's whole log: that is the only
// way to tell why a kernel refused the program.
func Load(spec *ebpf.CollectionSpec, consts map[string]any, objs any) error {
	return LoadWith(spec, consts, nil, objs)
}

// LoadWith is Load with maps created elsewhere standing in for the
// program's own of the same names (ebpf.CollectionOptions.MapReplacements):
// the stack capture's maps, which every probe shares (agent/stackwalk).
func LoadWith(spec *ebpf.CollectionSpec, consts map[string]any, maps map[string]*ebpf.Map, objs any) error {
	for name, v := range consts {
		sv, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("no constant %s in the program", name)
		}
		if err := sv.Set(v); err != nil {
			return fmt.Errorf("constant %s: %w", name, err)
		}
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	if err := spec.LoadAndAssign(objs, &ebpf.CollectionOptions{MapReplacements: maps}); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return fmt.Errorf("load: %+v", verr)
		}
		return fmt.Errorf("load: %w", err)
	}
	return nil
}
