// Package source is the contract between the agent's profile sources (the
// eBPF CPU sampler, the GPU kernel tracer, any later profile type) and the
// daemon, which attributes, symbolises, builds and ships what they deliver
// without knowing which source it came from.
//
// A new profile type is one package that implements Kind and Source, its
// entry in schema/profiles.go (with its own metrics, if any, in
// schema/metrics.go), and one line in the list of kinds the agent runs
// (agent/cli).
package source

import (
	"flag"
	"log/slog"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// Sample is one stack of one process and the values it stands for.
type Sample struct {
	Proc procfs.ID
	// Frames are already named, innermost first, and go before the
	// symbolised Kernel and User frames: a leaf the source knows by name
	// (a GPU kernel), or a whole stack it named itself.
	Frames []symbolize.Frame
	// Kernel and User are instruction addresses, innermost first, as the
	// source captured them (agent/symbolize says how return addresses are
	// treated). Either may be nil. Samples may share them: read only.
	Kernel, User []uint64
	// Interp are the sampled thread's interpreter frames, as
	// Stacks.Resolve named them; the daemon splices them into the
	// symbolised User frames (interp.Splice), for every source alike.
	Interp interp.Stack
	// Setup is what of the stack capture was ready for the process when
	// the sample was taken; 0 where the source does not say.
	Setup Setup
	// Labels are the source's own sample labels (the GPU a kernel ran on);
	// the daemon adds the job step.
	Labels []profiles.Label
	// Values holds one value per sample type of the source's profile type.
	Values []int64
}

// Setup is what of the stack capture was ready for a process when one of
// its samples was taken (stack.h's STACK_SETUP_* bits). Until then its
// samples lack callers (SetupNative: its unwind tables) or interpreter
// frames (SetupInterp: an interpreter's state): the stack tests judge the
// samples taken once their workload was set up.
type Setup uint32

const (
	SetupNative = Setup(bpf.SetupNative)
	SetupInterp = Setup(bpf.SetupInterp)
)

// String is the setup as a label value (schema.StackSetupLabel).
func (s Setup) String() string {
	switch s & (SetupNative | SetupInterp) {
	case SetupNative:
		return "native"
	case SetupInterp:
		return "interpreter"
	case SetupNative | SetupInterp:
		return "native_interpreter"
	}
	return "none"
}

// Info describes a source to the daemon. It does not change.
type Info struct {
	// Name names the source in logs and in the stage label of the agent's
	// error counter ("cpu", "gpu").
	Name   string
	Type   profiles.Type
	Period int64 // the pprof period, in Type.PeriodType's unit
	// Counted is the index of the value of each sample that Drained and
	// Unattributed add up (samples for CPU, nanoseconds for GPU, which the
	// GPU source's counters export in seconds).
	Counted int
	// Drained counts every sample drained; Unattributed the samples put in
	// no profile, by reason (exited, other_node, not_in_job). The daemon
	// counts and exports both.
	Drained      prometheus.Counter
	Unattributed CounterVec
}

// CounterVec is what the daemon needs of a counter vector: prometheus's,
// or one that sums whole units exactly and exports them in the metric's
// base unit (promschema.ScaledCounterVec).
type CounterVec interface {
	prometheus.Collector
	WithLabelValues(lvs ...string) prometheus.Counter
}

// Batch is what one Drain delivers.
type Batch struct {
	Samples []Sample
	// Warn is a problem that cost no sample (hotplug not followed, a
	// counter not read): the batch is used, and Warn counted and logged
	// when new, then now and then with its count.
	Warn error
}

// Source is a profile source.
type Source interface {
	Info() Info
	// Drain returns what the source collected since the previous Drain.
	// An error means nothing was drained: the source's interval stays
	// open, and the next Drain covers it.
	Drain() (Batch, error)
}

// ProcessAttacher is implemented by a source that must act on each process
// the daemon profiles while the process lives, such as the GPU tracer,
// which attaches to the library a process maps.
type ProcessAttacher interface {
	// AttachProcess is called for a process when the daemon first sees it
	// in a rescan, and again at each full rescan while it answers
	// AttachRetry. An error is counted and logged (when new, then now and
	// then); the answer stands.
	AttachProcess(p procfs.ID) (Attach, error)
	// ForgetProcess is called once the process is gone.
	ForgetProcess(p procfs.ID)
}

// Attach is a ProcessAttacher's answer.
type Attach int

const (
	// AttachDone: nothing more to do for this process.
	AttachDone Attach = iota
	// AttachRetry: not now; ask again at the next full rescan.
	AttachRetry
	// AttachReload: done, and the process has exec'd since it was first
	// seen (same pid and start time): the daemon reads its symbols again.
	AttachReload
)

// Stacks is the user-stack capture that every source's probe shares
// (agent/stackwalk.Walker): the program of a probe that includes
// bpf/include/stack.h is loaded with its constants and shared maps, and the
// raw interpreter frames the probe captured are named through it.
type Stacks interface {
	Prepare(spec *ebpf.CollectionSpec) (consts map[string]any, maps map[string]*ebpf.Map, err error)
	// Resolve names one sample's raw interpreter frames of process pid,
	// started at startNs (the leader's start_boottime): see
	// stackwalk.Walker.Resolve.
	Resolve(pid uint32, startNs uint64, raw *bpf.InterpStack) interp.Stack
}

// Env is what the agent gives a source it starts.
type Env struct {
	Proc       procfs.FS
	SysRoot    string // where sysfs is mounted
	ExcludePID int    // the agent itself: never profiled
	// Interval is how often the daemon drains the source.
	Interval time.Duration
	// Budget is the agent's memory budget: what a source keeps per job is
	// charged to Owner(process), the process's job's owner key (see
	// agent/budget). Job names a process's job ("" for none). Any may be
	// nil in tests.
	Budget *budget.Budget
	Owner  func(procfs.ID) string
	Job    func(procfs.ID) string
	// Stacks captures user stacks for the source's probe; nil: frame
	// pointers only (bpf_get_stack) and no interpreter frames.
	Stacks Stacks
	// TaskCgroup gives the cgroup directory a profiled process sits in as
	// a job's task, and its job's directory (both relative to their
	// hierarchy's mount, version 1 or 2), from the attribution's cache;
	// false for slurmstepd and processes in no job. CgroupRoot is where
	// the hierarchies are mounted (/sys/fs/cgroup). TaskCgroup may be nil
	// in tests.
	TaskCgroup func(procfs.ID) (version int, task, job string, ok bool)
	CgroupRoot string
	// Reg takes the source's own metrics; the daemon exports Info's.
	Reg prometheus.Registerer
	Log *slog.Logger
}

// Kind is a profile type the agent can run: its command-line flags and how
// to start its source.
type Kind interface {
	Flags(fs *flag.FlagSet)
	// Check validates the parsed flags before anything starts.
	Check() error
	// Open starts the source as the flags ask, or returns nil when they
	// turn it off. A source that implements io.Closer is closed when the
	// agent stops.
	Open(env Env) (Source, error)
}
