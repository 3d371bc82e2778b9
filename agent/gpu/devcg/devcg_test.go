package devcg

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// slurmProgram writes a device program the way slurmstepd's
// cgroup/v2 plugin does (src/plugins/cgroup/v2/ebpf.c): the request in
// r2..r5, a block per device, the default verdict.
func slurmProgram(def bool, rules ...Rule) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), asm.And.Imm32(asm.R2, 0xFFFF),
		asm.LoadMem(asm.R3, asm.R1, 0, asm.Word), asm.RSh.Imm32(asm.R3, 16),
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word), asm.LoadMem(asm.R5, asm.R1, 8, asm.Word),
	}
	b := func(v bool) int64 {
		if v {
			return 1
		}
		return 0
	}
	for _, r := range rules {
		var checks []asm.Instruction
		for _, c := range []struct {
			reg asm.Register
			v   int64
		}{{asm.R2, r.Type}, {asm.R4, r.Major}, {asm.R5, r.Minor}} {
			if c.v != Any {
				checks = append(checks, asm.Instruction{OpCode: asm.JNE.Op(asm.ImmSource), Dst: c.reg, Constant: c.v})
			}
		}
		for k := range checks {
			checks[k].Offset = int16(len(checks) - k + 1)
		}
		insns = append(insns, checks...)
		insns = append(insns, asm.Mov.Imm(asm.R0, int32(b(r.Allow))), asm.Return())
	}
	return append(insns, asm.Mov.Imm(asm.R0, int32(b(def))), asm.Return())
}

// The program a real slurmstepd (22.05) attached to a job holding GPUs 0
// and 1 of a node whose GPU 2 is in MIG mode, as the kernel returned it.
func mixedNodeJob() asm.Instructions {
	return slurmProgram(true,
		Rule{Char, 195, 0, true}, Rule{Char, 195, 1, true}, Rule{Char, 195, 2, false},
		Rule{Char, 237, 21, false}, Rule{Char, 237, 22, false}, Rule{Char, 237, 12, false}, Rule{Char, 237, 13, false})
}

func TestParseSlurmsProgram(t *testing.T) {
	p, err := Parse(mixedNodeJob())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rules) != 7 || !p.Default {
		t.Fatalf("got %+v", p)
	}
	for _, c := range []struct {
		major, minor uint32
		want         bool
	}{{195, 0, true}, {195, 1, true}, {195, 2, false}, {237, 21, false}, {1, 3, false} /* /dev/null: the default, not a grant */} {
		if got := p.Allows(c.major, c.minor); got != c.want {
			t.Errorf("Allows(%d:%d) = %v, want %v", c.major, c.minor, got, c.want)
		}
	}
	// Wildcards: a rule for every minor of a major.
	p, err = Parse(slurmProgram(false, Rule{Char, 195, Any, true}, Rule{Any, 10, 200, true}))
	if err != nil || !p.Allows(195, 7) || !p.Allows(10, 200) || p.Default {
		t.Fatalf("wildcards: %+v, %v", p, err)
	}
}

func TestParseRefusesOtherPrograms(t *testing.T) {
	good := mixedNodeJob()
	edit := func(f func(asm.Instructions) asm.Instructions) asm.Instructions {
		return f(append(asm.Instructions(nil), good...))
	}
	for name, insns := range map[string]asm.Instructions{
		"empty":            {},
		"other prologue":   edit(func(i asm.Instructions) asm.Instructions { i[4].Offset = 8; return i }),
		"jump elsewhere":   edit(func(i asm.Instructions) asm.Instructions { i[6].Offset = 9; return i }),
		"checks reordered": edit(func(i asm.Instructions) asm.Instructions { i[6].Dst, i[7].Dst = asm.R4, asm.R2; return i }),
		"verdict 7":        edit(func(i asm.Instructions) asm.Instructions { i[9].Constant = 7; return i }),
		"no exit":          edit(func(i asm.Instructions) asm.Instructions { return i[:len(i)-1] }),
		"code after":       edit(func(i asm.Instructions) asm.Instructions { return append(i, asm.Return()) }),
		"a call":           edit(func(i asm.Instructions) asm.Instructions { i[9] = asm.FnGetCurrentUidGid.Call(); return i }),
	} {
		if p, err := Parse(insns); err == nil {
			t.Errorf("%s: accepted as %+v", name, p)
		}
	}
}

// A real device program attached to a real cgroup is read back through
// the kernel (root, cgroup v2 and BPF).
func TestReadAttachedProgram(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	mnt := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(mnt, "cgroup.controllers")); err != nil {
		mnt = filepath.Join(mnt, "unified")
	}
	dir := filepath.Join(mnt, "slurmscope-devcg-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if _, _, err := Read(dir, nil); !errors.Is(err, ErrNone) {
		t.Fatalf("a cgroup without a program: %v", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "Slurm_Cgroup_v2", Type: ebpf.CGroupDevice, Instructions: mixedNodeJob(), License: "GPL"})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts := link.RawAttachProgramOptions{Target: int(f.Fd()), Program: prog, Attach: ebpf.AttachCGroupDevice}
	if err := link.RawAttachProgram(opts); err != nil {
		t.Fatal(err)
	}
	defer link.RawDetachProgram(link.RawDetachProgramOptions{Target: opts.Target, Program: prog, Attach: opts.Attach})
	cache := map[ebpf.ProgramID]*Program{}
	p, id, err := Read(dir, cache)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Allows(195, 0) || !p.Allows(195, 1) || p.Allows(195, 2) || cache[id] != p {
		t.Fatalf("read back %+v (id %d)", p, id)
	}
}
