package cli

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/offcpu"
	"github.com/slurmscope/slurmscope/agent/stackwalk"
)

// TestEveryProbeHasTheSharedMaps: the stack walker creates each map of
// stack.h once and hands it to every probe, which must have it by name
// (Walker.Prepare refuses one that does not, and the agent stops). A map
// added to the shared object but not to stack.h's users stopped every
// agent at start once; this holds the committed objects to it, without
// root.
func TestEveryProbeHasTheSharedMaps(t *testing.T) {
	shared, err := bpf.StackSpec()
	if err != nil {
		t.Fatal(err)
	}
	probes := map[string]func() (*ebpf.CollectionSpec, error){
		"cpu": cpu.Spec, "gputrace": gputrace.Spec, "offcpu": offcpu.Spec, "stackwalk": stackwalk.Spec,
	}
	for name, load := range probes {
		spec, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for m := range shared.Maps {
			if strings.HasPrefix(m, ".") {
				continue
			}
			if _, ok := spec.Maps[m]; !ok {
				t.Errorf("%s's program has no map %s, which the stack walker shares", name, m)
			}
		}
	}
}
