// Package schema is the single source of truth for what the agent, the
// datasource and the dashboards share: the attributes (their names, scopes
// and where the agent reads them), the metrics (metrics.go) and the profile
// types (profiles.go).
//
// Users write the dotted names (filters, UI, the agent's JSON output); the
// wire (Pyroscope and Prometheus labels) uses the underscore form, which every
// backend version accepts without quoting. The agent, the datasource and the
// dashboards all take names from here, and a test keeps the rest of the tree
// from spelling a wire label by hand.
package schema

import (
	"strings"
	"unicode/utf8"
)

// Type is the value type of an attribute, used to type-check filters.
type Type int

const (
	String Type = iota
	// Int attributes are still carried as strings on the wire; the type only
	// tells filters and the UI that the value is numeric.
	Int
)

func (t Type) String() string {
	if t == Int {
		return "int"
	}
	return "string"
}

// Scope is what an attribute describes, which decides where it is found:
// the same for every process and node of a job, one process of it, the
// node, or one GPU (or MIG instance).
type Scope int

const (
	ScopeJob Scope = iota
	ScopeProcess
	ScopeHost
	ScopeGPU
)

func (s Scope) String() string {
	switch s {
	case ScopeJob:
		return "job"
	case ScopeProcess:
		return "process"
	case ScopeHost:
		return "host"
	case ScopeGPU:
		return "gpu"
	}
	return "unknown"
}

// Attribute describes one attribute of the schema.
type Attribute struct {
	Name        string // dotted name, e.g. slurm.job.id
	Label       string // wire label, e.g. slurm_job_id
	Type        Type
	Scope       Scope
	Description string
	Source      string // where the agent takes it from on the node, in words
	// From is where the agent reads a job attribute, for the readers that
	// take it from the table (agent/slurm, agent/attribution).
	From Sources
}

// Origin is a kind of place the agent learns a job attribute from on a
// node. What the job's user can write (its tasks' environment) is one
// origin among them, so the table can say it never decides an identity.
type Origin uint8

const (
	// FromCgroup is the cgroup path slurmd made, root's.
	FromCgroup Origin = 1 << iota
	// FromStepd is slurmstepd's title, root's.
	FromStepd
	// FromTaskUID is the real uid of the job's tasks.
	FromTaskUID
	// FromEnv is the environment of the job's tasks, which its user can
	// set to anything.
	FromEnv
	// FromSlurmctld is slurmctld, asked through squeue --json or
	// scontrol show job.
	FromSlurmctld
)

// Sources say where a job attribute is read and which origins may decide
// its value.
type Sources struct {
	// Decide holds the origins whose word may set the value. A source
	// named below whose origin is not here is read only to check another
	// (SLURM_JOB_ID says whether an environment describes the job).
	Decide Origin
	// Env is the variable slurmstepd sets in every task of the job.
	Env string
	// Squeue is the field of a job object in `squeue --json`.
	Squeue string
	// Scontrol is the key of the field in `scontrol show job -o`.
	Scontrol string
}

// IsMetadata reports whether a is job metadata: a job attribute decided
// only by its tasks' environment and slurmctld and carried as they give
// it, slurmctld's word first. The readers take every such attribute from
// the table; identities (id, owner, step) have their own rules.
func (a Attribute) IsMetadata() bool {
	d := a.From.Decide
	return a.Scope == ScopeJob && d != 0 && d&^(FromEnv|FromSlurmctld) == 0
}

// Metadata returns the job metadata attributes of All (IsMetadata), in
// its order.
func Metadata() []Attribute {
	var out []Attribute
	for _, a := range All {
		if a.IsMetadata() {
			out = append(out, a)
		}
	}
	return out
}

// metadata is where job metadata comes from: the tasks' environment
// variable env, or slurmctld's squeue and scontrol fields.
func metadata(env, squeue, scontrol string) Sources {
	return Sources{Decide: FromEnv | FromSlurmctld, Env: env, Squeue: squeue, Scontrol: scontrol}
}

var (
	// The id decides which environments describe the job, never the
	// other way round: SLURM_JOB_ID is read only to check them.
	JobID = Attribute{Name: "slurm.job.id", Label: "slurm_job_id", Type: Int, Scope: ScopeJob,
		Description: "SLURM job id (for array jobs the id of the array task's own job).",
		Source:      "the cgroup path (job_<id>), or the SLUID directory resolved to the id",
		From:        Sources{Decide: FromCgroup | FromStepd, Env: "SLURM_JOB_ID", Squeue: "job_id", Scontrol: "JobId"}}
	JobName = Attribute{Name: "slurm.job.name", Label: "slurm_job_name", Type: String, Scope: ScopeJob,
		Description: "SLURM job name.",
		Source:      "job metadata: environment of the job's tasks, or slurmctld",
		From:        metadata("SLURM_JOB_NAME", "name", "JobName")}
	// The owner has no environment variable: SLURM_JOB_USER is the
	// user's to set.
	JobUser = Attribute{Name: "slurm.job.user", Label: "slurm_job_user", Type: String, Scope: ScopeJob,
		Description: "Owner of the job.",
		Source:      "the uid of the job's tasks (or the v1 cgroup path, or slurmctld); never the job's environment",
		From:        Sources{Decide: FromCgroup | FromTaskUID | FromSlurmctld, Squeue: "user_name", Scontrol: "UserId"}}
	// JobStep is per process: one job's processes run in several steps,
	// so it splits samples inside a job's profile.
	JobStep = Attribute{Name: "slurm.job.step", Label: "slurm_job_step", Type: String, Scope: ScopeProcess,
		Description: "Job step: 0..n, batch, extern or interactive.",
		Source:      "the cgroup path (step_<s>)",
		From:        Sources{Decide: FromCgroup}}
	// The task a process runs as within its job: per process, like the
	// step, so on profiles only, never on Prometheus series (per-rank
	// series would multiply the per-job ones again).
	TaskRank = Attribute{Name: "slurm.task.rank", Label: "slurm_task_rank", Type: Int, Scope: ScopeProcess,
		Description: "Global rank of the process's task in its step: the launcher's rank where one starts several ranks under one Slurm task.",
		Source:      "the process's environment: RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK (a launcher's: torchrun, mpirun) over SLURM_PROCID"}
	TaskLocalID = Attribute{Name: "slurm.task.local_id", Label: "slurm_task_local_id", Type: Int, Scope: ScopeProcess,
		Description: "Local id of the process's Slurm task on its node.",
		Source:      "the cgroup path (task_<n>), which the job cannot change"}
	NodeIndex = Attribute{Name: "slurm.node.index", Label: "slurm_node_index", Type: Int, Scope: ScopeProcess,
		Description: "Index of the node in the job's allocation.",
		Source:      "the process's environment (SLURM_NODEID)"}
	JobAccount = Attribute{Name: "slurm.job.account", Label: "slurm_job_account", Type: String, Scope: ScopeJob,
		Description: "SLURM account charged for the job.",
		Source:      "job metadata",
		From:        metadata("SLURM_JOB_ACCOUNT", "account", "Account")}
	JobPartition = Attribute{Name: "slurm.job.partition", Label: "slurm_job_partition", Type: String, Scope: ScopeJob,
		Description: "SLURM partition the job runs in.",
		Source:      "job metadata",
		From:        metadata("SLURM_JOB_PARTITION", "partition", "Partition")}
	JobQOS = Attribute{Name: "slurm.job.qos", Label: "slurm_job_qos", Type: String, Scope: ScopeJob,
		Description: "SLURM quality of service (QOS) of the job.",
		Source:      "job metadata",
		From:        metadata("SLURM_JOB_QOS", "qos", "QOS")}
	HostName = Attribute{Name: "host.name", Label: "host_name", Type: String, Scope: ScopeHost,
		Description: "The node (SLURM NodeName) the data comes from.",
		Source:      "--node-name, the multiple-slurmd cgroup path, or the hostname"}
	GPUName = Attribute{Name: "gpu.name", Label: "gpu_name", Type: String, Scope: ScopeGPU,
		Description: "GPU product name.", Source: "NVML"}
	GPUUUID = Attribute{Name: "gpu.uuid", Label: "gpu_uuid", Type: String, Scope: ScopeGPU,
		Description: "GPU UUID (GPU-...); MIG instances carry their parent's.", Source: "NVML"}
	GPUIndex = Attribute{Name: "gpu.index", Label: "gpu_index", Type: Int, Scope: ScopeGPU,
		Description: "NVML index of the GPU on the node.", Source: "NVML"}
	GPUMIGProfile = Attribute{Name: "gpu.mig.profile", Label: "gpu_mig_profile", Type: String, Scope: ScopeGPU,
		Description: "MIG profile of the instance, e.g. 3g.40gb.", Source: "NVML MIG device name"}
	GPUMIGInstance = Attribute{Name: "gpu.mig.instance", Label: "gpu_mig_instance", Type: Int, Scope: ScopeGPU,
		Description: "MIG GPU-instance id.", Source: "NVML MIG"}
)

// ServiceName is the label Pyroscope needs on every series. It is set to the
// job name so repeated runs of one job land together, and falls back to the
// executable name for processes in no job. It is Pyroscope's, not ours, so it
// has no dotted form.
const ServiceName = "service_name"

// All lists every attribute in the order the UI presents them.
var All = []Attribute{
	JobID, JobName, JobUser, JobStep, TaskRank, TaskLocalID, NodeIndex, JobAccount, JobPartition, JobQOS,
	HostName, GPUName, GPUUUID, GPUIndex, GPUMIGProfile, GPUMIGInstance,
}

// Scoped returns the attributes of scope s, in the order of All.
func Scoped(s Scope) []Attribute {
	var out []Attribute
	for _, a := range All {
		if a.Scope == s {
			out = append(out, a)
		}
	}
	return out
}

// Label is one wire label with its value.
type Label struct{ Name, Value string }

var byName, byLabel = func() (map[string]Attribute, map[string]Attribute) {
	n := make(map[string]Attribute, len(All))
	l := make(map[string]Attribute, len(All))
	for _, a := range All {
		n[a.Name] = a
		l[a.Label] = a
	}
	return n, l
}()

// ByName returns the attribute with the given dotted name.
func ByName(name string) (Attribute, bool) { a, ok := byName[name]; return a, ok }

// ByLabel returns the attribute with the given wire label.
func ByLabel(label string) (Attribute, bool) { a, ok := byLabel[label]; return a, ok }

// LabelFor maps a dotted name to its wire label. It is the mechanical rule
// the table follows; ByName is preferred, since it also rejects unknown names.
func LabelFor(name string) string { return strings.ReplaceAll(name, ".", "_") }

// CleanValue makes an attribute value from a hostile source (a job's
// environment, /proc, a driver) safe to carry: valid UTF-8, each invalid
// sequence replaced by U+FFFD, and at most limit bytes, cut on a rune
// boundary. Control characters are kept; each output format escapes them.
func CleanValue(s string, limit int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
