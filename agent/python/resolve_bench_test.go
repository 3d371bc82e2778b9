package python

import (
	"testing"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/interp"
)

// hugeTable is a 3.11+ location table of n bytes: one code unit per entry,
// each a line further ("no columns" form, delta +1).
func hugeTable(n int) []byte {
	tab := make([]byte, n)
	for i := 0; i+1 < n; i += 2 {
		tab[i], tab[i+1] = 0x80|locNoColumns<<3, 2
	}
	return tab
}

// deepStack sets up, in f's process at base, depth distinct code objects whose line
// tables are tableBytes each, and returns a stack running all of them, each
// at an instruction near its table's end (a decoder's worst case).
func deepStack(f *fakeProc, base uint64, depth, tableBytes int) *bpf.InterpStack {
	l := &f.l
	var raw []RawFrame
	for i := range depth {
		code := base + uint64(i)*0x30000
		name, file, table := code+0x1000, code+0x2000, code+0x10000
		f.mem.seg[code] = make([]byte, 0x10000+int(l.BytesData)+tableBytes)
		f.mem.put64(code+uint64(l.ObType), codeType)
		f.mem.put64(code+uint64(l.CodeFilename), file)
		f.mem.put64(code+uint64(l.CodeName), name)
		f.mem.put64(code+uint64(l.CodeQualname), name)
		f.mem.put64(code+uint64(l.CodeLineTable), table)
		f.mem.put32(code+uint64(l.CodeFirstLineNo), 1)
		f.mem.str(l, name, "deep_function", 13)
		f.mem.str(l, file, "/job/deep.py", 12)
		f.mem.put64(table+uint64(l.VarSize), uint64(tableBytes))
		copy(f.mem.seg[code][0x10000+int(l.BytesData):], hugeTable(tableBytes))
		check := file ^ (name<<1 | name>>63)
		// Near the end: each entry is one code unit (2 bytes of code).
		raw = append(raw, RawFrame{Code: code, Check: check, Lasti: int32(l.CodeAdaptive) + int32(tableBytes) - 4})
	}
	return stackOf(raw...)
}

// BenchmarkResolveDeepHugeStack: a 64-frame stack through functions whose
// line tables are 64 KiB each, resolved again and again (the cache warm),
// as a job of deep stacks makes the agent do at each drain.
var pyProc = interp.Process{PID: 42, StartNs: 5, MM: 1}

func BenchmarkResolveDeepHugeStack(b *testing.B) {
	f := newFakeProc(nil, nil)
	f.tracker.o.ReadBytesPerSecond = 1 << 40
	f.tracker.o.MaxProcessCodeBytes, f.tracker.o.MaxCodeBytes = 1<<30, 1<<30
	f.notify(1)
	s := deepStack(f, 0x1000000, 64, maxLineTable)
	st := f.tracker.Resolve(pyProc, s)
	if len(st.Frames) != 64 || st.Frames[0].Function != "deep_function" || st.Frames[0].Line < 1000 {
		b.Fatalf("frames %+v", st.Frames[:1])
	}
	b.ResetTimer()
	for range b.N {
		f.tracker.Resolve(pyProc, s)
	}
}
