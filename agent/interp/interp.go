// Package interp is the contract between the stack capture
// (agent/stackwalk) and the interpreters whose frames it walks. Each
// interpreter is one package (agent/python), one BPF header (listed in
// ../bpf/include/interpreters.h) and one line in the agent's list of
// interpreters (agent/cli); the samplers, the daemon and source.Sample see
// only what is here.
//
// Per interpreter, as the OpenTelemetry eBPF profiler splits it: an
// Interpreter (the kind: its name, its BPF kind, how to recognise its
// frames among the native ones) opens one Instance for the agent, which
// finds the interpreter's processes when the capture announces them, writes
// their entries into the capture's process table, names the raw frames the
// probes recorded, and forgets processes that exited. What it reads of a
// process and its files comes through Env, from agent/procfs.
//
// An Annotator is the other kind of thing the capture records beside the
// native frames: root frames of every process, whatever its interpreter
// (agent/nvtx: the thread's open NVTX ranges), which Splice puts at the
// root side of the stack.
package interp

import (
	"io"
	"io/fs"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// Kind is an interpreter's id in the BPF capture: the value of its enum in
// its header, in interp_procs entries and in the stacks it walks.
type Kind uint32

// MaxKind bounds Kind: stack.h enables interpreters by a 32-bit mask.
const MaxKind Kind = 31

// Process is a process as the BPF side names it.
type Process struct {
	PID     uint32
	StartNs uint64 // the thread-group leader's start_boottime, in ns
	MM      uint64 // its address space (task->mm) when announced; 0 when not known
}

// ID is the process as agent/procfs names it.
func (p Process) ID() procfs.ID {
	return procfs.ID{PID: int(p.PID), Start: procfs.StartFromBoottime(p.StartNs)}
}

// Interpreter is one kind of interpreter the capture can walk.
type Interpreter interface {
	Splicer
	// Name names it in its flag (--<name>-frames), its metrics'
	// interpreter label and the logs: "python".
	Name() string
	// Help is its flag's help text.
	Help() string
	Kind() Kind
	// Open starts its state in the agent.
	Open(env Env) (Instance, error)
}

// Splicer is what Splice needs of an interpreter.
type Splicer interface {
	// Module is the module of its frames in a profile ("[python]").
	Module() string
	// EvalFrame reports whether a native frame is the interpreter's eval
	// loop, which Splice replaces by the frames it was running.
	EvalFrame(f symbolize.Frame) bool
}

// Instance is an interpreter's state in the agent. It is safe for
// concurrent use.
type Instance interface {
	// Announce looks at a live process that the capture sampled without
	// any interpreter's entry, and sets it up when it is this
	// interpreter's. Looking at a process that is not should be cheap
	// (per file identity, cached).
	Announce(p Process)
	// Fork sets up child from parent's state, reading nothing: the BPF
	// side gave the forked child a copy of its parent's entry of this
	// kind. It reports whether the parent was known.
	Fork(child, parent Process) bool
	// Retry looks again at processes still starting (an interpreter not
	// initialised yet, a library not mapped yet); it reports whether any
	// remain, in which case it is called again within milliseconds.
	Retry() bool
	// Resolve names the raw frames of one sample of p, innermost first.
	// Called soon after the sample, while the process most likely lives.
	Resolve(p Process, raw *bpf.InterpStack) Stack
	// Forget drops a process that exited.
	Forget(p procfs.ID)
	// Collectors are its metrics.
	Collectors() []prometheus.Collector
}

// Env is what the capture gives an interpreter.
type Env struct {
	Maps  MapsReader
	Open  Opener
	Procs Table
	Arch  string // runtime.GOARCH of the agent, which is the node's
	// Ready is told of each process once it is set up: its samples get
	// the interpreter's frames from then on.
	Ready func(Process)
	// Owner names the job (the memory budget's owner) of a process, or
	// "" when it is not known; nil: none known. An interpreter meters the
	// work of reading a job's processes per job, and lets one job's reads
	// that stall (a page on the job's own FUSE mount) stop only that
	// job's. It must be cheap: a cache lookup, no I/O.
	Owner func(Process) string
	Log   *slog.Logger
}

// MapsReader lists a process's mappings (agent/procfs).
type MapsReader interface {
	Maps(pid int) ([]procfs.Mapping, error)
}

// Opener opens the file behind a mapping of a process: procfs's one
// function for files a job controls (resolved inside the process's root
// without following links, regular files only, sizes checked).
type Opener interface {
	OpenMapped(pid int, m procfs.Mapping) (File, error)
	// StatMapped identifies the mapped file without opening it for
	// reading (procfs.Mapped.StatMapping): a file inspected before is
	// not read again.
	StatMapped(pid int, m procfs.Mapping) (procfs.FileInfo, error)
}

// File is an opened mapped file.
type File interface {
	io.ReaderAt
	io.Closer
	Stat() (fs.FileInfo, error)
}

// Table is the capture's process table (interp_procs) as one interpreter
// writes it: data is its own per-process struct, at most
// bpf.InterpProcData bytes.
type Table interface {
	Put(p Process, data []byte) error
	Delete(pid uint32) error
}

// Frame is a resolved interpreter frame.
type Frame struct {
	Function string
	File     string
	Line     int // 0 when unknown
	// Entry marks the outermost frame of one run of the eval loop: the
	// frames up to it replace one native eval-loop frame (Splice).
	Entry bool
}

// Stack is one sample's resolved interpreter frames, innermost first.
type Stack struct {
	Frames []Frame
	// Truncated: the stack was cut at its outer end.
	Truncated bool
	// By is the interpreter that ran them; nil with no frames.
	By Splicer
	// Root are named frames that go at the root side of the whole stack,
	// innermost first: annotations of the thread captured beside its
	// frames (its open NVTX ranges), by an Annotator.
	Root []symbolize.Frame
}

// Annotator names root frames: what the capture records of a thread
// beside its native and interpreter frames, for every process whatever its
// interpreter (agent/nvtx: the NVTX ranges open on the thread). Its BPF
// half appends them to the thread's interp_stack after the interpreter's
// frames (interp.h's root frames), each frame's check word its Tag.
type Annotator interface {
	// Name names it in logs.
	Name() string
	// Const is the __u32 constant of stack.h that turns its capture on.
	Const() string
	// Tag is the check word of its root frames.
	Tag() uint64
	// Root names one sample's root frames of p, outermost first as
	// captured; truncated: inner ones were cut. It returns them innermost
	// first, as Stack.Root holds them. Called soon after the sample; it
	// must not block.
	Root(p Process, frames []bpf.InterpFrame, truncated bool) []symbolize.Frame
}
