package schema

// MetricPrefix starts the name of every metric the agent exports.
const MetricPrefix = "slurmscope_"

// MetricType is a Prometheus metric type.
type MetricType int

const (
	Gauge MetricType = iota
	Counter
	Histogram
)

func (t MetricType) String() string {
	switch t {
	case Counter:
		return "counter"
	case Histogram:
		return "histogram"
	}
	return "gauge"
}

// Metric is one metric the agent exports. Its name, help and labels are what
// /metrics serves, what the datasource queries and what dashboards and alert
// rules name.
type Metric struct {
	Name string
	Help string
	// Unit is the base unit its name carries (Prometheus naming): ratio,
	// bytes, seconds, watts, celsius, hertz; "" for counts, states and info
	// series.
	Unit string
	Type MetricType
	// Attributes are the schema attributes its series carry, in the order
	// the agent gives their values. Which ones a metric has follows its
	// scope: the node, a GPU or MIG instance, a job on one.
	Attributes []Attribute
	// MIG is set when a MIG instance's series carry MIGAttributes after
	// Attributes (a whole GPU's do not).
	MIG bool
	// Labels are its own labels that are not attributes (reason, ...),
	// after the attributes.
	Labels []string
	// Merge is the aggregation that merges its series across GPUs and nodes
	// in the datasource's gpuMetric queries (avg or sum); "" where the
	// datasource does not offer the metric.
	Merge string
	// Buckets are a histogram's upper bounds, in Unit.
	Buckets []float64
}

// LabelNames returns the labels of a whole GPU's series (mig false) or of a
// MIG instance's (mig true; the same for a metric without MIG series).
func (m Metric) LabelNames(mig bool) []string {
	var out []string
	for _, a := range m.Attributes {
		out = append(out, a.Label)
	}
	if mig && m.MIG {
		for _, a := range MIGAttributes {
			out = append(out, a.Label)
		}
	}
	return append(out, m.Labels...)
}

// Carries reports whether m's series (a MIG instance's included) carry a.
func (m Metric) Carries(a Attribute) bool {
	for _, l := range m.LabelNames(true) {
		if l == a.Label {
			return true
		}
	}
	return false
}

// Scopes returns the scopes of the attributes m carries, without repeats.
func (m Metric) Scopes() []Scope {
	var out []Scope
	for _, a := range m.Attributes {
		if !containsScope(out, a.Scope) {
			out = append(out, a.Scope)
		}
	}
	return out
}

func containsScope(ss []Scope, s Scope) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// The label sets, by scope.
var (
	// GPUAttributes identify a GPU; MIG instances carry their parent's.
	GPUAttributes = []Attribute{GPUUUID, GPUIndex, GPUName}
	// MIGAttributes identify a MIG GPU instance of the GPU.
	MIGAttributes = []Attribute{GPUMIGProfile, GPUMIGInstance}
	// JobKey are the job attributes a job's per-GPU series carry;
	// slurmscope_job_info joins them to the job's other attributes.
	JobKey = []Attribute{JobID, JobUser, JobName}
)

func attrs(parts ...[]Attribute) []Attribute {
	var out []Attribute
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var (
	host    = []Attribute{HostName}
	gpu     = attrs(host, GPUAttributes)
	jobGPU  = attrs(host, JobKey, GPUAttributes)
	migUnit = attrs(gpu, MIGAttributes)
)

// gauge is a GPU or MIG instance gauge; jobGauge the same per job.
func gauge(name, unit, merge, help string) Metric {
	return Metric{Name: MetricPrefix + name, Help: help, Unit: unit, Type: Gauge, Attributes: gpu, MIG: true, Merge: merge}
}

func jobGauge(name, unit, merge, help string) Metric {
	return Metric{Name: MetricPrefix + name, Help: help, Unit: unit, Type: Gauge, Attributes: jobGPU, MIG: true, Merge: merge}
}

// counter is one of the agent's own counters, with no attribute.
func counter(name, unit, help string, labels ...string) Metric {
	return Metric{Name: MetricPrefix + name, Help: help, Unit: unit, Type: Counter, Labels: labels}
}

// Metrics of the GPU collector (agent/gpu), per GPU or MIG instance and per
// job on one. They carry host_name.
var (
	JobGPUUtilization = jobGauge("job_gpu_utilization_ratio", "ratio", "avg",
		"Sum of the SM utilisation of the job's processes on the GPU since the last poll (NVML process utilisation); 0 for an allocated idle GPU.")
	JobGPUMemoryUtilization = jobGauge("job_gpu_memory_utilization_ratio", "ratio", "",
		"Sum of the memory-bandwidth utilisation of the job's processes on the GPU since the last poll.")
	JobGPUMemoryUsed = jobGauge("job_gpu_memory_used_bytes", "bytes", "sum",
		"Device memory used by the job's processes on the GPU or MIG instance.")
	// JobGPUAllocated ties a GPU to the job it is allocated to.
	JobGPUAllocated = jobGauge("job_gpu_allocated", "", "sum",
		"1 for each GPU or MIG instance Slurm allocated to the job (its device cgroup, or slurmctld's record), which its tasks' environment may narrow but never widen.")

	GPUUtilization = gauge("gpu_utilization_ratio", "ratio", "avg",
		"Fraction of the last sample period in which a kernel ran on the GPU (NVML utilization.gpu).")
	GPUMemoryUtilization = gauge("gpu_memory_utilization_ratio", "ratio", "",
		"Fraction of the last sample period in which device memory was read or written (NVML utilization.memory); not memory occupancy.")
	GPUMemoryUsed = gauge("gpu_memory_used_bytes", "bytes", "sum",
		"Device memory in use (of the GPU, or of the MIG instance).")
	GPUMemoryTotal = gauge("gpu_memory_total_bytes", "bytes", "sum",
		"Device memory (of the GPU, or of the MIG instance).")
	GPUPower = gauge("gpu_power_watts", "watts", "",
		"Power draw of the GPU board.")
	GPUTemperature = gauge("gpu_temperature_celsius", "celsius", "",
		"GPU die temperature.")
	GPUSMClock = gauge("gpu_sm_clock_hertz", "hertz", "",
		"Current SM clock.")
	GPUSMActive = gauge("gpu_sm_active_ratio", "ratio", "avg",
		"Fraction of SMs busy between the last two polls (GPM, Hopper and later).")
	GPUSMOccupancy = gauge("gpu_sm_occupancy_ratio", "ratio", "",
		"Fraction of resident warps of the theoretical maximum between the last two polls (GPM).")
	GPUTensorActive = gauge("gpu_tensor_active_ratio", "ratio", "avg",
		"Fraction of time any tensor core was active between the last two polls (GPM).")

	// JobInfo is served by the GPU collector, or by agent/jobinfo on a node
	// without GPUs: one series per job, with every job attribute.
	JobInfo = Metric{Name: MetricPrefix + "job_info", Type: Gauge, Attributes: attrs(host, Scoped(ScopeJob)), Merge: "sum",
		Help: "A SLURM job with a process on this node (value 1)."}

	GPUInfo = Metric{Name: MetricPrefix + "gpu_info", Type: Gauge, Attributes: gpu, Labels: []string{"pci_bus_id"},
		Help: "A GPU on this node (value 1), with its PCI bus id."}
	GPUMIGInfo = Metric{Name: MetricPrefix + "gpu_mig_info", Type: Gauge, Attributes: migUnit,
		Labels: []string{"gpu_mig_compute_instance", "gpu_mig_uuid"},
		Help:   "A MIG device (GPU instance and compute instance) on this node (value 1)."}
	GPUHealthy = Metric{Name: MetricPrefix + "gpu_healthy", Type: Gauge, Attributes: gpu,
		Help: "1 when the GPU answered NVML this poll; 0 when it is lost (fallen off the bus) or failed. Labels of a lost GPU are its last known ones."}
	// GPUUnsupported's metric label is the name of a metric above.
	GPUUnsupported = Metric{Name: MetricPrefix + "gpu_unsupported_info", Type: Gauge, Attributes: gpu, MIG: true, Labels: []string{"metric"},
		Help: "Names a metric NVML does not provide for this GPU or MIG instance (value 1); that series is left out rather than estimated."}

	GPUPollDuration = Metric{Name: MetricPrefix + "gpu_poll_duration_seconds", Unit: "seconds", Type: Gauge, Attributes: host,
		Help: "Duration of the last GPU poll."}
	GPULastPoll = Metric{Name: MetricPrefix + "gpu_last_poll_timestamp_seconds", Unit: "seconds", Type: Gauge, Attributes: host,
		Help: "Start of the last GPU poll, Unix time."}
	GPUPolls = Metric{Name: MetricPrefix + "gpu_polls_total", Type: Counter, Attributes: host,
		Help: "GPU polls done."}
	GPUNVMLErrors = Metric{Name: MetricPrefix + "gpu_nvml_errors_total", Type: Counter, Attributes: host, Labels: []string{"function", "error"},
		Help: "NVML calls that failed, by C function and error. ERROR_NOT_SUPPORTED is not counted."}
	GPUAllocationErrors = Metric{Name: MetricPrefix + "gpu_allocation_errors_total", Type: Counter, Attributes: host, Labels: []string{"reason"},
		Help: "GPU allocation entries that were not used, by reason: in tasks' environments malformed, naming no GPU here, an ordinal ambiguous on a MIG node, or a GPU Slurm did not grant (outside_grant); jobs whose grant no source knows (grant_unknown); GPU device files missing (no_device_file)."}
)

// HostMetric is one quantity the cgroup collector (agent/hostmetrics) reads
// from the cgroups Slurm makes for a job on a node, exported twice: Job from
// the job's own cgroup (job_<id>, which holds all its steps: its memory
// peak and limit are the job's, which no sum of its steps gives), and Step
// from each step's (step_<s>), with slurm_job_step. The job's series carry
// no step label, so summing a family never counts a step twice.
//
// The step is the schema's slurm.job.step, of process scope: a step is a
// set of the job's processes, the same set that splits the job's profiles,
// so a filter on slurm.job.step selects the same steps in both.
type HostMetric struct{ Job, Step Metric }

// The label sets of the cgroup collector's series.
var (
	jobHost = attrs(host, JobKey)
	jobStep = attrs(host, JobKey, []Attribute{JobStep})
)

func hostMetric(name, unit string, typ MetricType, merge, help string) HostMetric {
	return HostMetric{
		Job: Metric{Name: MetricPrefix + "job_" + name, Unit: unit, Type: typ, Attributes: jobHost, Merge: merge,
			Help: help + " Of the job's own cgroup on this node, which holds all its steps."},
		Step: Metric{Name: MetricPrefix + "job_step_" + name, Unit: unit, Type: typ, Attributes: jobStep, Merge: merge,
			Help: help + " Of one step's cgroup."},
	}
}

// Metrics of the cgroup collector, per job and per step on the node. A
// value the job's cgroup does not provide (a controller Slurm did not
// enable for it) has no series: JobCgroupUnsupported names it instead.
var (
	HostCPUUsage = hostMetric("cpu_usage_seconds_total", "seconds", Counter, "sum",
		"CPU time used (cgroup v2 cpu.stat usage_usec; v1 cpuacct.usage, which Slurm makes with jobacct_gather/cgroup).")
	HostCPUs = hostMetric("allocated_cpus", "", Gauge, "sum",
		"CPUs of the cgroup's cpuset (v2 cpuset.cpus.effective, v1 cpuset.cpus): the CPUs Slurm allocated, where it constrains cores (ConstrainCores=yes).")
	HostMemoryUsed = hostMetric("memory_used_bytes", "bytes", Gauge, "sum",
		"Memory charged to the cgroup now, page cache included (v2 memory.current, v1 memory.usage_in_bytes).")
	HostMemoryPeak = hostMetric("memory_peak_bytes", "bytes", Gauge, "max",
		"Highest memory charged to the cgroup since it was made (v2 memory.peak, v1 memory.max_usage_in_bytes).")
	HostMemoryLimit = hostMetric("memory_limit_bytes", "bytes", Gauge, "max",
		"Memory limit of the cgroup (v2 memory.max, v1 memory.limit_in_bytes): the job's request where Slurm constrains memory (ConstrainRAMSpace=yes); no series when there is no limit.")
	HostOOMKills = hostMetric("oom_kills_total", "", Counter, "sum",
		"Processes the kernel's OOM killer killed in the cgroup and below it (v2 memory.events oom_kill; v1 memory.oom_control oom_kill, summed over the cgroup and its descendants).")
	HostIORead = hostMetric("io_read_bytes_total", "bytes", Counter, "sum",
		"Bytes read from block devices (cgroup v2 io.stat rbytes, summed over devices).")
	HostIOWritten = hostMetric("io_written_bytes_total", "bytes", Counter, "sum",
		"Bytes written to block devices (cgroup v2 io.stat wbytes, summed over devices).")

	// HostMetrics lists them in the order the agent reads them.
	HostMetrics = []HostMetric{HostCPUUsage, HostCPUs, HostMemoryUsed, HostMemoryPeak, HostMemoryLimit, HostOOMKills, HostIORead, HostIOWritten}

	// JobLastSeen is when the collector last read the job's cgroup: over a
	// range, its max minus its min is how long the job was seen on the node,
	// against which its CPU time and its GPU allocation are measured.
	JobLastSeen = Metric{Name: MetricPrefix + "job_last_seen_timestamp_seconds", Unit: "seconds", Type: Gauge, Attributes: jobHost,
		Help: "Unix time of the poll that read the job's cgroup on this node."}
	// JobCgroupUnsupported's metric label is the name of a job-level host
	// metric (its step-level twin is left out with it).
	JobCgroupUnsupported = Metric{Name: MetricPrefix + "job_cgroup_unsupported_info", Type: Gauge, Attributes: jobHost, Labels: []string{"metric"},
		Help: "Names a host metric the job's cgroup does not provide, because Slurm did not enable that controller for it (value 1); that series is left out rather than reported as zero."}

	CgroupPollDuration = Metric{Name: MetricPrefix + "cgroup_poll_duration_seconds", Unit: "seconds", Type: Gauge, Attributes: host,
		Help: "Duration of the last poll of the jobs' cgroups."}
	CgroupPolls = Metric{Name: MetricPrefix + "cgroup_polls_total", Type: Counter, Attributes: host,
		Help: "Polls of the jobs' cgroups done."}
	CgroupReadErrors = Metric{Name: MetricPrefix + "cgroup_read_errors_total", Type: Counter, Attributes: host, Labels: []string{"file", "reason"},
		Help: "Cgroup files of jobs that could not be used, by file and reason (unreadable, refused: not a regular root-owned file, too_large, malformed); their series are left out."}
)

// The agent's own metrics (agent/daemon, agent/cli). Remote write adds
// host_name; a scrape adds instance.
var (
	AgentCPUSamples             = counter("agent_cpu_samples_total", "", "CPU samples taken by the eBPF sampler and drained.")
	AgentCPUSamplesLost         = counter("agent_cpu_samples_lost_total", "", "CPU samples lost in the kernel (map_full), or kept without a stack (stack_error, stack_map_full) or without their interpreter frames (interpreter_stack_map_full; interpreter_share: their job had stored an eighth of the interpreter stacks map in the interval).", "reason")
	AgentCPUSamplesUnattributed = counter("agent_cpu_samples_unattributed_total", "", "CPU samples not put in any profile, by reason (exited, other_node, not_in_job).", "reason")
	AgentProfiles               = counter("agent_profiles_total", "", "Profiles handed to the sink, by result.", "result")
	AgentProfileBytes           = counter("agent_profile_bytes_total", "bytes", "Bytes of encoded profiles produced.")
	AgentErrors                 = counter("agent_errors_total", "", "Errors in the agent's main loop, by stage.", "stage")
	AgentSampledCPUs            = Metric{Name: MetricPrefix + "agent_sampled_cpus", Type: Gauge, Help: "CPUs the sampler is attached to."}
	// The heartbeat (agent/cli) every agent exports, with GPUs or without,
	// profiling or serving metrics only: what the "agent stopped reporting"
	// alert rule keys on. It carries host_name, so that a node is named
	// whether it is scraped or pushes.
	AgentLastInterval = Metric{Name: MetricPrefix + "agent_last_interval_timestamp_seconds", Unit: "seconds", Type: Gauge, Attributes: host,
		Help: "Unix time of the end of the last interval the agent delivered (its profiles taken by the sinks, or none due); its start time until the first; with no profile source on, the time it was gathered."}
	AgentStartTime = Metric{Name: MetricPrefix + "agent_start_time_seconds", Unit: "seconds", Type: Gauge, Attributes: host,
		Help: "Unix time the agent started."}
	// GPU kernel time is counted in integer nanoseconds and exported in
	// seconds, Prometheus' base unit.
	AgentGPUKernelTime             = counter("agent_gpu_kernel_seconds_total", "seconds", "GPU kernel time drained from the GPU tracer.")
	AgentGPUKernelTimeUnattributed = counter("agent_gpu_kernel_unattributed_seconds_total", "seconds", "GPU kernel time not put in any profile, by reason (exited, other_node, not_in_job).", "reason")
	AgentGPUTraceLost              = counter("agent_gpu_trace_lost_total", "", "GPU tracer events lost (ring_buffer, bad_args, read_error, decode_error, rate_limited: calls over their user's ration), launches without a stack (stack_error, expired_launch, evicted_launch), names dropped (name), launches and names dropped because their job's memory share was full (over_budget), and records whose time went to their process's over-budget row instead of a row of their own (folded).", "reason")
	AgentGPUTraceAttachedFiles     = Metric{Name: MetricPrefix + "agent_gpu_trace_attached_files", Type: Gauge, Help: "Injection library files the GPU tracer is attached to."}
	// The injection library's own choices, by job: it steps aside for a
	// job's CUPTI client, and is not loaded where a job's tool is CUDA's
	// injection. A job missing from a GPU profile finds its reason here.
	AgentGPUTraceSteppedAside = Metric{Name: MetricPrefix + "agent_gpu_trace_stepped_aside_seconds_total", Unit: "seconds", Type: Counter, Attributes: []Attribute{JobID}, Labels: []string{"reason"},
		Help: "Wall time, summed over processes, during which the injection library stood aside and traced no GPU kernel, by job and reason (cupti_client: the job's own CUPTI profiler, such as torch.profiler, subscribed)."}
	AgentGPUTraceOtherInjection = Metric{Name: MetricPrefix + "agent_gpu_trace_other_injection_processes_total", Type: Counter, Attributes: []Attribute{JobID},
		Help: "Processes of the job whose CUDA_INJECTION64_PATH names another library (Nsight Systems or Compute, or a tool of the job's own), so that CUDA loads that one and no GPU kernel of theirs is traced."}
	AgentBPFRunTime = counter("agent_bpf_run_seconds_total", "seconds", "Time the kernel spent in the sampling program (needs kernel.bpf_stats_enabled=1).")
	AgentBPFRuns    = counter("agent_bpf_runs_total", "", "Runs of the sampling program (needs kernel.bpf_stats_enabled=1).")
	// Off-CPU time (agent/offcpu): a switch is a thread of a profiled job
	// leaving the CPU.
	AgentOffCPUSwitches             = counter("agent_offcpu_switches_total", "", "Switches off the CPU recorded by the off-CPU probe and drained (each stands for 1/p switches when sampled with probability p).")
	AgentOffCPUSwitchesUnattributed = counter("agent_offcpu_switches_unattributed_total", "", "Recorded switches not put in any profile, by reason (exited, other_node, not_in_job).", "reason")
	AgentOffCPUSwitchesNotRecorded  = counter("agent_offcpu_switches_not_recorded_total", "", "Switches of profiled jobs' threads not recorded, by reason: sampled (above the per-job rate; the recorded ones' times are scaled for them), map_full, share (the job had its eighth of a map in the interval), no_storage.", "reason")
	AgentOffCPUStacksLost           = counter("agent_offcpu_stacks_lost_total", "", "Stacks of recorded switches not kept (stack_error, stack_map_full, interpreter_stack_map_full) or evicted before the switch was drained (evicted).", "reason")
	AgentOffCPUCgroups              = Metric{Name: MetricPrefix + "agent_offcpu_cgroups", Type: Gauge, Help: "Task cgroups of jobs the off-CPU probe records switches of (slurmstepd's are not)."}
	AgentOffCPUBPFRunTime           = counter("agent_offcpu_bpf_run_seconds_total", "seconds", "Time the kernel spent in the off-CPU program, on every switch of the node (needs kernel.bpf_stats_enabled=1).")
	AgentOffCPUBPFRuns              = counter("agent_offcpu_bpf_runs_total", "", "Runs of the off-CPU program: every context switch of the node (needs kernel.bpf_stats_enabled=1).")
	// AgentCPUMapsFull names the job that filled the sampler's kernel maps,
	// which every job shares: the one with the most distinct keys in a
	// generation that dropped samples (map_full) or stacks (stack_map_full,
	// interpreter stack map full).
	AgentCPUMapsFull = Metric{Name: MetricPrefix + "agent_cpu_maps_full_total", Type: Counter, Attributes: []Attribute{JobID}, Labels: []string{"map"},
		Help: "Sampler generations whose counts (map=counts), native stacks (map=stacks) or interpreter stacks (map=interpreter_stacks) map was full, by the job with the most distinct keys in them (slurm_job_id empty: processes in no job)."}
	AgentSymbolizeErrors = counter("agent_symbolize_errors_total", "", "Frames or files left unsymbolised, by reason: no_symbol, no_mapping, read_maps, open_file, not_regular, owner, link, file_identity, too_large (a size or count over the file's real size or a hard cap), parse_elf, panic, over_budget, work_limit, stalled_io, perf_map, kallsyms, kallsyms_hidden, kernel_no_symbol.", "reason")
	// The one check of every ELF file a job can name (agent/elfcheck).
	AgentELFRefused = counter("agent_elf_refused_total", "", "ELF files a job named that a reader refused before parsing them, by reader (symbolize, unwind, python, gpu_trace) and reason: too_large (a count, extent or table size over the file's real size or a hard cap, decompressed sizes included), panic (the ELF parser panicked).", "reader", "reason")
	// The user-stack capture (agent/stackwalk): the table unwinder and the
	// interpreter walks.
	AgentUnwindMode       = Metric{Name: MetricPrefix + "agent_unwind_mode_info", Type: Gauge, Labels: []string{"mode", "reason"}, Help: "1, labelled with how native user frames are unwound: mode tables (reason none) or frame_pointer, with why: flag (--unwind=fp), arch (not x86-64), no_bpf_loop (the kernel is older than 5.17)."}
	AgentUnwindWalks      = counter("agent_unwind_walks_total", "", "User stacks walked by the table unwinder, by how the walk ended (end_of_stack, frame_limit, no_row, unsupported, read_error, bad_cfa, loop_limit).", "end")
	AgentUnwindFrames     = counter("agent_unwind_frames_total", "", "Frames the table unwinder walked, by how: table, frame_pointer (a file without a table), unknown_mapping (code mapped since the process was loaded), evicted_table (over the table budget), signal; and walks of processes not loaded (unloaded_process: frame pointers only) or forked (forked: through the parent's tables).", "how")
	AgentUnwindTableBytes = Metric{Name: MetricPrefix + "agent_unwind_table_bytes", Unit: "bytes", Type: Gauge, Help: "Bytes of unwind tables loaded into BPF maps."}
	AgentUnwindBudget     = Metric{Name: MetricPrefix + "agent_unwind_table_budget_bytes", Unit: "bytes", Type: Gauge, Help: "The bound on unwind table bytes; over it the least recently used tables are evicted."}
	AgentUnwindProcesses  = Metric{Name: MetricPrefix + "agent_unwind_processes", Type: Gauge, Help: "Processes whose unwind tables are loaded."}
	AgentUnwindFiles      = counter("agent_unwind_files_total", "", "Mapped files looked at for unwind tables, by result: built, frame_pointer (no unwind information), error (unreadable or malformed: frame pointers), over_budget, open_error, deferred (its job had read its allowance: built at a later sync).", "result")
	AgentUnwindSyncs      = counter("agent_unwind_syncs_total", "", "Processes loaded (or loaded again) into the unwinder, by result.", "result")
	// AgentUnwindShareRefused names the job that reached one of its
	// shares of the unwinder's maps, which every job shares.
	AgentUnwindShareRefused = Metric{Name: MetricPrefix + "agent_unwind_share_refused_total", Type: Counter, Attributes: []Attribute{JobID}, Labels: []string{"share"},
		Help: "What the table unwinder refused a job because it had used its share of what all jobs share: processes loaded (share=processes), LPM mapping entries (share=mappings), tables loaded (share=table_bytes: a table build put off). Its processes are unwound by frame pointers meanwhile (slurm_job_id empty: processes in no job)."}
	AgentStackForksRefused = counter("agent_stack_forks_refused_total", "", "Forked processes not handed their set-up ancestor's unwind or interpreter state at their fork, by the share that was used: process (the ancestor had 256 live forked descendants) or job (its job had 4096 in the table): they are set up when first sampled, like any process.", "share")
	AgentProcessSetup      = Metric{Name: MetricPrefix + "agent_process_setup_seconds", Unit: "seconds", Type: Histogram, Labels: []string{"part"}, Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		Help: "Time from a profiled process's start to the capture being set up for it: its unwind tables loaded (part=unwind_tables), its interpreter found (part=interpreter). Processes started before the agent are not counted; until then its samples lack callers or interpreter frames."}
	// Interpreter frames (agent/interp, one implementation per
	// interpreter): one set of metrics, by the interpreter's name.
	AgentInterpWalks      = counter("agent_interpreter_walks_total", "", "Interpreter frame walks of CPU samples of processes set up for one, by outcome (ok, no_thread_state, thread_read, threads_max, frame_read).", "status")
	AgentInterpProcesses  = counter("agent_interpreter_processes_total", "", "Processes set up for an interpreter's walk, by interpreter and version (python: 3.11), or forked (from a set-up parent).", "interpreter", "version")
	AgentInterpSkipped    = counter("agent_interpreter_skipped_total", "", "Looks at processes that left them to native stacks, by interpreter and reason (python: not_python, unknown_version, unsupported, bad_interpreter, not_initialized, open, maps, memory, bpf_map, exited, stalled, read_panic, read_allowance: its job had read its allowance, looked at again later).", "interpreter", "reason")
	AgentInterpFrames     = counter("agent_interpreter_frames_total", "", "Interpreter frames resolved, by interpreter and result: resolved, gone (what the frame ran was freed before it was read), unreadable (what the frame ran could not be read, or was none: the process exited before its frames were resolved, a freed or faked frame), read_budget (the job's read allowance was spent), refused_mapping (what the frame ran lies in no mapping the agent reads: only anonymous memory and the interpreter's own data are), not_resident (it lies on a page not in the process's memory, which reading would fetch from its file), stalled (the job's memory did not answer within the deadline, or a read of it is stuck), cpu_budget (the job's allowance of resolution time was spent), truncated (stacks cut at 64 frames).", "interpreter", "result")
	AgentInterpCacheBytes = Metric{Name: MetricPrefix + "agent_interpreter_cache_bytes", Unit: "bytes", Type: Gauge, Labels: []string{"interpreter"}, Help: "Bytes of an interpreter's cache of what its frames run (python: code objects' names, files and line tables)."}
	// NVTX ranges (agent/nvtx): the threads' open ranges at samples, and
	// the names processes announce.
	AgentNVTXEvents = counter("agent_nvtx_events_total", "", "NVTX range capture, by event: names (range names kept), names_refused (malformed, or an id that is not the text's hash), names_over_cap (past a process's 4096 or all processes' bytes), names_over_budget (the job's memory budget share), names_lost (the probe's ring buffer was full), calls_rate_limited (marker calls past a process's ration), structs_read (threads' structs read at samples), structs_unreadable, structs_invalid (magic, version or caps), structs_other_thread (a struct whose tid is not the sampled thread's: reused or forged), ranges_truncated (samples with more ranges open than the 16 kept), ranges_unnamed (range frames whose name was not known).", "event")

	// Attribution (agent/attribution): what a user could not make it believe.
	AgentCgroupRefused  = counter("agent_cgroup_refused_total", "", "Processes put in no job because their Slurm-looking cgroup path is not Slurm's, by reason (outside_slurm_tree: not where slurmd makes its tree; not_root_owned; unverified: its directories could not be checked).", "reason")
	AgentJobIDConflicts = counter("agent_job_id_conflicts_total", "", "SLUID jobs left with their SLUID as id because their slurmstepd named a job another job of the node holds, or their slurmstepds disagreed.")
)

// The memory budget (agent/budget): what jobs make the agent hold, by kind
// (symbols, perf_map, maps, gpu_aggregation, unwind_tables, interpreter_cache, nvtx_names).
var (
	AgentMemoryBudget             = Metric{Name: MetricPrefix + "agent_memory_budget_bytes", Unit: "bytes", Type: Gauge, Help: "The memory budget: the most bytes the agent holds for all jobs together."}
	AgentMemoryBudgetUsed         = Metric{Name: MetricPrefix + "agent_memory_budget_used_bytes", Unit: "bytes", Type: Gauge, Labels: []string{"kind"}, Help: "Bytes held in the memory budget, by kind."}
	AgentMemoryBudgetEvictions    = counter("agent_memory_budget_evictions_total", "", "Cache entries evicted from the memory budget (least recently used, by bytes), by kind.", "kind")
	AgentMemoryBudgetEvictedBytes = counter("agent_memory_budget_evicted_bytes_total", "bytes", "Bytes of the cache entries evicted from the memory budget, by kind.", "kind")
	AgentMemoryBudgetRefused      = counter("agent_memory_budget_refused_total", "", "Charges the memory budget refused (a job's share or the total was full of what cannot be evicted), by kind; what was refused is left out and counted where it was.", "kind")
	AgentJobFileReadsDeferred     = counter("agent_job_file_reads_deferred_total", "", "Reads of job files (symbol tables, perf maps, mapping tables) put off because the job had used its read allowance.")
)

// The shippers' metrics (agent/pyroscope, agent/remotewrite).
var (
	PyroscopePushes          = counter("pyroscope_pushes_total", "", "Push requests delivered to Pyroscope.")
	PyroscopePushedBytes     = counter("pyroscope_pushed_bytes_total", "bytes", "Encoded bytes of the push requests delivered to Pyroscope.")
	PyroscopePushRetries     = counter("pyroscope_push_retries_total", "", "Push attempts that failed and were retried.")
	PyroscopeDroppedRequests = counter("pyroscope_dropped_requests_total", "", "Push requests dropped, by reason.", "reason")
	PyroscopeSpoolRequests   = Metric{Name: MetricPrefix + "pyroscope_spool_requests", Type: Gauge, Help: "Push requests waiting in the spool."}
	PyroscopeSpoolBytes      = Metric{Name: MetricPrefix + "pyroscope_spool_bytes", Unit: "bytes", Type: Gauge, Help: "Bytes waiting in the spool."}
	PyroscopeTooOldProfiles  = counter("pyroscope_too_old_profiles_total", "", "Profiles dropped before sending as older than Pyroscope's ingestion window, with their request (dropped_requests_total{reason=\"too_old\"}) or cut from it.")
	PyroscopeHeldRequests    = counter("pyroscope_held_requests_total", "", "Push requests held back until Pyroscope's ingestion window takes them, after it refused their profiles as stamped ahead of its clock (this node's clock is fast).")
	PyroscopeClockSkew       = Metric{Name: MetricPrefix + "pyroscope_clock_skew_seconds", Unit: "seconds", Type: Gauge, Help: "Pyroscope's clock minus this node's, from the Date header of its last response (to about a second); absent before the first response."}

	RemoteWriteRequestsSent    = counter("remote_write_requests_sent_total", "", "Remote-write requests delivered.")
	RemoteWriteSamplesSent     = counter("remote_write_samples_sent_total", "", "Samples in the remote-write requests delivered.")
	RemoteWriteSentBytes       = counter("remote_write_sent_bytes_total", "bytes", "Compressed bytes of the remote-write requests delivered.")
	RemoteWriteRetries         = counter("remote_write_retries_total", "", "Remote-write attempts that failed and were retried.")
	RemoteWriteDroppedRequests = counter("remote_write_dropped_requests_total", "", "Remote-write requests dropped, by reason.", "reason")
	RemoteWriteGatherErrors    = counter("remote_write_gather_errors_total", "", "Gathers of the agent's metrics that reported an error.")
	RemoteWriteSkippedSeries   = counter("remote_write_skipped_series_total", "", "Series left out of remote write for labels no receiver accepts.")
	RemoteWriteSpoolRequests   = Metric{Name: MetricPrefix + "remote_write_spool_requests", Type: Gauge, Help: "Remote-write requests waiting in the spool."}
	RemoteWriteSpoolBytes      = Metric{Name: MetricPrefix + "remote_write_spool_bytes", Unit: "bytes", Type: Gauge, Help: "Bytes of remote-write requests waiting in the spool."}
)

// Metrics lists every metric the agent exports. The datasource offers those
// with a Merge, in this order.
var Metrics = []Metric{
	JobGPUUtilization, JobGPUMemoryUtilization, JobGPUMemoryUsed, JobGPUAllocated,
	GPUUtilization, GPUMemoryUtilization, GPUMemoryUsed, GPUMemoryTotal, GPUPower, GPUTemperature, GPUSMClock,
	GPUSMActive, GPUSMOccupancy, GPUTensorActive,
	JobInfo, GPUInfo, GPUMIGInfo, GPUHealthy, GPUUnsupported,
	GPUPollDuration, GPULastPoll, GPUPolls, GPUNVMLErrors, GPUAllocationErrors,
	HostCPUUsage.Job, HostCPUs.Job, HostMemoryUsed.Job, HostMemoryPeak.Job, HostMemoryLimit.Job, HostOOMKills.Job, HostIORead.Job, HostIOWritten.Job,
	HostCPUUsage.Step, HostCPUs.Step, HostMemoryUsed.Step, HostMemoryPeak.Step, HostMemoryLimit.Step, HostOOMKills.Step, HostIORead.Step, HostIOWritten.Step,
	JobLastSeen, JobCgroupUnsupported, CgroupPollDuration, CgroupPolls, CgroupReadErrors,
	AgentCPUSamples, AgentCPUSamplesLost, AgentCPUSamplesUnattributed, AgentProfiles, AgentProfileBytes, AgentErrors,
	AgentSampledCPUs, AgentLastInterval, AgentStartTime, AgentGPUKernelTime, AgentGPUKernelTimeUnattributed, AgentGPUTraceLost, AgentGPUTraceAttachedFiles,
	AgentGPUTraceSteppedAside, AgentGPUTraceOtherInjection,
	AgentBPFRunTime, AgentBPFRuns, AgentOffCPUSwitches, AgentOffCPUSwitchesUnattributed, AgentOffCPUSwitchesNotRecorded,
	AgentOffCPUStacksLost, AgentOffCPUCgroups, AgentOffCPUBPFRunTime, AgentOffCPUBPFRuns, AgentCPUMapsFull, AgentSymbolizeErrors, AgentELFRefused, AgentCgroupRefused, AgentJobIDConflicts,
	AgentMemoryBudget, AgentMemoryBudgetUsed, AgentMemoryBudgetEvictions, AgentMemoryBudgetEvictedBytes,
	AgentMemoryBudgetRefused, AgentJobFileReadsDeferred,
	AgentUnwindMode, AgentUnwindWalks, AgentUnwindFrames, AgentUnwindTableBytes, AgentUnwindBudget, AgentUnwindProcesses, AgentUnwindFiles,
	AgentUnwindSyncs, AgentStackForksRefused, AgentUnwindShareRefused, AgentProcessSetup, AgentInterpWalks, AgentInterpProcesses, AgentInterpSkipped, AgentInterpFrames, AgentInterpCacheBytes, AgentNVTXEvents,
	PyroscopePushes, PyroscopePushedBytes, PyroscopePushRetries, PyroscopeDroppedRequests, PyroscopeSpoolRequests, PyroscopeSpoolBytes,
	PyroscopeTooOldProfiles, PyroscopeHeldRequests, PyroscopeClockSkew,
	RemoteWriteRequestsSent, RemoteWriteSamplesSent, RemoteWriteSentBytes, RemoteWriteRetries, RemoteWriteDroppedRequests,
	RemoteWriteGatherErrors, RemoteWriteSkippedSeries, RemoteWriteSpoolRequests, RemoteWriteSpoolBytes,
}

var metricsByName = func() map[string]Metric {
	m := make(map[string]Metric, len(Metrics))
	for _, x := range Metrics {
		m[x.Name] = x
	}
	return m
}()

// MetricByName returns the metric with the given name.
func MetricByName(name string) (Metric, bool) { m, ok := metricsByName[name]; return m, ok }
