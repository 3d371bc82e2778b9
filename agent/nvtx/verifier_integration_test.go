package nvtx_test

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/nvtx"
	"github.com/slurmscope/slurmscope/agent/offcpu"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/agent/stackwalk"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// TestIntegrationVerifierCounts loads every program that includes stack.h
// (the CPU sampler, off-CPU, the GPU markers, the NVTX probes) as the agent
// does, with NVTX off and on (stack_nvtx), with the
// capture's shared maps and constants, and logs the verifier's processed
// instruction count of each: the figure the NVTX read in stack.h adds to.
// It asserts only that every program loads.
func TestIntegrationVerifierCounts(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	w, err := stackwalk.New(stackwalk.Options{Tables: true, Interpreters: []interp.Interpreter{python.CPython{}},
		Profiled: func(procfs.ID) bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, p := range []struct {
		name string
		spec func() (*ebpf.CollectionSpec, error)
		nvtx bool
	}{{"cpu", cpu.Spec, false}, {"offcpu", offcpu.Spec, false}, {"gputrace", gputrace.Spec, false},
		{"cpu", cpu.Spec, true}, {"offcpu", offcpu.Spec, true}, {"gputrace", gputrace.Spec, true}, {"nvtx", nvtx.Spec, true}} {
		spec, err := p.spec()
		if err != nil {
			t.Fatal(err)
		}
		consts, maps, err := w.Prepare(spec)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := spec.Variables["stack_nvtx"]; ok {
			consts["stack_nvtx"] = uint32(0)
			if p.nvtx {
				consts["stack_nvtx"] = uint32(1)
			}
			_ = v
		} else if p.nvtx {
			t.Fatalf("%s: no stack_nvtx", p.name)
		}
		for k, v := range consts {
			if err := spec.Variables[k].Set(v); err != nil {
				t.Fatal(err)
			}
		}
		coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: maps})
		if err != nil {
			t.Fatalf("%s: %+v", p.name, err)
		}
		for name, prog := range coll.Programs {
			info, err := prog.Info()
			if err != nil {
				t.Fatal(err)
			}
			n, ok := info.VerifiedInstructions()
			t.Logf("verifier: %s/%s nvtx=%v processed %d instructions (known %v)", p.name, name, p.nvtx, n, ok)
		}
		coll.Close()
	}
}
