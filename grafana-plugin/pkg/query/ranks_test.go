package query

import (
	"context"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

// pushRanks pushes job 8 of four ranks on two nodes: every rank 50 s of
// CPU time, rank 2 40 s of it in matmul where the others spend 20 s, and
// 10 s in allreduce where the others wait 30 s; and 5 s of a launcher
// with no rank.
func pushRanks(t *testing.T, s standin) {
	t.Helper()
	req := &pushv1.PushRequest{}
	for rank := range 4 {
		stacks := map[string]int64{"main;train;matmul": 20e9, "main;train;allreduce": 30e9}
		if rank == 2 {
			stacks = map[string]int64{"main;train;matmul": 40e9, "main;train;allreduce": 10e9}
		}
		req.Series = append(req.Series, pyrostandin.CPUSeries(now.Add(-10*time.Minute), stacks, schema.ServiceName, "job-8",
			schema.JobID.Label, "8", schema.JobUser.Label, "u8", schema.HostName.Label, []string{"n1", "n2"}[rank/2],
			schema.TaskRank.Label, strconv.Itoa(rank)))
	}
	req.Series = append(req.Series, pyrostandin.CPUSeries(now.Add(-10*time.Minute), map[string]int64{"srun": 5e9}, schema.ServiceName, "job-8",
		schema.JobID.Label, "8", schema.JobUser.Label, "u8", schema.HostName.Label, "n1"))
	c := pushv1connect.NewPusherServiceClient(http.DefaultClient, s.url)
	if _, err := c.Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
}

// The rank that computes twice as long as the median rank is named with
// the function, though every rank's CPU time is the same: the others
// wait for it in allreduce.
func TestRanksNameTheStraggler(t *testing.T) {
	s := newStandin(t, time.Hour)
	pushRanks(t, s)
	e := &Engine{Profiles: s.profile}
	rep, err := e.Ranks(context.Background(), "8", lastHour)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rep.Ranks {
		got = append(got, strings.Join([]string{r.Rank, seconds(r.CPU), r.TopFunction, pct(r.TopShare), pct(r.Deviation)}, " "))
	}
	want := []string{"0 50 allreduce 60 0", "1 50 allreduce 60 0", "2 50 matmul 80 0", "3 50 allreduce 60 0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ranks %q, want %q", got, want)
	}
	if rep.CPUTotal != 200e9 || rep.MedianCPU != 50e9 || rep.Unranked != 5e9 || rep.OffCPUProfile != "" {
		t.Errorf("report %+v", rep)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Rank != "2" || rep.Findings[0].Function != "matmul" || rep.Findings[0].User != "u8" ||
		rep.Findings[0].Summary != "rank 2 spent 2.0× the other ranks' median CPU time in `matmul` (40.0s against 20.0s, of 4 ranks)" {
		t.Errorf("findings %+v", rep.Findings)
	}
	// A job without ranks has none, and no findings.
	rep, err = e.Ranks(context.Background(), "9", lastHour)
	if err != nil || len(rep.Ranks) != 0 || rep.Findings == nil || len(rep.Findings) != 0 {
		t.Errorf("job 9: %+v, %v", rep, err)
	}
}

// The findings table names the straggler too, from profiles alone; a
// restricted user who does not own the job sees none of it.
func TestFindingsNameStragglers(t *testing.T) {
	s := newStandin(t, time.Hour)
	pushRanks(t, s)
	e := &Engine{Profiles: s.profile}
	fs, err := e.FindingsWithWaits(context.Background(), Scope{}, lastHour, findings.Straggler)
	if err != nil || len(fs) != 1 || fs[0].JobID != "8" || fs[0].Rank != "2" || fs[0].Function != "matmul" {
		t.Fatalf("findings %+v, %v", fs, err)
	}
	fs, err = e.FindingsWithWaits(context.Background(), Scope{Restricted: true, Owner: "u1"}, lastHour, findings.Straggler)
	if err != nil || len(fs) != 0 {
		t.Errorf("u1's stragglers: %+v, %v", fs, err)
	}
	// Ranks are judged within what MaxCalls leaves: the totals and the
	// profile types take 2 calls, the four ranks' graphs 4 more.
	s.profile.calls.Store(0)
	e.MaxCalls = 5
	if fs, err := e.FindingsWithWaits(context.Background(), Scope{}, lastHour, findings.Straggler); err != nil || len(fs) != 0 {
		t.Errorf("under MaxCalls 5: %+v, %v", fs, err)
	}
	if n := s.profile.calls.Load(); n != 2 {
		t.Errorf("under MaxCalls 5: %d calls", n)
	}
	e.MaxCalls = 6
	if fs, err := e.FindingsWithWaits(context.Background(), Scope{}, lastHour, findings.Straggler); err != nil || len(fs) != 1 {
		t.Errorf("under MaxCalls 6: %+v, %v", fs, err)
	}
	if _, err := (&Engine{}).FindingsWithWaits(context.Background(), Scope{}, lastHour, findings.Straggler); err != ErrNoPyroscope {
		t.Errorf("without Pyroscope: %v", err)
	}
}

func seconds(ns int64) string { return strconv.FormatFloat(float64(ns)/1e9, 'f', -1, 64) }

func pct(r float64) string { return strconv.FormatFloat(math.Round(r*100), 'f', -1, 64) }
