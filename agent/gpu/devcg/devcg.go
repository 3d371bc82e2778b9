// Package devcg reads which devices a cgroup v2 device program allows: the
// BPF_PROG_TYPE_CGROUP_DEVICE program slurmstepd attaches to a job's cgroup
// when cgroup.conf has ConstrainDevices=yes, the v2 form of the job's
// devices.allow and devices.deny. It is how the agent learns which GPUs
// Slurm gave a job without asking the job's (user-set) environment.
//
// It queries the programs attached to the directory (as `bpftool cgroup
// show` does), takes the one program's instructions as the kernel holds
// them, and reads them as slurmstepd writes them: six loads of the request,
// then one block per device (compare type, major, minor; return a verdict),
// then the default verdict. Any other program is an error: nothing is
// guessed from code it does not recognise.
package devcg

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// Device types as the device program's request names them
// (BPF_DEVCG_DEV_BLOCK, BPF_DEVCG_DEV_CHAR).
const (
	Block = 1
	Char  = 2
)

// Any is a rule's wildcard for its type, major or minor.
const Any = -1

// Rule is one device check of the program: the first rule that matches a
// request decides it.
type Rule struct {
	Type, Major, Minor int64 // Any where the rule does not check it
	Allow              bool
}

func (r Rule) matches(typ, major, minor int64) bool {
	return (r.Type == Any || r.Type == typ) && (r.Major == Any || r.Major == major) && (r.Minor == Any || r.Minor == minor)
}

// Program is what a device program says.
type Program struct {
	Rules   []Rule
	Default bool // the verdict for a device no rule names
}

// Allows reports whether a rule of the program names the character device
// major:minor and allows it: a grant, not the default that lets every job
// open /dev/null.
func (p *Program) Allows(major, minor uint32) bool {
	for _, r := range p.Rules {
		if r.matches(Char, int64(major), int64(minor)) {
			return r.Allow
		}
	}
	return false
}

// ErrNone means no device program is attached: the cgroup constrains no
// devices.
var ErrNone = errors.New("no device program attached")

// maxInsns bounds a program read: a block is at most 5 instructions, and a
// node has a few dozen devices.
const maxInsns = 64 << 10

// Read returns the device program attached to the cgroup directory dir, and
// its id, which changes when slurmstepd attaches another.
func Read(dir string, cache map[ebpf.ProgramID]*Program) (*Program, ebpf.ProgramID, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", dir, err)
	}
	switch len(res.Programs) {
	case 0:
		return nil, 0, ErrNone
	case 1:
	default:
		return nil, 0, fmt.Errorf("%s: %d device programs attached; slurmstepd attaches one", dir, len(res.Programs))
	}
	id := res.Programs[0].ID
	if p := cache[id]; p != nil {
		return p, id, nil
	}
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: program %d: %w", dir, id, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return nil, 0, fmt.Errorf("%s: program %d: %w", dir, id, err)
	}
	insns, err := info.Instructions()
	if err != nil {
		return nil, 0, fmt.Errorf("%s: program %d: %w", dir, id, err)
	}
	p, err := Parse(insns)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: program %d (%s): %w", dir, id, info.Name, err)
	}
	if cache != nil {
		cache[id] = p
	}
	return p, id, nil
}

// Parse reads a device program as slurmstepd writes it.
func Parse(insns asm.Instructions) (*Program, error) {
	if len(insns) > maxInsns {
		return nil, fmt.Errorf("%d instructions", len(insns))
	}
	prologue := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), asm.And.Imm32(asm.R2, 0xFFFF),
		asm.LoadMem(asm.R3, asm.R1, 0, asm.Word), asm.RSh.Imm32(asm.R3, 16),
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word), asm.LoadMem(asm.R5, asm.R1, 8, asm.Word),
	}
	if len(insns) < len(prologue)+2 {
		return nil, errors.New("too short for a device program")
	}
	for i, want := range prologue {
		if !same(insns[i], want) {
			return nil, fmt.Errorf("instruction %d is %v, not slurmstepd's %v", i, insns[i], want)
		}
	}
	p := &Program{}
	i := len(prologue)
	for {
		start := i
		r := Rule{Type: Any, Major: Any, Minor: Any}
		// The checks, each at most once and in this order: type (r2),
		// major (r4), minor (r5).
		var checks []asm.Instruction
		for i < len(insns) && isJNEImm(insns[i]) {
			checks = append(checks, insns[i])
			i++
		}
		if len(checks) > 3 {
			return nil, fmt.Errorf("instruction %d: %d checks in one block", start, len(checks))
		}
		next := 0
		for k, c := range checks {
			// Each check skips to the next block: past the remaining
			// checks and the verdict's two instructions.
			if int(c.Offset) != len(checks)-k+1 {
				return nil, fmt.Errorf("instruction %d jumps %d, not to the next block", start+k, c.Offset)
			}
			var field *int64
			for next < 3 && field == nil {
				switch {
				case next == 0 && c.Dst == asm.R2:
					field = &r.Type
				case next == 1 && c.Dst == asm.R4:
					field = &r.Major
				case next == 2 && c.Dst == asm.R5:
					field = &r.Minor
				}
				next++
			}
			if field == nil {
				return nil, fmt.Errorf("instruction %d checks %v out of order", start+k, c.Dst)
			}
			*field = int64(uint32(c.Constant)) // #nosec G115 -- a BPF immediate is 32 bits, compared as the unsigned 32-bit register
		}
		if i+1 >= len(insns) {
			return nil, fmt.Errorf("instruction %d: no verdict", i)
		}
		verdict, ok := verdictOf(insns[i])
		if !ok || insns[i+1].OpCode.JumpOp() != asm.Exit {
			return nil, fmt.Errorf("instruction %d is %v, not a verdict", i, insns[i])
		}
		i += 2
		if len(checks) == 0 {
			if i != len(insns) {
				return nil, fmt.Errorf("instruction %d follows the default verdict", i)
			}
			p.Default = verdict
			return p, nil
		}
		r.Allow = verdict
		p.Rules = append(p.Rules, r)
	}
}

func same(a, b asm.Instruction) bool {
	return a.OpCode == b.OpCode && a.Dst == b.Dst && a.Src == b.Src && a.Offset == b.Offset && a.Constant == b.Constant
}

func isJNEImm(ins asm.Instruction) bool {
	op := ins.OpCode
	return op.Class() == asm.JumpClass && op.JumpOp() == asm.JNE && op.Source() == asm.ImmSource
}

// verdictOf reads "r0 = 0" or "r0 = 1".
func verdictOf(ins asm.Instruction) (bool, bool) {
	if ins.OpCode != asm.Mov.Op(asm.ImmSource) || ins.Dst != asm.R0 || ins.Constant < 0 || ins.Constant > 1 {
		return false, false
	}
	return ins.Constant == 1, true
}
