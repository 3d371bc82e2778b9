package bpf

import "github.com/cilium/ebpf"

// The structs and flags of include/stack.h and interp.h, as user space
// reads and writes them (generated: gen.go).
type (
	StackEvent  = stackStackEvent
	InterpStack = stackInterpStack
	InterpFrame = stackInterpFrame
	InterpProc  = stackInterpProc
	UnwindStack = stackUnwindStack
	// InterpStatus is the outcome of one interpreter walk.
	InterpStatus = stackInterpStatus
	// NVTXThreadKey and NVTXThreadVal are an nvtx_threads entry (nvtx.h).
	NVTXThreadKey = stackNvtxThreadKey
	NVTXThreadVal = stackNvtxThreadVal
)

const (
	EventNoTables = uint32(stackStackEventFlagSTACK_EVENT_NO_TABLES)
	EventNoInterp = uint32(stackStackEventFlagSTACK_EVENT_NO_INTERP)
	EventFork     = uint32(stackStackEventFlagSTACK_EVENT_FORK)
	// EventUnknownCode: a loaded process ran code its tables miss.
	EventUnknownCode = uint32(stackStackEventFlagSTACK_EVENT_UNKNOWN_CODE)

	SetupNative = uint32(stackStackSetupFlagSTACK_SETUP_NATIVE)
	SetupInterp = uint32(stackStackSetupFlagSTACK_SETUP_INTERP)

	InterpTruncated = uint32(stackInterpStackFlagINTERP_STACK_TRUNCATED)
	// InterpRootTruncated: the thread had more root frames than a stack
	// keeps (InterpRootFrames); the inner ones were cut.
	InterpRootTruncated = uint32(stackInterpStackFlagINTERP_STACK_ROOT_TRUNCATED)
	// InterpRootShift: bits 8-15 of a stack's flags count its root
	// frames, the last of its Len frames, outermost first.
	InterpRootShift = uint32(stackInterpStackFlagINTERP_STACK_ROOT_SHIFT)

	// NVTXStat* index nvtx_stats (nvtx.h): the reads of threads' NVTX
	// structs at samples, by outcome.
	NVTXStatRead       = uint32(stackNvtxStatNVTX_STAT_READ)
	NVTXStatReadFailed = uint32(stackNvtxStatNVTX_STAT_READ_FAILED)
	NVTXStatInvalid    = uint32(stackNvtxStatNVTX_STAT_INVALID)
	NVTXStatOtherTID   = uint32(stackNvtxStatNVTX_STAT_OTHER_TID)
	NVTXStatTruncated  = uint32(stackNvtxStatNVTX_STAT_TRUNCATED)
	NVTXStatMax        = uint32(stackNvtxStatNVTX_STAT_MAX)

	// StackStatForkShare indexes stack_stats: forks refused their
	// origin's state (STACK_FORK_SHARE).
	StackStatForkShare = uint32(stackStackStatSTACK_STAT_FORK_SHARE)
	// StackStatForkJobShare: forks refused because their job had its
	// share (stack_fork_job_share) of live handed-over forks.
	StackStatForkJobShare = uint32(stackStackStatSTACK_STAT_FORK_JOB_SHARE)

	InterpOK         = stackInterpStatusINTERP_STATUS_OK
	InterpNone       = stackInterpStatusINTERP_STATUS_NONE
	InterpNoThread   = stackInterpStatusINTERP_STATUS_NO_THREAD
	InterpThreadRead = stackInterpStatusINTERP_STATUS_THREAD_READ
	InterpThreadsMax = stackInterpStatusINTERP_STATUS_THREADS_MAX
	InterpFrameRead  = stackInterpStatusINTERP_STATUS_FRAME_READ
	InterpStatusMax  = stackInterpStatusINTERP_STATUS_MAX
)

// InterpStackFrames and InterpProcData are INTERP_STACK_FRAMES and
// INTERP_PROC_DATA (interp.h), as the generated arrays hold them: a
// stack's frames are at most InterpMaxFrames of an interpreter's walk
// (INTERP_MAX_FRAMES) and at most InterpRootFrames root frames
// (INTERP_ROOT_FRAMES: NVTX ranges).
const (
	InterpStackFrames = len(InterpStack{}.Frames)
	InterpMaxFrames   = 64
	InterpRootFrames  = InterpStackFrames - InterpMaxFrames
	InterpProcData    = len(InterpProc{}.Data)
)

// RootFrames splits a stack's frames: the interpreter walk's n first
// ones, and the root frames after them (outermost first), as its flags
// count them, bounded by Len and the arrays.
func (s *InterpStack) RootFrames() (n uint32, root []InterpFrame) {
	l := min(s.Len, uint32(InterpStackFrames))                             // #nosec G115 -- a small array length
	r := min((s.Flags>>InterpRootShift)&0xff, l, uint32(InterpRootFrames)) // #nosec G115 -- likewise
	return l - r, s.Frames[l-r : l]
}

var interpStatusNames = [...]string{"ok", "none", "no_thread_state", "thread_read", "threads_max", "frame_read"}

// String is the status as a metric label value.
func (s stackInterpStatus) String() string {
	if int(s) < len(interpStatusNames) {
		return interpStatusNames[s]
	}
	return "unknown"
}

// StackSpec is the spec of include/stack.h's maps, as every program that
// includes it declares them: agent/stackwalk creates them from it once.
func StackSpec() (*ebpf.CollectionSpec, error) { return loadStack() }
