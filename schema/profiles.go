package schema

import "strings"

// ValueType is a pprof sample or period type.
type ValueType struct{ Type, Unit string }

// ProfileType is a profile type the agent pushes, in Pyroscope's terms.
type ProfileType struct {
	// Name is the profile's __name__ in Pyroscope (process_cpu, gpu).
	Name        string
	Title       string // what the UI calls it
	Description string
	// SampleTypes are the pprof sample types; the last is the main one,
	// whose values flame graphs and series show.
	SampleTypes []ValueType
	PeriodType  ValueType
}

var (
	// ProcessCPU follows Pyroscope's process_cpu convention: a sample count
	// and the CPU time it stands for, with the sampling period in
	// nanoseconds.
	ProcessCPU = ProfileType{
		Name:        "process_cpu",
		Title:       "CPU time",
		Description: "On-CPU stacks sampled by the eBPF sampler, as CPU time.",
		SampleTypes: []ValueType{{"samples", "count"}, {"cpu", "nanoseconds"}},
		PeriodType:  ValueType{"cpu", "nanoseconds"},
	}
	// GPUTime is GPU kernel time per launching stack (agent/gputrace): how
	// many kernels ran and their execution time on the GPU. Every kernel is
	// counted, so the period is 1: values are totals, not sample counts.
	// The untraced sample type is GPUUntraced's.
	GPUTime = ProfileType{
		Name:        "gpu",
		Title:       "GPU kernel time",
		Description: "CUDA kernels' time on the GPU, under the stacks that launched them.",
		SampleTypes: []ValueType{{"kernel_launches", "count"}, {"untraced", "nanoseconds"}, {"gpu_time", "nanoseconds"}},
		PeriodType:  ValueType{"gpu_time", "nanoseconds"},
	}
	// GPUUntraced reads the untraced sample type of the gpu profile: wall
	// time during which the injection library stood aside for a process's
	// own CUPTI client (torch.profiler, for one), so that the gap in its
	// GPU kernel time says why. A sample type of its own: no query adds it
	// to GPU time.
	GPUUntraced = ProfileType{
		Name:        GPUTime.Name,
		Title:       "GPU tracing stepped aside",
		Description: "Wall time during which a process's GPU kernels were not traced because the job's own CUPTI profiler (torch.profiler, for one) held CUPTI.",
		SampleTypes: []ValueType{{"untraced", "nanoseconds"}},
		PeriodType:  GPUTime.PeriodType,
	}
	// OffCPU is the time a job's threads spent off the CPU (agent/offcpu),
	// under the stack each one left it in. One pushed profile holds both
	// kinds of off-CPU time as sample types of their own, as Go's memory
	// profile holds alloc_space and inuse_space, so that no query sums
	// them: blocked (sleeping, waiting on I/O, a futex, a socket) and
	// runnable (preempted, waiting for a CPU). A sample has one of the
	// two; switches counts the switches recorded, of either kind.
	OffCPU = ProfileType{
		Name:        "off_cpu",
		Title:       "Off-CPU time, blocked",
		Description: "Time threads spent blocked (sleeping, on I/O, a lock, a socket), under the stack they blocked in.",
		SampleTypes: []ValueType{{"switches", "count"}, {"runnable", "nanoseconds"}, {"blocked", "nanoseconds"}},
		PeriodType:  ValueType{"off_cpu", "nanoseconds"},
	}
	// OffCPURunnable reads the runnable sample type of the off_cpu profile:
	// time a thread was ready to run but waited for a CPU (an
	// oversubscribed job, or one whose cores other work took).
	OffCPURunnable = ProfileType{
		Name:        OffCPU.Name,
		Title:       "Off-CPU time, waiting for a CPU",
		Description: "Time threads were runnable but not running (preempted, waiting for a CPU), under the stack they were preempted in.",
		SampleTypes: []ValueType{{"runnable", "nanoseconds"}},
		PeriodType:  OffCPU.PeriodType,
	}
)

// ProfileTypes lists every profile type a query can read: one per main
// sample type of what the agent pushes (the off_cpu and gpu profiles are
// two each).
var ProfileTypes = []ProfileType{ProcessCPU, GPUTime, OffCPU, OffCPURunnable, GPUUntraced}

// DefaultProfileType is what a query that names no profile type reads,
// unless the datasource's settings name another.
var DefaultProfileType = ProcessCPU

// Main is the main sample type.
func (p ProfileType) Main() ValueType { return p.SampleTypes[len(p.SampleTypes)-1] }

// ID is the type's Pyroscope profile-type id, e.g.
// process_cpu:cpu:nanoseconds:cpu:nanoseconds.
func (p ProfileType) ID() string {
	m := p.Main()
	return strings.Join([]string{p.Name, m.Type, m.Unit, p.PeriodType.Type, p.PeriodType.Unit}, ":")
}

// Matches reports whether a profile-type id (as Pyroscope lists it) is of
// this type: the same name and main sample type, whatever its period.
func (p ProfileType) Matches(id string) bool {
	m := p.Main()
	return strings.HasPrefix(id, strings.Join([]string{p.Name, m.Type, m.Unit}, ":")+":")
}

// ProfileTypeOf returns the profile type a profile-type id is of.
func ProfileTypeOf(id string) (ProfileType, bool) {
	for _, p := range ProfileTypes {
		if p.Matches(id) {
			return p, true
		}
	}
	return ProfileType{}, false
}

// StackSetupLabel is a diagnostic sample label, added only with the
// agent's --label-stack-setup: what of the stack capture was set up for
// the process when the sample was taken (none, native, interpreter,
// native_interpreter). Until a process's unwind tables and interpreter are
// in, its samples lack callers or interpreter frames; the stack tests
// judge unwinding on the samples taken after, and measure the set-up time
// apart (agent_process_setup_seconds). It splits series: not for
// production.
const StackSetupLabel = "stack_setup"
