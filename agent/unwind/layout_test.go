package unwind

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/slurmscope/slurmscope/agent/unwind/cfi"
	"github.com/slurmscope/slurmscope/agent/unwind/unwindtest"
)

// TestLayoutMatchesHeader holds the Go side to agent/bpf/include/unwind.h as
// compiled into the test probe: struct sizes, enum values and the maps'
// shapes. It needs no privileges.
func TestLayoutMatchesHeader(t *testing.T) {
	spec, err := unwindtest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{
		"unwind_mapping_key": mappingKeySize, "unwind_mapping": mappingValSize, "unwind_proc": procValSize,
		"unwind_scratch": scratchSize, "unwind_row": 8, "unwind_cache_entry": cacheEntrySize, "unwind_table_header": 8,
	} {
		var s *btf.Struct
		if err := spec.Types.TypeByName(name, &s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Size != want {
			t.Errorf("struct %s: %d bytes in the header, %d in Go", name, s.Size, want)
		}
	}
	enum := func(name string) map[string]uint64 {
		var e *btf.Enum
		if err := spec.Types.TypeByName(name, &e); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out := map[string]uint64{}
		for _, v := range e.Values {
			out[v.Name] = v.Value
		}
		return out
	}
	ends := enum("unwind_end")
	for i, name := range []string{"STACK", "FRAME_LIMIT", "NO_ROW", "UNSUPPORTED", "READ_ERROR", "BAD_CFA", "LOOP_LIMIT", "NO_REGS", "MAX"} {
		if got, ok := ends["UNWIND_END_"+name]; !ok || got != uint64(i) {
			t.Errorf("UNWIND_END_%s = %d (%v), Go %d", name, got, ok, i)
		}
	}
	stats := enum("unwind_stat")
	for name, want := range map[string]int{
		"WALKS": statWalks, "FRAMES_TABLE": statFramesTable, "FRAMES_FP": statFramesFP, "FRAMES_UNKNOWN": statFramesUnknown,
		"FRAMES_EVICTED": statFramesEvicted, "FRAMES_SIGNAL": statFramesSignal, "PROC_UNKNOWN": statProcUnknown,
		"KERNEL_REGS": statKernelRegs, "CACHE_HITS": statCacheHits, "FORKED": statForked, "MAX": statMax,
	} {
		if got := stats["UNWIND_STAT_"+name]; got != uint64(want) {
			t.Errorf("UNWIND_STAT_%s = %d, Go %d", name, got, want)
		}
	}
	kinds := enum("unwind_kind")
	for k := cfi.KindGap; k <= cfi.KindUnsupported; k++ {
		names := map[cfi.Kind]string{cfi.KindGap: "GAP", cfi.KindRSP: "RSP", cfi.KindRBP: "RBP", cfi.KindPLT: "PLT", cfi.KindDerefRBP: "DEREF_RBP",
			cfi.KindSignal: "SIGNAL", cfi.KindFramePointer: "FRAME_POINTER", cfi.KindEnd: "END", cfi.KindUnsupported: "UNSUPPORTED"}
		if got, ok := kinds["UNWIND_KIND_"+names[k]]; !ok || got != uint64(k) {
			t.Errorf("UNWIND_KIND_%s = %d, cfi %d", names[k], got, k)
		}
	}
	// Map shapes: what MapReplacements checks at load time, checked here
	// without loading.
	for name, want := range mapSpecs(Options{}.withDefaults()) {
		got, ok := spec.Maps[name]
		if !ok {
			t.Errorf("no map %s in the header", name)
			continue
		}
		if got.Type != want.Type || got.KeySize != want.KeySize || got.ValueSize != want.ValueSize || got.Flags != want.Flags {
			t.Errorf("map %s: header %v %d/%d flags %#x, Go %v %d/%d flags %#x", name, got.Type, got.KeySize, got.ValueSize, got.Flags, want.Type, want.KeySize, want.ValueSize, want.Flags)
		}
		if want.Type == ebpf.ArrayOfMaps && (got.InnerMap == nil || got.InnerMap.Flags != want.InnerMap.Flags || got.InnerMap.ValueSize != want.InnerMap.ValueSize) {
			t.Errorf("map %s: inner map %+v, Go %+v", name, got.InnerMap, want.InnerMap)
		}
	}
}
