package slurm

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestParseSqueueJSON(t *testing.T) {
	for name, doc := range map[string]string{
		"22.05": `{"jobs":[{"job_id":11,"name":"other"},{"job_id":12,"name":"train \"llama\" ✓","user_name":"bob","user_id":1001,"account":"physics","partition":"gpu"}]}`,
		"24.11": `{"jobs":[{"job_id":12,"name":"train \"llama\" ✓","user_name":"bob","user_id":{"set":true,"number":1001},"account":"physics","partition":"gpu"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSqueueJSON([]byte(doc), "12")
			want := JobInfo{ID: "12", Name: `train "llama" ✓`, User: "bob", UID: 1001, Account: "physics", Partition: "gpu"}
			if err != nil || got != want {
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
	want := JobInfo{ID: "12", Name: `train "llama" ✓`, User: "bob", UID: 1001, Account: "physics", Partition: "gpu"}
	if err != nil || got != want {
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
	if err != nil || info.Name != "a b" || info.User != "bob" {
		t.Fatalf("got %+v, %v (calls %q)", info, err, calls)
	}
	if len(calls) != 2 || calls[0] != "squeue --json --jobs=7" || calls[1] != "scontrol show job -o 7" {
		t.Fatalf("calls = %q", calls)
	}
	if _, err := c.Job(context.Background(), "7;rm -rf /"); err == nil {
		t.Fatal("a non-numeric job id reached a command line")
	}
}
