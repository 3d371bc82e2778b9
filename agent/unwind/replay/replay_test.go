package replay_test

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/agent/unwind/cfi"
	"github.com/slurmscope/slurmscope/agent/unwind/replay"
)

// The snapshots record/ makes; a missing one fails, so that a recording
// that lost a workload does not pass by testing less.
var wantSnapshots = []string{
	"c-split", "c-qsort", "c-signal", "c-vdso",
	"cxx-except-find-fde", "cxx-except-personality", "cxx-deep",
	"py3.9", "py3.10", "py3.11", "py3.12", "py3.13", "debian-py3.11",
}

func snapshots(t testing.TB) []*replay.Snapshot {
	t.Helper()
	ss, err := replay.LoadAll("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range ss {
		names = append(names, s.Name)
	}
	for _, n := range wantSnapshots {
		if !slices.Contains(names, n) {
			t.Fatalf("snapshot %s missing (have %v): go run ./agent/unwind/replay/record", n, names)
		}
	}
	return ss
}

// TestFiles: every trimmed file is the image recorded (its hash, its
// size, the original's build id), and small.
func TestFiles(t *testing.T) {
	for _, s := range snapshots(t) {
		for i, f := range s.Files {
			im := s.FileImage(i)
			if im.Size != f.Size || im.SHA256() != f.SHA256 || im.Kept() != f.Kept {
				t.Errorf("%s: %s: image of %d bytes, %d kept, sha256 %s; recorded %d, %d, %s", s.Name, f.Path, im.Size, im.Kept(), im.SHA256(), f.Size, f.Kept, f.SHA256)
			}
			if got := replay.BuildID(im); got != f.BuildID {
				t.Errorf("%s: %s: build id %q, recorded %q", s.Name, f.Path, got, f.BuildID)
			}
			if f.Kept > 64<<10 {
				t.Errorf("%s: %s: %d bytes kept: trimming keeps too much", s.Name, f.Path, f.Kept)
			}
		}
	}
}

// frameFile is the mapping, file and table pc of a recorded frame.
type frameFile struct {
	m      replay.Mapping
	file   int
	vaddr  uint64 // the frame's pc as a link-time address of its file
	look   uint64 // the address its row and symbol are looked up at
	exact  bool   // not a return address: the leaf, or the pc a signal interrupted
	module string
}

func locate(t *testing.T, s *replay.Snapshot, tables map[int]*cfi.Table, i int) frameFile {
	t.Helper()
	fr := s.Frames[i]
	m, ok := s.MappingAt(fr.PC)
	if !ok || m.File < 0 {
		t.Fatalf("frame %d (%s) at 0x%x: in no mapped file", i, fr.Fn, fr.PC)
	}
	tab := tables[m.File]
	v, ok := tab.Vaddr(fr.PC - m.Start + m.Offset)
	if !ok {
		t.Fatalf("frame %d at 0x%x: in no executable segment of %s", i, fr.PC, s.Files[m.File].Path)
	}
	ff := frameFile{m: m, file: m.File, vaddr: v, look: v, exact: i == 0 || s.Frames[i-1].Signal, module: s.Files[m.File].Path}
	if !ff.exact {
		ff.look = v - 1
	}
	return ff
}

func buildTables(t *testing.T, s *replay.Snapshot) map[int]*cfi.Table {
	t.Helper()
	out := map[int]*cfi.Table{}
	for i := range s.Files {
		im := s.FileImage(i)
		tab, err := cfi.Build(im, im.Size, cfi.Limits{})
		if err != nil {
			t.Fatalf("%s: %v", s.Files[i].Path, err)
		}
		out[i] = tab
	}
	return out
}

// Offsets in the kernel's rt_sigframe at __restore_rt (x86-64 ABI; as
// UNWIND_SIGCTX_* in unwind.h): rsp points at the ucontext, whose
// sigcontext starts at 40.
const (
	sigctxRBP = 40 + 80
	sigctxRSP = 40 + 120
	sigctxRIP = 40 + 128
)

// TestTableRules: for every recorded frame, the row the table builder
// makes from the trimmed file at the frame's pc gives the CFA and return
// address of the next frame gdb found (its sp and pc), and where the row
// says the caller's rbp is saved, the value gdb has for it; the outermost
// frame's row ends the stack. No BPF: the rules are applied here, to the
// recorded stack, as unwind.h applies them.
func TestTableRules(t *testing.T) {
	for _, s := range snapshots(t) {
		t.Run(s.Name, func(t *testing.T) { checkRules(t, s) })
	}
}

func checkRules(t *testing.T, s *replay.Snapshot) {
	tables := buildTables(t, s)
	stack := s.StackImage()
	read8 := func(addr uint64) uint64 {
		var b [8]byte
		if err := stack.Read(b[:], addr); err != nil {
			t.Fatalf("stack: %v", err)
		}
		return binary.LittleEndian.Uint64(b[:])
	}
	kinds := map[string]int{}
	for i, fr := range s.Frames {
		ff := locate(t, s, tables, i)
		rule := tables[ff.file].Lookup(ff.look)
		kinds[rule.Kind.String()]++
		what := fmt.Sprintf("frame %d (%s in %s, pc 0x%x, rule %v)", i, fr.Fn, ff.module, fr.PC, rule)
		if i == len(s.Frames)-1 {
			if s.End == "end_of_stack" && rule.Kind != cfi.KindEnd {
				t.Errorf("%s: the outermost frame's rule does not end the stack", what)
			}
			break
		}
		next := s.Frames[i+1]
		var cfa uint64
		switch rule.Kind {
		case cfi.KindRSP:
			cfa = fr.SP + uint64(int64(rule.CFAOffset))
		case cfi.KindRBP, cfi.KindDerefRBP:
			if fr.BP == nil {
				t.Fatalf("%s: gdb has no rbp for the frame", what)
			}
			cfa = *fr.BP + uint64(int64(rule.CFAOffset))
			if rule.Kind == cfi.KindDerefRBP {
				cfa = read8(cfa)
			}
		case cfi.KindPLT:
			cfa = fr.SP + uint64(int64(rule.CFAOffset))
			if int32(fr.PC&15) >= rule.RBPOffset {
				cfa += 8
			}
		case cfi.KindSignal:
			pc, sp, bp := read8(fr.SP+sigctxRIP), read8(fr.SP+sigctxRSP), read8(fr.SP+sigctxRBP)
			if !fr.Signal || pc != next.PC || sp != next.SP || (next.BP != nil && bp != *next.BP) {
				t.Errorf("%s: the signal context holds pc 0x%x sp 0x%x bp 0x%x; gdb: signal frame %v, next pc 0x%x sp 0x%x", what, pc, sp, bp, fr.Signal, next.PC, next.SP)
			}
			continue
		default:
			t.Fatalf("%s: no rule leads on, gdb found a caller", what)
		}
		if cfa != next.SP {
			t.Errorf("%s: CFA 0x%x, gdb's next sp 0x%x", what, cfa, next.SP)
			continue
		}
		if ra := read8(cfa - 8); ra != next.PC {
			t.Errorf("%s: return address 0x%x, gdb's next pc 0x%x", what, ra, next.PC)
		}
		var bp uint64
		switch rule.RBP {
		case cfi.RBPAtCFA:
			bp = read8(cfa + uint64(int64(rule.RBPOffset)))
		case cfi.RBPAtRBP:
			bp = read8(*fr.BP + uint64(int64(rule.RBPOffset)))
		default:
			continue
		}
		if next.BP != nil && bp != *next.BP {
			t.Errorf("%s: the caller's rbp 0x%x, gdb's 0x%x", what, bp, *next.BP)
		}
	}
	t.Logf("%d frames by rule kind %v", len(s.Frames), kinds)
}

// TestSymbols: the trimmed files still name every frame as the originals
// did, and the frames run from the workload's leaf to main.
func TestSymbols(t *testing.T) {
	for _, s := range snapshots(t) {
		t.Run(s.Name, func(t *testing.T) { checkSymbols(t, s) })
	}
}

func checkSymbols(t *testing.T, s *replay.Snapshot) {
	names := nativeNames(t, s)
	for i, fr := range s.Frames {
		if names[i].Function != fr.Sym {
			t.Errorf("frame %d at 0x%x: named %q, recorded %q", i, fr.PC, names[i].Function, fr.Sym)
		}
	}
	var fns []string
	for _, f := range names {
		fns = append(fns, f.Function)
	}
	if !slices.Contains(fns, "main") && !slices.Contains(fns, "Py_BytesMain") {
		t.Errorf("no main among %q", fns)
	}
}

// nativeNames symbolises the recorded frames from the trimmed files, as
// the agent's symbolizer would hand them to interp.Splice.
func nativeNames(t *testing.T, s *replay.Snapshot) []symbolize.Frame {
	t.Helper()
	tables := buildTables(t, s)
	syms := map[int]*replay.Symbols{}
	var out []symbolize.Frame
	for i, fr := range s.Frames {
		ff := locate(t, s, tables, i)
		if syms[ff.file] == nil {
			sy, err := replay.ReadSymbols(s.FileImage(ff.file))
			if err != nil {
				t.Fatal(err)
			}
			syms[ff.file] = sy
		}
		out = append(out, symbolize.Frame{Function: syms[ff.file].Name(ff.look), Module: ff.module, Address: fr.PC})
	}
	return out
}

// TestPythonFrames: agent/python's Tracker, given the snapshot's mappings,
// trimmed files and recorded memory, finds the interpreter, resolves the
// raw frames the walk read to the functions, files and lines the script
// saw itself, and interp.Splice puts each eval-loop frame's Python frames
// in its place in the native stack gdb unwound.
func TestPythonFrames(t *testing.T) {
	n := 0
	for _, s := range snapshots(t) {
		if s.Python == nil {
			continue
		}
		n++
		t.Run(s.Name, func(t *testing.T) { checkPython(t, s) })
	}
	if n < 6 {
		t.Fatalf("%d CPython snapshots, want 6", n)
	}
}

func checkPython(t *testing.T, s *replay.Snapshot) {
	stack, err := replay.ResolvePython(replay.SnapshotPython{S: s}, 4242, s.Python.Raw, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []replay.PyFrame
	for _, f := range stack.Frames {
		got = append(got, replay.PyFrame{Function: f.Function, File: f.File, Line: f.Line, Entry: f.Entry})
	}
	if !slices.Equal(got, s.Python.Expected) {
		t.Fatalf("resolved\n%+v\nthe script saw\n%+v", got, s.Python.Expected)
	}

	native := nativeNames(t, s)
	// What the splice must make: the k-th eval-loop frame from the
	// leaf replaced by the script's k-th group of frames (each
	// group ends at an entry frame), everything else in place.
	var groups [][]replay.PyFrame
	for i, f := range s.Python.Expected {
		if i == 0 || s.Python.Expected[i-1].Entry {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], f)
	}
	var want []string
	evals := 0
	for _, f := range native {
		if !(python.CPython{}).EvalFrame(f) {
			want = append(want, f.Function+" "+f.Module)
			continue
		}
		if evals >= len(groups) {
			t.Fatalf("%d eval-loop frames, %d groups of Python frames", evals+1, len(groups))
		}
		for _, p := range groups[evals] {
			want = append(want, fmt.Sprintf("%s (%s:%d) %s", p.Function, p.File, p.Line, python.Module))
		}
		evals++
	}
	if evals != len(groups) {
		t.Fatalf("%d eval-loop frames in the native stack, %d groups of Python frames", evals, len(groups))
	}
	var spliced []string
	for _, f := range interp.Splice(native, stack) {
		if f.Module == python.Module {
			spliced = append(spliced, fmt.Sprintf("%s (%s:%d) %s", f.Function, f.File, f.Line, f.Module))
		} else {
			spliced = append(spliced, f.Function+" "+f.Module)
		}
	}
	if !slices.Equal(spliced, want) {
		t.Fatalf("spliced\n  %s\nwant\n  %s", strings.Join(spliced, "\n  "), strings.Join(want, "\n  "))
	}
}
