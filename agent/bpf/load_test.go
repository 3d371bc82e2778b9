package bpf

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

func TestLoadRefusesUnknownConstants(t *testing.T) {
	err := Load(&ebpf.CollectionSpec{}, map[string]any{"exclude_tgid": uint32(1)}, nil)
	if err == nil || !strings.Contains(err.Error(), "exclude_tgid") {
		t.Fatalf("%v", err)
	}
}

// A program the verifier refuses comes back with the verifier's reason.
func TestLoadShowsTheVerifierLog(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"bad": {Name: "bad", Type: ebpf.SocketFilter, License: "GPL",
			// Reads R2, which no one wrote, and falls off the end.
			Instructions: asm.Instructions{asm.Mov.Reg(asm.R0, asm.R2), asm.Return()}},
	}}
	var objs struct {
		Bad *ebpf.Program `ebpf:"bad"`
	}
	err := Load(spec, nil, &objs)
	if err == nil {
		objs.Bad.Close()
		t.Fatal("the verifier accepted a read of an uninitialised register")
	}
	if !strings.Contains(err.Error(), "R2 !read_ok") {
		t.Errorf("no verifier log in %q", err)
	}
}
