package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/grafana/pyroscope/api/gen/proto/go/querier/v1/querierv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
	"github.com/slurmscope/slurmscope/schema"
)

// rankSeconds is rank 0's CPU time in each of the ranks workload's two
// functions; rank 1 spends twice it in work_rank.
const rankSeconds = 2

// TestRanks: a real Slurm job of two tasks on one node (srun -n 2) whose
// rank 1 spends twice rank 0's time in work_rank. Its profiles in
// Pyroscope (the stand-in, or PYROSCOPE_URL) carry each rank's labels;
// `slurmscope job --ranks` names rank 1 and work_rank as the straggler;
// `slurmscope diff` of rank 1 against rank 0 shows work_rank's excess
// within 10% of what the ranks measured themselves.
func TestRanks(t *testing.T) {
	lane(t, &slurmLane)
	testenv.RequireIntegration(t, slurmtest.Needs(slurmtest.V2), testenv.Tools("gcc"))
	pyroURL, tenant := os.Getenv("PYROSCOPE_URL"), os.Getenv("PYROSCOPE_TENANT")
	if pyroURL == "" {
		srv := pyrostandin.New()
		if err := srv.Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		pyroURL = srv.URL()
	}
	agent, cli := buildAgent(t), buildCLI(t)
	ctx := context.Background()
	c := slurmtest.StartT(t, slurmtest.Options{Mode: slurmtest.V2})
	bin := filepath.Join(c.JobDir(), "ranks")
	if out, err := exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-g", "-o", bin, "../internal/testenv/workloads/ranks.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	args := []string{"run", "--node-name", "node-a", "--pyroscope-url", pyroURL, "--spool-dir", t.TempDir(),
		"--upload-interval", "3s", "--sample-rate", "499", "--gpu-metrics=false", "--metrics-addr", ""}
	if tenant != "" {
		args = append(args, "--pyroscope-tenant", tenant)
	}
	ag := startAgent(t, agent, args...)

	// A name of its own: a real server's data from earlier runs (whose
	// slurmctld handed out the same ids) never matches.
	name := fmt.Sprintf("ranks-%d", time.Now().UnixNano())
	out := filepath.Join(c.JobDir(), name+"-%t.out")
	id, err := c.Sbatch(ctx, "ssalice", []string{"-J", name, "-n", "2", "-w", "node-a"},
		fmt.Sprintf("srun -n 2 --output=%s %s %d\n", out, bin, rankSeconds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Cancel(context.Background(), id) })
	waitJobDone(t, c, id, 4*rankSeconds*time.Second+120*time.Second)
	ag.stop(t)
	measured := map[int][2]float64{} // rank: work_common, work_rank seconds
	for task := range 2 {
		b, err := os.ReadFile(filepath.Join(c.JobDir(), fmt.Sprintf("%s-%d.out", name, task)))
		if err != nil {
			t.Fatal(err)
		}
		var r int
		var common, own float64
		if n, _ := fmt.Sscanf(string(b), "rank %d work_common %g work_rank %g", &r, &common, &own); n != 3 {
			t.Fatalf("task %d printed %q", task, b)
		}
		measured[r] = [2]float64{common, own}
	}
	t.Logf("job %s: the ranks measured %v (work_common, work_rank seconds)", id, measured)
	job := fmt.Sprintf("%s == %q && %s == %q", schema.JobID.Name, id, schema.JobName.Name, name)
	since := []string{"--pyroscope-url", pyroURL, "--since", "1h"}
	if tenant != "" {
		since = append(since, "--tenant", tenant)
	}

	t.Run("labels", func(t *testing.T) {
		q := querierv1connect.NewQuerierServiceClient(http.DefaultClient, pyroURL, connect.WithInterceptors(tenantInterceptor(tenant)))
		sel := fmt.Sprintf(`{%s=%q, %s=%q}`, schema.JobID.Label, id, schema.JobName.Label, name)
		for label, want := range map[string][]string{
			schema.TaskRank.Label: {"0", "1"}, schema.TaskLocalID.Label: {"0", "1"}, schema.NodeIndex.Label: {"0"},
		} {
			var got []string
			// A real server makes data queryable a little after ingest.
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
				resp, err := q.LabelValues(ctx, connect.NewRequest(&typesv1.LabelValuesRequest{Name: label, Matchers: []string{sel},
					Start: time.Now().Add(-time.Hour).UnixMilli(), End: time.Now().Add(time.Minute).UnixMilli()}))
				if err != nil {
					t.Fatalf("LabelValues(%s): %v", label, err)
				}
				if got = resp.Msg.Names; slices.Equal(got, want) || time.Now().After(deadline) {
					break
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s = %q, want %q", label, got, want)
			}
		}
		// The job's off-CPU profile (its ranks preempted, srun's and the
		// batch script's waits) is in Pyroscope, labelled as its CPU one.
		for _, pt := range []string{schema.ProcessCPU.ID(), schema.OffCPU.ID(), schema.OffCPURunnable.ID()} {
			m := fmt.Sprintf(`{%s=%q, %s=%q, __profile_type__=%q}`, schema.JobID.Label, id, schema.JobName.Label, name, pt)
			resp, err := q.LabelValues(ctx, connect.NewRequest(&typesv1.LabelValuesRequest{Name: schema.JobUser.Label, Matchers: []string{m},
				Start: time.Now().Add(-time.Hour).UnixMilli(), End: time.Now().Add(time.Minute).UnixMilli()}))
			if err != nil {
				t.Fatalf("LabelValues(%s): %v", pt, err)
			}
			if got := resp.Msg.Names; !slices.Equal(got, []string{"ssalice"}) {
				t.Errorf("%s: %s = %q, want [ssalice]", pt, schema.JobUser.Label, got)
			}
		}
	})

	t.Run("straggler", func(t *testing.T) {
		var rep struct {
			Findings []struct {
				Kind, Rank, Function string
			} `json:"findings"`
			Ranks []struct {
				Rank string `json:"rank"`
			} `json:"ranks"`
		}
		runJSON(t, cli, append([]string{"job", id, "--ranks", "--json"}, since...), &rep)
		if len(rep.Ranks) != 2 {
			t.Errorf("%d ranks in the table, want 2: %+v", len(rep.Ranks), rep)
		}
		var named []string
		for _, f := range rep.Findings {
			if f.Kind == "straggler" {
				named = append(named, f.Rank+" in "+f.Function)
			}
		}
		if !slices.Equal(named, []string{"1 in work_rank"}) {
			t.Errorf("stragglers %q: want rank 1 in work_rank alone", named)
		}
	})

	t.Run("diff", func(t *testing.T) {
		var d struct {
			Grew []struct {
				Name      string `json:"name"`
				LeftSelf  int64  `json:"left_self_ns"`
				RightSelf int64  `json:"right_self_ns"`
			} `json:"grew"`
		}
		side := func(rank string) string { return fmt.Sprintf("%s && %s == %q", job, schema.TaskRank.Name, rank) }
		runJSON(t, cli, append([]string{"diff", "--left", side("0"), "--right", side("1"), "--json"}, since...), &d)
		i := slices.IndexFunc(d.Grew, func(f struct {
			Name      string `json:"name"`
			LeftSelf  int64  `json:"left_self_ns"`
			RightSelf int64  `json:"right_self_ns"`
		}) bool {
			return f.Name == "work_rank"
		})
		if i < 0 {
			t.Fatalf("work_rank did not grow: %+v", d.Grew)
		}
		got := float64(d.Grew[i].RightSelf-d.Grew[i].LeftSelf) / 1e9
		want := measured[1][1] - measured[0][1]
		t.Logf("work_rank: %.3f s in rank 0, %.3f s in rank 1: %.3f s more; the ranks measured %.3f s more",
			float64(d.Grew[i].LeftSelf)/1e9, float64(d.Grew[i].RightSelf)/1e9, got, want)
		if got < want*0.9 || got > want*1.1 {
			t.Errorf("work_rank's excess %.3f s, the ranks measured %.3f s", got, want)
		}
	})
}

// runJSON runs the query command and decodes its JSON output into v.
func runJSON(t *testing.T, cli string, args []string, v any) {
	t.Helper()
	cmd := exec.Command(cli, args...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("slurmscope %v: %v\n%s\n%s", args, err, out, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("slurmscope %v: %v\n%s", args, err, out)
	}
}
