package attribution

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/slurm"
	"github.com/slurmscope/slurmscope/schema"
)

// fakeQOS is an attribute of a test-only table: nothing in the agent names
// it, yet it must reach the job like the schema's own metadata.
var fakeQOS = schema.Attribute{Name: "slurm.job.test_qos", Label: "slurm_job_test_qos", Scope: schema.ScopeJob,
	Description: "test only", Source: "test only",
	From: schema.Sources{Decide: schema.FromEnv | schema.FromSlurmctld, Env: "SLURM_JOB_TEST_QOS", Squeue: "test_qos", Scontrol: "TestQOS"}}

// metadataRig is one task of job 31 whose environment sets every
// attribute of table and of the schema to "env-<name>", and identities the
// user may not set to something else.
func metadataRig(t *testing.T, table []schema.Attribute, ctld slurm.Controller) *Resolver {
	root := t.TempDir()
	writeProc(t, root, 3100, "0::/system.slice/slurmstepd.scope/job_31/step_batch/user/task_0\n", 31, 1001)
	env := []string{"SLURM_JOB_ID=31", "SLURM_JOB_USER=alice", "SLURM_JOB_UID=1002"}
	for _, a := range append(slices.Clone(table), schema.Metadata()...) {
		if a.From.Env != "" {
			env = append(env, a.From.Env+"=env-"+a.Name)
		}
	}
	must(t, os.WriteFile(filepath.Join(root, "3100", "environ"), []byte(strings.Join(env, "\x00")+"\x00"), 0o644))
	return newFixtureResolver(t, root, func(o *Options) {
		o.Metadata = table
		if ctld != nil {
			o.Controller = ctld
		}
	})
}

// ctldAnswer is slurmctld's answer giving every attribute of table and of
// the schema the value "ctld-<name>".
func ctldAnswer(table []schema.Attribute) *fakeCtld {
	info := slurm.JobInfo{UID: 1001, Meta: map[string]string{}}
	for _, a := range append(slices.Clone(table), schema.Metadata()...) {
		info.Meta[a.Name] = "ctld-" + a.Name
	}
	return &fakeCtld{info: info}
}

// Every metadata attribute of the schema reaches the job, its labels and
// its slurmscope_job_info from its tasks' environment, and slurmctld's word
// wins; so does one of a test-only table that no code names. Identities
// keep their rules whatever the environment says.
func TestEveryMetadataAttributeIsRead(t *testing.T) {
	tables := map[string][]schema.Attribute{
		"schema":     schema.Metadata(),
		"test-only":  append(schema.Metadata(), fakeQOS),
		"no account": slices.DeleteFunc(schema.Metadata(), func(a schema.Attribute) bool { return a == schema.JobAccount }),
	}
	for name, table := range tables {
		for _, from := range []string{"env", "ctld"} {
			t.Run(name+"/"+from, func(t *testing.T) {
				var ctld slurm.Controller
				if from == "ctld" {
					ctld = ctldAnswer(table)
				}
				r := metadataRig(t, table, ctld)
				p, err := r.Resolve(3100)
				if err != nil || !p.InJob() {
					t.Fatalf("%+v, %v", p, err)
				}
				j := p.Job
				labels := map[string]string{}
				for _, l := range j.Labels() {
					labels[l.Name] = l.Value
				}
				for _, a := range table {
					want := from + "-" + a.Name
					if got := j.Value(a); got != want {
						t.Errorf("%s = %q, want %q", a.Name, got, want)
					}
					if slices.Contains(schema.All, a) && labels[a.Label] != want {
						t.Errorf("label %s = %q, want %q", a.Label, labels[a.Label], want)
					}
				}
				if !slices.Contains(table, schema.JobAccount) && j.Value(schema.JobAccount) != "" {
					t.Errorf("an account outside the table was read: %q", j.Value(schema.JobAccount))
				}
				if j.ID != "31" || j.User != "bob" || j.UID != 1001 || labels[schema.ServiceName] != from+"-"+schema.JobName.Name {
					t.Errorf("identities: %+v, service_name %q", *j, labels[schema.ServiceName])
				}
			})
		}
	}
}

// What is read from a task's environment follows the table: the job id
// (to check the environment), then each metadata attribute's variable,
// and never the owner's.
func TestEnvironmentKeysFollowTheTable(t *testing.T) {
	r := New(Options{Proc: procfs.New(t.TempDir()), Metadata: append(schema.Metadata(), fakeQOS)})
	if r.envKeys[0] != slurm.EnvJobID || !slices.Contains(r.envKeys, fakeQOS.From.Env) {
		t.Errorf("keys %q: want %s first and %s", r.envKeys, slurm.EnvJobID, fakeQOS.From.Env)
	}
	for _, a := range schema.Metadata() {
		if !slices.Contains(r.envKeys, a.From.Env) {
			t.Errorf("keys %q lack %s's %s", r.envKeys, a.Name, a.From.Env)
		}
	}
	for _, k := range r.envKeys {
		if strings.Contains(k, "USER") || strings.Contains(k, "UID") {
			t.Errorf("the owner is read from the environment (%s)", k)
		}
	}
}

// An origin the table does not let decide an attribute is not taken for
// it, even where it gives a value.
func TestOnlyDecidingOriginsAreTaken(t *testing.T) {
	envOnly, ctldOnly := fakeQOS, fakeQOS
	envOnly.Name, envOnly.From.Decide = "slurm.job.test_env_only", schema.FromEnv
	ctldOnly.Name, ctldOnly.From.Decide, ctldOnly.From.Env = "slurm.job.test_ctld_only", schema.FromSlurmctld, "SLURM_JOB_TEST_CTLD"
	table := append(schema.Metadata(), envOnly, ctldOnly)
	for _, ctld := range []bool{false, true} {
		var c slurm.Controller
		if ctld {
			c = ctldAnswer(table)
		}
		p, err := metadataRig(t, table, c).Resolve(3100)
		if err != nil || !p.InJob() {
			t.Fatalf("%+v, %v", p, err)
		}
		wantCtld := ""
		if ctld {
			wantCtld = "ctld-" + ctldOnly.Name
		}
		if got := p.Job.Value(envOnly); got != "env-"+envOnly.Name {
			t.Errorf("slurmctld %v: %s = %q, want the environment's", ctld, envOnly.Name, got)
		}
		if got := p.Job.Value(ctldOnly); got != wantCtld {
			t.Errorf("slurmctld %v: %s = %q, want %q", ctld, ctldOnly.Name, got, wantCtld)
		}
	}
}
