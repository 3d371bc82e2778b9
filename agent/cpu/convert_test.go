package cpu

import (
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/slurmscope/slurmscope/agent/bpf"
)

func TestCommString(t *testing.T) {
	var c [16]int8
	for i, b := range []byte("python3") {
		c[i] = int8(b)
	}
	if got := commString(c); got != "python3" {
		t.Errorf("commString = %q", got)
	}
	for i := range c { // 16 bytes, no NUL: the kernel never does this, but no overrun
		c[i] = 'a'
	}
	if got := commString(c); got != "aaaaaaaaaaaaaaaa" {
		t.Errorf("commString(full) = %q", got)
	}
	c[0] = -61 // 0xc3: bytes pass through unchanged
	if got := commString(c); got[0] != 0xc3 || len(got) != 16 {
		t.Errorf("commString(high byte) = %q", got)
	}
	if got := commString([16]int8{}); got != "" {
		t.Errorf("commString(empty) = %q", got)
	}
}

func TestStackFrames(t *testing.T) {
	var st bpf.UnwindStack
	for i := range st.Ips {
		st.Ips[i] = uint64(i + 1)
	}
	for _, tc := range []struct {
		name      string
		len, end  uint32
		want      int
		truncated bool
	}{
		{"stale beyond len", 3, 0, 3, false},
		{"empty", 0, 0, 0, false},
		{"unwinder's frame limit", 127, endFrameLimit, 127, true},
		{"kernel's full stack", 127, 0, 127, true},
		{"len beyond the array", 500, 0, 127, true},
	} {
		st.Len, st.End = tc.len, tc.end
		got, truncated := stackFrames(&st)
		if len(got) != tc.want || truncated != tc.truncated || (tc.want > 0 && got[0] != 1) {
			t.Errorf("%s: stackFrames = %d frames, %v", tc.name, len(got), truncated)
		}
	}
}

func TestSumPerCPU(t *testing.T) {
	if got := bpf.SumPerCPU([]uint64{1, 0, 40, 1}); got != 42 {
		t.Errorf("SumPerCPU = %d", got)
	}
}

// The committed object must keep the layout the Go side decodes; a C edit
// that breaks it without regenerating would fail here, without root.
func TestObjectLayout(t *testing.T) {
	spec, err := loadSampler()
	if err != nil {
		t.Fatal(err)
	}
	key, val := unsafe.Sizeof(samplerCountKey{}), unsafe.Sizeof(samplerCountVal{})
	if key != 40 || val != 24 {
		t.Errorf("count key/value are %d/%d bytes, want 40/24", key, val)
	}
	// No implicit padding: every key byte is a named field the program sets.
	var k samplerCountKey
	if unsafe.Offsetof(k.Setup) != 4 || unsafe.Offsetof(k.StartBoottimeNs) != 8 ||
		unsafe.Offsetof(k.KernelStack) != 16 || unsafe.Offsetof(k.UserStack) != 24 || unsafe.Offsetof(k.InterpStack) != 32 {
		t.Errorf("count key layout %+v", k)
	}
	for _, name := range []string{samplerMapCounts0, samplerMapCounts1} {
		m := spec.Maps[name]
		if m.KeySize != uint32(key) || m.ValueSize != uint32(val) {
			t.Errorf("%s: key/value %d/%d bytes, Go has %d/%d", name, m.KeySize, m.ValueSize, key, val)
		}
	}
	if n := len(bpf.UnwindStack{}.Ips); n != stackDepth {
		t.Errorf("struct unwind_stack has %d frames, Go reads %d", n, stackDepth)
	}
	stackSize := uint32(unsafe.Sizeof(bpf.UnwindStack{}))
	for _, name := range []string{samplerMapStacks0, samplerMapStacks1} {
		// A hash map keyed by the stack's 64-bit hash, not a STACK_TRACE map
		// (whose bucket collisions lose stacks), and preallocated.
		m := spec.Maps[name]
		if m.Type != ebpf.Hash || m.KeySize != 8 || m.ValueSize != stackSize || m.Flags != 0 {
			t.Errorf("%s: %s, key/value %d/%d bytes, flags %#x; want a preallocated Hash, 8/%d", name, m.Type, m.KeySize, m.ValueSize, m.Flags, stackSize)
		}
	}
	// Interpreter stacks are read straight from interp_stacks and the
	// interp_new events, as the shared types lay them out.
	if err := bpf.LayoutMatches(spec, "interp_new_event", bpf.InterpNewEvent{}); err != nil {
		t.Error(err)
	}
	if err := bpf.LayoutMatches(spec, "interp_stack", bpf.InterpStack{}); err != nil {
		t.Error(err)
	}
	for _, name := range []string{samplerMapInterpStacks0, samplerMapInterpStacks1} {
		m := spec.Maps[name]
		if m.Type != ebpf.Hash || m.KeySize != 8 || m.ValueSize != uint32(unsafe.Sizeof(bpf.InterpStack{})) || m.Flags != 0 {
			t.Errorf("%s: %s, key/value %d/%d bytes, flags %#x", name, m.Type, m.KeySize, m.ValueSize, m.Flags)
		}
	}
	if int(samplerStatIndexSTAT_MAX-samplerStatIndexSTAT_INTERP_STATUS) != int(bpf.InterpStatusMax) {
		t.Errorf("%d interpreter statuses counted, bpf.InterpStatusMax %d", samplerStatIndexSTAT_MAX-samplerStatIndexSTAT_INTERP_STATUS, bpf.InterpStatusMax)
	}
	for _, name := range []string{samplerMapStats0, samplerMapStats1} {
		if m := spec.Maps[name]; m.MaxEntries != uint32(samplerStatIndexSTAT_MAX) {
			t.Errorf("%s has %d entries, want %d", name, m.MaxEntries, samplerStatIndexSTAT_MAX)
		}
	}
	if gs := spec.Maps[samplerMapGenSwitch]; gs.InnerMap == nil || gs.InnerMap.ValueSize != 4 {
		t.Errorf("gen_switch inner map %+v", gs.InnerMap)
	}
	for _, v := range []string{samplerVarStackTables, samplerVarStackInterpreters} {
		if sv, ok := spec.Variables[v]; !ok || sv.Size() != 4 {
			t.Errorf("%s missing", v)
		}
	}
	if lic := spec.Programs[samplerProgSampleCpu].License; lic != "Dual BSD/GPL" {
		t.Errorf("license %q: bpf_get_stack needs a GPL-compatible one", lic)
	}
	if v, ok := spec.Variables[samplerVarExcludeTgid]; !ok || v.Size() != 4 {
		t.Error("exclude_tgid missing")
	}
	if v, ok := spec.Variables[samplerVarStackHashSeed]; !ok || v.Size() != 8 {
		t.Error("stack_hash_seed missing")
	}
}
