// Package schema is the single source of truth for slurmscope's attributes.
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

// Attribute describes one attribute of the schema.
type Attribute struct {
	Name        string // dotted name, e.g. slurm.job.id
	Label       string // wire label, e.g. slurm_job_id
	Type        Type
	Description string
	Source      string // where the agent takes it from on the node
}

var (
	JobID = Attribute{"slurm.job.id", "slurm_job_id", Int,
		"SLURM job id (for array jobs the id of the array task's own job).",
		"the cgroup path (job_<id>), or the SLUID directory resolved to the id"}
	JobName = Attribute{"slurm.job.name", "slurm_job_name", String,
		"SLURM job name.",
		"job metadata: environment of the job's tasks, or slurmctld"}
	JobUser = Attribute{"slurm.job.user", "slurm_job_user", String,
		"Owner of the job.",
		"the uid of the job's tasks (or the v1 cgroup path, or slurmctld); never the job's environment"}
	JobStep = Attribute{"slurm.job.step", "slurm_job_step", String,
		"Job step: 0..n, batch, extern or interactive.",
		"the cgroup path (step_<s>)"}
	JobAccount = Attribute{"slurm.job.account", "slurm_job_account", String,
		"SLURM account charged for the job.",
		"job metadata"}
	JobPartition = Attribute{"slurm.job.partition", "slurm_job_partition", String,
		"SLURM partition the job runs in.",
		"job metadata"}
	HostName = Attribute{"host.name", "host_name", String,
		"The node (SLURM NodeName) the data comes from.",
		"--node-name, the multiple-slurmd cgroup path, or the hostname"}
	GPUName = Attribute{"gpu.name", "gpu_name", String,
		"GPU product name.", "NVML"}
	GPUUUID = Attribute{"gpu.uuid", "gpu_uuid", String,
		"GPU UUID (GPU-...); MIG instances carry their parent's.", "NVML"}
	GPUIndex = Attribute{"gpu.index", "gpu_index", Int,
		"NVML index of the GPU on the node.", "NVML"}
	GPUMIGProfile = Attribute{"gpu.mig.profile", "gpu_mig_profile", String,
		"MIG profile of the instance, e.g. 3g.40gb.", "NVML MIG device name"}
	GPUMIGInstance = Attribute{"gpu.mig.instance", "gpu_mig_instance", Int,
		"MIG GPU-instance id.", "NVML MIG"}
	ContainerName = Attribute{"container.name", "container_name", String,
		"Container the process runs in, where there is one.", "cgroup / runtime"}
)

// ServiceName is the label Pyroscope needs on every series. It is set to the
// job name so repeated runs of one job land together, and falls back to the
// executable name for processes in no job. It is Pyroscope's, not ours, so it
// has no dotted form.
const ServiceName = "service_name"

// All lists every attribute in the order the UI presents them.
var All = []Attribute{
	JobID, JobName, JobUser, JobStep, JobAccount, JobPartition,
	HostName, GPUName, GPUUUID, GPUIndex, GPUMIGProfile, GPUMIGInstance,
	ContainerName,
}

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
