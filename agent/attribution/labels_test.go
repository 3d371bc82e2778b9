package attribution

import (
	"reflect"
	"testing"

	"github.com/slurmscope/slurmscope/schema"
)

func TestLabels(t *testing.T) {
	j := &Job{ID: "4242", Name: `train "llama"`, User: "bob", UID: 1001, Host: "node-a",
		Meta: map[string]string{schema.JobAccount.Name: "physics", schema.JobPartition.Name: "gpu"}}
	want := []schema.Label{
		{Name: schema.JobID.Label, Value: "4242"}, {Name: schema.JobName.Label, Value: `train "llama"`},
		{Name: schema.JobUser.Label, Value: "bob"}, {Name: schema.JobAccount.Label, Value: "physics"},
		{Name: schema.JobPartition.Label, Value: "gpu"}, {Name: schema.HostName.Label, Value: "node-a"},
		{Name: schema.ServiceName, Value: `train "llama"`},
	}
	if got := (Process{Job: j, Host: "node-a", Comm: "python3", Step: "0"}).Labels(); !reflect.DeepEqual(got, want) {
		t.Errorf("job labels\n%v, want\n%v", got, want)
	}
	// Unnamed: the service is the job; no empty labels.
	got := (&Job{ID: "7", Host: "node-a"}).Labels()
	want = []schema.Label{{Name: schema.JobID.Label, Value: "7"}, {Name: schema.HostName.Label, Value: "node-a"}, {Name: schema.ServiceName, Value: "slurm-job-7"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unnamed job: %v", got)
	}
	// Outside a job, or in another node's: the host and the executable.
	for _, p := range []Process{{Host: "node-a", Comm: "sshd"}, {Host: "node-a", Comm: "sshd", Job: j, Foreign: true}} {
		want = []schema.Label{{Name: schema.HostName.Label, Value: "node-a"}, {Name: schema.ServiceName, Value: "sshd"}}
		if got := p.Labels(); !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: %v", p, got)
		}
		if v := p.Value(schema.JobID); v != "" {
			t.Errorf("%+v: job id %q", p, v)
		}
	}
	if got := (Process{}).Labels(); !reflect.DeepEqual(got, []schema.Label{{Name: schema.ServiceName, Value: "unknown"}}) {
		t.Errorf("nothing known: %v", got)
	}
	if v := (Process{Job: j, Step: "batch"}).Value(schema.JobStep); v != "batch" {
		t.Errorf("step %q", v)
	}
}

// Every job attribute of the schema has a value on Job: an identity (one
// that is not metadata) added to the schema without its field and case in
// Value fails here, not silently on the wire; metadata needs none.
func TestEveryJobAttributeHasAValue(t *testing.T) {
	j := &Job{ID: "x-id", Name: "x-name", User: "x-user", Host: "x-host", Meta: map[string]string{}}
	for _, a := range schema.Metadata() {
		if a != schema.JobName {
			j.Meta[a.Name] = "x-" + a.Name
		}
	}
	for _, a := range append(schema.Scoped(schema.ScopeJob), schema.HostName) {
		if j.Value(a) == "" {
			t.Errorf("Job has no value for %s", a.Name)
		}
	}
	for _, a := range append(schema.Scoped(schema.ScopeGPU), schema.Scoped(schema.ScopeProcess)...) {
		if got := j.Value(a); got != "" {
			t.Errorf("Job gives %s the value %q", a.Name, got)
		}
	}
}

// A process's task (rank, local id, node index) is its own: Value gives
// it, but it is on no series, neither the profiles' series labels nor any
// metric's, where a series per rank would multiply the series per job.
func TestTaskAttributesAreOnNoSeries(t *testing.T) {
	j := &Job{ID: "77", Name: "ddp", User: "bob", UID: 1001, Host: "node-a"}
	p := Process{Job: j, Host: "node-a", Step: "0", Task: "3", Rank: "27", NodeIndex: "3"}
	task := []schema.Attribute{schema.TaskRank, schema.TaskLocalID, schema.NodeIndex}
	for a, want := range map[schema.Attribute]string{schema.TaskRank: "27", schema.TaskLocalID: "3", schema.NodeIndex: "3"} {
		if got := p.Value(a); got != want {
			t.Errorf("%s = %q, want %q", a.Name, got, want)
		}
	}
	for _, l := range append(p.Labels(), j.Labels()...) {
		for _, a := range task {
			if l.Name == a.Label {
				t.Errorf("series label %s=%s", l.Name, l.Value)
			}
		}
	}
	for _, m := range schema.Metrics {
		for _, a := range task {
			if m.Carries(a) {
				t.Errorf("metric %s carries %s", m.Name, a.Name)
			}
		}
	}
	// task_special has no local id; a process in no job has no task.
	if v := (Process{Job: j, Task: "special"}).Value(schema.TaskLocalID); v != "" {
		t.Errorf("task_special: local id %q", v)
	}
	if v := (Process{Task: "0", Rank: "1"}).Value(schema.TaskRank); v != "" {
		t.Errorf("in no job: rank %q", v)
	}
}
