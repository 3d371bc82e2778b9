package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/schema"
)

func TestParseSqueueJSON(t *testing.T) {
	for name, doc := range map[string]string{
		"22.05": `{"jobs":[{"job_id":11,"name":"other"},{"job_id":12,"name":"train \"llama\" ✓","user_name":"bob","user_id":1001,"account":"physics","partition":"gpu","qos":"normal"}]}`,
		"24.11": `{"jobs":[{"job_id":12,"name":"train \"llama\" ✓","user_name":"bob","user_id":{"set":true,"number":1001},"account":"physics","partition":"gpu","qos":"normal"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSqueueJSON([]byte(doc), "12")
			want := JobInfo{ID: "12", User: "bob", UID: 1001, Meta: map[string]string{schema.JobName.Name: `train "llama" ✓`, schema.JobAccount.Name: "physics",
				schema.JobPartition.Name: "gpu", schema.JobQOS.Name: "normal"}}
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
	if _, err := ParseSqueueJSON([]byte(`{"jobs":[]}`), "12"); !errors.Is(err, ErrNoSuchJob) {
		t.Errorf("missing job: %v", err)
	}
	if _, err := ParseSqueueJSON([]byte(`not json`), "12"); err == nil {
		t.Error("garbage accepted")
	}
}

func TestParseScontrolOneLiner(t *testing.T) {
	line := `JobId=12 JobName=train "llama" ✓ UserId=bob(1001) GroupId=bob(1001) MCS_label=N/A Priority=1 Account=physics QOS=normal JobState=RUNNING Partition=gpu AllocNode:Sid=n:1`
	got, err := ParseScontrolOneLiner([]byte(line), "12")
	want := JobInfo{ID: "12", User: "bob", UID: 1001, Meta: map[string]string{schema.JobName.Name: `train "llama" ✓`, schema.JobAccount.Name: "physics",
		schema.JobPartition.Name: "gpu", schema.JobQOS.Name: "normal"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v", got, err)
	}
	// A name crafted to look like the owner field: the name is kept, the
	// owner is not trusted.
	evil := `JobId=13 JobName=x UserId=alice(1002) GroupId=y UserId=bob(1001) GroupId=bob(1001) Account=a Partition=p`
	got, err = ParseScontrolOneLiner([]byte(evil), "13")
	if err != nil || got.User != "" || got.UID != -1 {
		t.Fatalf("forged owner accepted: %+v, %v", got, err)
	}
	if _, err := ParseScontrolOneLiner([]byte(line), "99"); err == nil {
		t.Error("answer for another job accepted")
	}
	if _, err := ParseScontrolOneLiner([]byte("slurm_load_jobs error: Invalid job id specified\n"), "12"); !errors.Is(err, ErrNoSuchJob) {
		t.Errorf("invalid id: %v", err)
	}
}

func TestCommandsFallsBackToScontrol(t *testing.T) {
	var calls []string
	c := &Commands{run: func(_ context.Context, name string, args ...string) ([]byte, error) {
		calls = append(calls, name+" "+strings.Join(args, " "))
		if name == "squeue" {
			return nil, errors.New("squeue: error: unable to load serializer plugin")
		}
		return []byte("JobId=7 JobName=a b UserId=bob(1001) GroupId=bob(1001) Account=x Partition=p\n"), nil
	}}
	info, err := c.Job(context.Background(), "7")
	if err != nil || info.Value(schema.JobName) != "a b" || info.User != "bob" {
		t.Fatalf("got %+v, %v (calls %q)", info, err, calls)
	}
	if len(calls) != 2 || calls[0] != "squeue --json --jobs=7" || calls[1] != "scontrol show job -d -o 7" {
		t.Fatalf("calls = %q", calls)
	}
	if _, err := c.Job(context.Background(), "7;rm -rf /"); err == nil {
		t.Fatal("a non-numeric job id reached a command line")
	}
}

// squeue --json of Slurm 22.05 for a job holding two GPUs on node-a and a
// MIG instance on node-b (recorded from a real 22.05 slurmctld, trimmed),
// and the 24.05 shape of the node list.
func TestSqueueGRES(t *testing.T) {
	doc22 := `{"jobs":[{"job_id":1,"name":"probe","user_name":"ssalice","user_id":5001,"account":"","partition":"debug",
		"gres_detail":["gpu:h100:2(IDX:0-1)","gpu:3g.40gb:1(IDX:2)"],
		"job_resources":{"nodes":"node-[a-b]","allocated_nodes":[{"nodename":"node-a","cpus_used":1},{"nodename":"node-b"}]}}]}`
	doc24 := `{"jobs":[{"job_id":1,"name":"probe","user_id":{"set":true,"number":5001},
		"gres_detail":["gpu:h100:2(IDX:0-1)","gpu:3g.40gb:1(IDX:2)"],
		"job_resources":{"nodes":{"count":2,"list":"node-[a-b]","allocation":[{"index":0,"name":"node-a"},{"index":1,"name":"node-b"}]}}}]}`
	want := map[string][]GRES{
		"node-a": {{Name: "gpu", Type: "h100", Count: 2, Index: []int{0, 1}, GPU: true}},
		"node-b": {{Name: "gpu", Type: "3g.40gb", Count: 1, Index: []int{2}, GPU: true}},
	}
	for name, doc := range map[string]string{"22.05": doc22, "24.05": doc24} {
		got, err := ParseSqueueJSON([]byte(doc), "1")
		if err != nil || !reflect.DeepEqual(got.GRES, want) {
			t.Errorf("%s: GRES = %+v, %v", name, got.GRES, err)
		}
	}
	none, err := ParseSqueueJSON([]byte(`{"jobs":[{"job_id":1,"gres_detail":[],"job_resources":{"allocated_nodes":[{"nodename":"node-a"}]}}]}`), "1")
	if err != nil || none.GRES["node-a"] == nil || len(none.GRES["node-a"]) != 0 {
		t.Errorf("a job without GRES: %+v, %v", none.GRES, err)
	}
	old, err := ParseSqueueJSON([]byte(`{"jobs":[{"job_id":1}]}`), "1")
	if err != nil || old.GRES != nil {
		t.Errorf("an answer without the allocation must say nothing: %+v, %v", old.GRES, err)
	}
}

// scontrol show job -d -o of the same job (recorded from 22.05), and a
// job name that imitates the per-node fields.
func TestScontrolGRES(t *testing.T) {
	line := `JobId=1 JobName=probe UserId=ssalice(5001) GroupId=ssalice(5001) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Partition=debug NodeList=node-[a-b] BatchHost=node-a NumNodes=2 TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* JOB_GRES=gpu:h100:2   Nodes=node-a CPU_IDs=0 Mem=0 GRES=gpu:h100:2(IDX:0-1)   Nodes=node-b CPU_IDs=1 Mem=0 GRES=gpu:3g.40gb:1(IDX:2) MinCPUsNode=1 MinMemoryNode=0 Features=(null) Command=/jobs/x.sh WorkDir=/jobs Comment=Nodes=node-a CPU_IDs=0 Mem=0 GRES=gpu:h100:8(IDX:0-7)`
	got, err := ParseScontrolOneLiner([]byte(line), "1")
	want := map[string][]GRES{
		"node-a": {{Name: "gpu", Type: "h100", Count: 2, Index: []int{0, 1}, GPU: true}},
		"node-b": {{Name: "gpu", Type: "3g.40gb", Count: 1, Index: []int{2}, GPU: true}},
	}
	if err != nil || !reflect.DeepEqual(got.GRES, want) {
		t.Fatalf("GRES = %+v, %v", got.GRES, err)
	}
	evil := `JobId=2 JobName=x Nodes=node-a CPU_IDs=0 Mem=0 GRES=gpu:h100:8(IDX:0-7) UserId=bob(1001) GroupId=bob(1001) Account=a Partition=p   Nodes=node-a CPU_IDs=0 Mem=0 GRES= MinCPUsNode=1`
	got, err = ParseScontrolOneLiner([]byte(evil), "2")
	if err != nil || got.GRES["node-a"] == nil || len(got.GRES["node-a"]) != 0 {
		t.Fatalf("a job name granted GPUs: %+v, %v", got.GRES, err)
	}
	forged := `JobId=3 JobName=x UserId=a(1) GroupId=b Nodes=node-a CPU_IDs=0 Mem=0 GRES=gpu:h100:8(IDX:0-7) UserId=bob(1001) GroupId=bob(1001) Nodes=node-a CPU_IDs=0 Mem=0 GRES= MinCPUsNode=1`
	if got, err = ParseScontrolOneLiner([]byte(forged), "3"); err != nil || got.GRES != nil {
		t.Fatalf("a name imitating the owner's fields granted GPUs: %+v, %v", got.GRES, err)
	}
}

func TestParseGRESDetail(t *testing.T) {
	got, err := ParseGRESDetail("gpu:a100-sxm4-80gb:3(IDX:0,2-3),gpu:1(IDX:5),shard:4,gpu:2(S:0-1)")
	want := []GRES{{"gpu", "a100-sxm4-80gb", 3, []int{0, 2, 3}, true}, {"gpu", "", 1, []int{5}, true}, {"shard", "", 4, nil, false}, {"gpu", "", 2, nil, true}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, bad := range []string{"gpu", "gpu:x", "gpu:1(IDX:3-1)", "gpu:1(IDX:0", "gpu:1(IDX:99999)", "gpu:1(IDX:-1)", "gpu:1(IDX:01)"} {
		if g, err := ParseGRESDetail(bad); err == nil {
			t.Errorf("%q accepted as %+v", bad, g)
		}
	}
}

func TestExpandHostlist(t *testing.T) {
	for in, want := range map[string]string{
		"node-a":              "node-a",
		"node-[a-b]":          "", // letters are not a range
		"gpu[01-03,7],login1": "gpu01 gpu02 gpu03 gpu7 login1",
		"rack[1-2]-n[1-2]":    "rack1-n1 rack1-n2 rack2-n1 rack2-n2",
		"n[8-10]":             "n8 n9 n10",
	} {
		got, err := ExpandHostlist(in)
		if want == "" {
			if err == nil {
				t.Errorf("%q: accepted as %q", in, got)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ExpandHostlist("n[0-99999999]"); err == nil {
		t.Error("a hostlist of 100 million hosts was expanded")
	}
}

func TestParseStepdTitle(t *testing.T) {
	for in, want := range map[string][2]string{
		"slurmstepd: [1.0]\x00\x00\x00":  {"1", "0"},
		"slurmstepd: [4242.batch]\x00":   {"4242", "batch"},
		"slurmstepd: [4242.extern]":      {"4242", "extern"},
		"slurmstepd: [7.interactive]":    {"7", "interactive"},
		"slurmstepd: [9.0+1]":            {"9", "0+1"},
		"slurmstepd: [9.3 stepmgr]":      {"9", "3"},
		"slurmstepd: [s0W5FQ2XKD8Y3M.0]": {},
		"slurmstepd: [4242]":             {},
		"slurmstepd: [04242.0]":          {},
		"slurmstepd: [99999999999.0]":    {},
		"slurmstepd: [1.0] extra":        {},
		"sleep\x00slurmstepd: [1.0]":     {},
		"slurmstepd: [1:namespace]":      {},
		"slurmstepd: [1.x y]":            {},
	} {
		id, step, ok := ParseStepdTitle([]byte(in))
		if ok != (want[0] != "") || id != want[0] || step != want[1] {
			t.Errorf("%q: %q %q %v, want %q", in, id, step, ok, want)
		}
	}
}

// slurmd -G of Slurm 22.05 on the mixed node of the tests: two whole
// GPUs and two MIG instances of a third (recorded from a real slurmd).
const slurmdG2205 = `slurmd: Gres Name=gpu Type=h100 Count=1 Index=0 ID=7696487 File=/dev/nvidia0 (null)
slurmd: Gres Name=gpu Type=h100 Count=1 Index=1 ID=7696487 File=/dev/nvidia1 (null)
slurmd: Gres Name=gpu Type=3g.40gb Count=1 Index=22 ID=7696487 File=/dev/nvidia2,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22 (null)
slurmd: Gres Name=gpu Type=4g.40gb Count=1 Index=13 ID=7696487 File=/dev/nvidia2,/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13 (null)
`

func TestParseSlurmdG(t *testing.T) {
	recs, err := ParseSlurmdG([]byte(slurmdG2205))
	if err != nil || len(recs) != 4 {
		t.Fatalf("got %+v, %v", recs, err)
	}
	idx, err := IndexedGPUs(recs)
	want := [][]string{{"/dev/nvidia0"}, {"/dev/nvidia1"},
		{"/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"},
		{"/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"}}
	if err != nil || !reflect.DeepEqual(idx, want) {
		t.Fatalf("Indexed = %q, %v", idx, err)
	}
	// Newer versions print Links and Flags, and a record of several GPUs
	// as a range.
	recs, err = ParseSlurmdG([]byte("Gres Name=gpu Type=a100 Count=4 Index=0 ID=7696487 File=/dev/nvidia[0-3] Cores=0-31 CoreCnt=64 Links=(null) Flags=HAS_FILE,HAS_TYPE,ENV_NVML\nGres Name=shard Type=(null) Count=8 ID=1 Links=(null) Flags=\n"))
	if err != nil {
		t.Fatal(err)
	}
	if idx, err = IndexedGPUs(recs); err != nil || len(idx) != 4 || idx[3][0] != "/dev/nvidia3" {
		t.Fatalf("Indexed = %q, %v", idx, err)
	}
	if recs[1].Type != "" || recs[1].Files != nil {
		t.Errorf("untyped, file-less record: %+v", recs[1])
	}
	bad, _ := ParseSlurmdG([]byte("Gres Name=gpu Type=x Count=3 File=/dev/nvidia[0-1]\n"))
	if _, err := IndexedGPUs(bad); err == nil {
		t.Error("a record whose files do not match its count was indexed")
	}
}

func TestNodeGRESRunsSlurmd(t *testing.T) {
	var calls []string
	c := &Commands{run: func(_ context.Context, name string, args ...string) ([]byte, error) {
		calls = append(calls, name+" "+strings.Join(args, " "))
		return []byte(slurmdG2205), nil
	}}
	recs, err := c.NodeGRES(context.Background(), "node-a")
	if err != nil || len(recs) != 4 || calls[0] != "slurmd -G -N node-a" {
		t.Fatalf("got %d records, %v; calls %q", len(recs), err, calls)
	}
	if _, err := c.NodeGRES(context.Background(), "-x;reboot"); err == nil {
		t.Error("a hostile node name reached slurmd's command line")
	}
}

// fakeQOS is an attribute of a test-only table: no code names it, yet both
// of slurmctld's answers must give it.
var fakeQOS = schema.Attribute{Name: "slurm.job.test_qos", Label: "slurm_job_test_qos", Scope: schema.ScopeJob,
	From: schema.Sources{Decide: schema.FromEnv | schema.FromSlurmctld, Env: "SLURM_JOB_TEST_QOS", Squeue: "test_qos", Scontrol: "TestQOS"}}

// Every metadata attribute of the schema, and one of a test-only table,
// is read from squeue --json and from scontrol where the table says; an
// attribute outside the table is not.
func TestEveryMetadataAttributeIsParsed(t *testing.T) {
	table := append(schema.Metadata(), fakeQOS)
	fields := map[string]any{"job_id": 12, "user_name": "bob", "user_id": 1001}
	line := fmt.Sprintf("JobId=12 JobName=sc-%s UserId=bob(1001) GroupId=bob(1001) MCS_label=N/A Priority=1", schema.JobName.Name)
	for _, a := range table {
		fields[a.From.Squeue] = "sq-" + a.Name
		if a != schema.JobName {
			line += fmt.Sprintf(" %s=sc-%s", a.From.Scontrol, a.Name)
		}
	}
	line += " Command=/jobs/x.sh Comment=x Account=forged Partition=forged"
	doc, err := json.Marshal(map[string]any{"jobs": []any{fields}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, prefix string
		parse        func(attrs []schema.Attribute) (JobInfo, error)
	}{
		{"squeue", "sq-", func(attrs []schema.Attribute) (JobInfo, error) { return parseSqueueJSON(doc, "12", attrs) }},
		{"scontrol", "sc-", func(attrs []schema.Attribute) (JobInfo, error) {
			return parseScontrolOneLiner([]byte(line), "12", attrs)
		}},
	} {
		got, err := tc.parse(table)
		if err != nil || got.ID != "12" || got.User != "bob" || got.UID != 1001 {
			t.Fatalf("%s: %+v, %v", tc.name, got, err)
		}
		for _, a := range table {
			if v := got.Value(a); v != tc.prefix+a.Name {
				t.Errorf("%s: %s = %q, want %q", tc.name, a.Name, v, tc.prefix+a.Name)
			}
		}
		got, err = tc.parse(schema.Metadata())
		if err != nil || got.Value(fakeQOS) != "" {
			t.Errorf("%s: an attribute outside the table was read: %+v, %v", tc.name, got, err)
		}
	}
	if keys := EnvKeys(table); keys[0] != EnvJobID || !slices.Contains(keys, fakeQOS.From.Env) {
		t.Errorf("EnvKeys = %q", keys)
	}
}

// A job name that imitates the owner's fields leaves the owner and every
// field after it untrusted: where the name ends is unknown.
func TestScontrolForgedNameTrustsNoField(t *testing.T) {
	line := `JobId=13 JobName=x UserId=alice(1002) GroupId=y Account=evil Partition=evil UserId=bob(1001) GroupId=bob(1001) Account=a Partition=p`
	got, err := ParseScontrolOneLiner([]byte(line), "13")
	if err != nil || got.User != "" || got.UID != -1 || got.Value(schema.JobAccount) != "" || got.Value(schema.JobPartition) != "" {
		t.Fatalf("forged fields accepted: %+v, %v", got, err)
	}
}
