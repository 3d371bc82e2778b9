package unwind

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Indexes into unwind_stats (enum unwind_stat and enum unwind_end in
// agent/bpf/include/unwind.h; TestLayoutMatchesHeader holds them to it).
const (
	EndStack = iota
	EndFrameLimit
	EndNoRow
	EndUnsupported
	EndReadError
	EndBadCFA
	EndLoopLimit
	EndNoRegs
	endMax
)

const (
	statWalks = endMax + iota
	statFramesTable
	statFramesFP
	statFramesUnknown
	statFramesEvicted
	statFramesSignal
	statProcUnknown
	statKernelRegs
	statCacheHits
	statForked
	statMax
)

// EndReasons names enum unwind_end, for metric labels.
var EndReasons = [endMax]string{"end_of_stack", "frame_limit", "no_row", "unsupported", "read_error", "bad_cfa", "loop_limit", "no_regs"}

// Counters are the BPF side's counters, summed over CPUs: monotonic,
// ready for _total metrics.
type Counters struct {
	Walks uint64
	// Ends counts walks by how they ended, indexed like EndReasons.
	Ends [endMax]uint64
	// Frames by how they were unwound.
	FramesTable, FramesFramePointer, FramesUnknownMapping, FramesEvictedTable, SignalFrames uint64
	// ProcessUnknown counts walks of processes whose mappings are not
	// loaded (frame pointers only); KernelRegs walks that took the user
	// registers from the task because the sample hit kernel mode.
	ProcessUnknown, KernelRegs uint64
	// RowCacheHits counts frames whose row came from the per-CPU row cache.
	RowCacheHits uint64
	// Forked counts walks of forked children not loaded yet, unwound
	// through their parent's mappings.
	Forked uint64
}

func readCounters(m *ebpf.Map) (Counters, error) {
	var c Counters
	var vals []uint64
	for i := uint32(0); i < statMax; i++ {
		if err := m.Lookup(i, &vals); err != nil {
			return c, fmt.Errorf("unwind: read stats: %w", err)
		}
		var sum uint64
		for _, v := range vals {
			sum += v
		}
		switch {
		case i < endMax:
			c.Ends[i] = sum
		case i == statWalks:
			c.Walks = sum
		case i == statFramesTable:
			c.FramesTable = sum
		case i == statFramesFP:
			c.FramesFramePointer = sum
		case i == statFramesUnknown:
			c.FramesUnknownMapping = sum
		case i == statFramesEvicted:
			c.FramesEvictedTable = sum
		case i == statFramesSignal:
			c.SignalFrames = sum
		case i == statProcUnknown:
			c.ProcessUnknown = sum
		case i == statKernelRegs:
			c.KernelRegs = sum
		case i == statCacheHits:
			c.RowCacheHits = sum
		case i == statForked:
			c.Forked = sum
		}
	}
	return c, nil
}

// Stats describe the loader's tables: gauges (current values) and
// counters (monotonic), ready for /metrics.
type Stats struct {
	TableBytes       int64 // gauge: bytes of tables loaded into BPF
	TableBudgetBytes int64 // gauge: Options.MaxTableBytes
	Tables           int   // gauge: tables loaded
	Files            int   // gauge: files mapped by loaded processes, and idle ones
	IdleTables       int   // gauge: tables kept loaded that no process maps (Options.IdleTableBytes)
	IdleTableBytes   int64 // gauge: their bytes (within TableBytes)
	Processes        int   // gauge: processes loaded
	MappingEntries   int   // gauge: LPM entries

	TablesBuilt        uint64  // files parsed
	BuildSeconds       float64 // time spent parsing
	BuildErrors        uint64  // files without a usable table because of an error (unwound by frame pointers)
	BuildsDeferred     uint64  // builds put off: the job had read its allowance; built at a later sync
	FramePointerFiles  uint64  // files without unwind information (frame pointers by design)
	TablesEvicted      uint64  // loaded tables evicted for the budget
	TablesUnloaded     uint64  // tables unloaded because no process maps them any more
	IdleReused         uint64  // idle tables a new process mapped: builds saved
	TablesOverBudget   uint64  // tables larger than the whole budget, never loaded
	OpenErrors         uint64  // mapped files that could not be opened
	MapsErrors         uint64  // processes whose maps could not be read
	MappingsDropped    uint64  // mappings not loaded: the LPM map or process map was full
	ProcessesDiscarded uint64  // processes not loaded: the process map was full
}
