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

// InterpMaxFrames and InterpProcData are INTERP_MAX_FRAMES and
// INTERP_PROC_DATA (interp.h), as the generated arrays hold them.
const (
	InterpMaxFrames = len(InterpStack{}.Frames)
	InterpProcData  = len(InterpProc{}.Data)
)

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
