package attribution

import (
	"github.com/slurmscope/slurmscope/agent/slurm"
	"github.com/slurmscope/slurmscope/schema"
)

// Labels returns the series labels of the job's profiles: every job
// attribute with a value and host.name, in schema order, then
// service_name. service_name is the job name, so repeated runs of one job
// land together, or slurm-job-<id> for an unnamed job.
func (j *Job) Labels() []schema.Label {
	var ls []schema.Label
	for _, a := range schema.All {
		if a.Scope != schema.ScopeJob && a.Scope != schema.ScopeHost {
			continue
		}
		if v := j.Value(a); v != "" {
			ls = append(ls, schema.Label{Name: a.Label, Value: v})
		}
	}
	svc := j.Name
	if svc == "" && j.ID != "" {
		svc = "slurm-job-" + j.ID
	}
	return append(ls, serviceName(svc))
}

// Value is the process's value of attribute a: its job's for job
// attributes (none for a process in no job of this node), its own step,
// task and host. The local task id is the cgroup's task_<n>; task_special
// has none.
func (p Process) Value(a schema.Attribute) string {
	switch {
	case a.Name == schema.HostName.Name:
		return p.Host
	case !p.InJob():
		return ""
	case a.Name == schema.JobStep.Name:
		return p.Step
	case a.Name == schema.TaskRank.Name:
		return p.Rank
	case a.Name == schema.TaskLocalID.Name:
		return slurm.TaskNumber(p.Task)
	case a.Name == schema.NodeIndex.Name:
		return p.NodeIndex
	case a.Scope == schema.ScopeJob:
		return p.Job.Value(a)
	}
	return ""
}

// Labels returns the series labels of the process's profiles: its job's,
// or for a process in no job its host and, as service_name, its
// executable's name.
func (p Process) Labels() []schema.Label {
	if p.InJob() {
		return p.Job.Labels()
	}
	var ls []schema.Label
	if p.Host != "" {
		ls = append(ls, schema.Label{Name: schema.HostName.Label, Value: p.Host})
	}
	return append(ls, serviceName(p.Comm))
}

func serviceName(s string) schema.Label {
	if s == "" {
		s = "unknown"
	}
	return schema.Label{Name: schema.ServiceName, Value: s}
}
