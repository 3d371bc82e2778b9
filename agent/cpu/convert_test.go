package cpu

import (
	"slices"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
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

func TestTrimStack(t *testing.T) {
	full := make([]uint64, stackDepth)
	for i := range full {
		full[i] = uint64(i + 1)
	}
	for _, tc := range []struct {
		name      string
		in        []uint64
		want      []uint64
		truncated bool
	}{
		{"zero padded", []uint64{3, 2, 1, 0, 0}, []uint64{3, 2, 1}, false},
		{"empty", []uint64{0, 0}, []uint64{}, false},
		{"full", full, full, true},
	} {
		got, truncated := trimStack(tc.in)
		if !slices.Equal(got, tc.want) || truncated != tc.truncated {
			t.Errorf("%s: trimStack = %v, %v", tc.name, got, truncated)
		}
	}
}

func TestSumPerCPU(t *testing.T) {
	if got := sumPerCPU([]uint64{1, 0, 40, 1}); got != 42 {
		t.Errorf("sumPerCPU = %d", got)
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
	if key != 32 || val != 24 {
		t.Errorf("count key/value are %d/%d bytes, want 32/24", key, val)
	}
	// No implicit padding: every key byte is a named field the program sets.
	var k samplerCountKey
	if unsafe.Offsetof(k.Pad) != 4 || unsafe.Offsetof(k.StartBoottimeNs) != 8 ||
		unsafe.Offsetof(k.KernelStack) != 16 || unsafe.Offsetof(k.UserStack) != 24 {
		t.Errorf("count key layout %+v", k)
	}
	for _, name := range []string{samplerMapCounts0, samplerMapCounts1} {
		m := spec.Maps[name]
		if m.KeySize != uint32(key) || m.ValueSize != uint32(val) {
			t.Errorf("%s: key/value %d/%d bytes, Go has %d/%d", name, m.KeySize, m.ValueSize, key, val)
		}
	}
	if n := len(samplerStack{}.Ips); n != stackDepth {
		t.Errorf("struct stack has %d frames, Go reads %d", n, stackDepth)
	}
	for _, name := range []string{samplerMapStacks0, samplerMapStacks1} {
		// A hash map keyed by the stack's 64-bit hash, not a STACK_TRACE map
		// (whose bucket collisions lose stacks), and preallocated.
		m := spec.Maps[name]
		if m.Type != ebpf.Hash || m.KeySize != 8 || m.ValueSize != stackDepth*8 || m.Flags != 0 {
			t.Errorf("%s: %s, key/value %d/%d bytes, flags %#x; want a preallocated Hash, 8/%d", name, m.Type, m.KeySize, m.ValueSize, m.Flags, stackDepth*8)
		}
	}
	if m := spec.Maps[samplerMapScratch]; m.Type != ebpf.PerCPUArray || m.MaxEntries != 1 || m.ValueSize != stackDepth*8 {
		t.Errorf("scratch: %s with %d entries of %d bytes", m.Type, m.MaxEntries, m.ValueSize)
	}
	for _, name := range []string{samplerMapStats0, samplerMapStats1} {
		if m := spec.Maps[name]; m.MaxEntries != uint32(samplerStatIndexSTAT_MAX) {
			t.Errorf("%s has %d entries, want %d", name, m.MaxEntries, samplerStatIndexSTAT_MAX)
		}
	}
	if gs := spec.Maps[samplerMapGenSwitch]; gs.InnerMap == nil || gs.InnerMap.ValueSize != 4 {
		t.Errorf("gen_switch inner map %+v", gs.InnerMap)
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
