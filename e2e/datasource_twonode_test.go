package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/genproto/pluginv2"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
	"github.com/slurmscope/slurmscope/schema"
)

const (
	// twoNodeSeconds is how long cpusplit runs on each node of the job.
	twoNodeSeconds = 10
	// twoNodeMinHotShare is how much of each node's CPU time must be in
	// cpusplit's two hot functions; the rest is the batch shell, srun,
	// slurmstepd and the kernel on their behalf.
	twoNodeMinHotShare = 0.8
	// twoNodeMaxFrames bounds the graphs' size: below the datasource's
	// default maxNodes (Pyroscope's 8192) none is truncated, and the sum
	// holds frame by frame.
	twoNodeMaxFrames = 8192
)

// TestDatasourceTwoNode has two agents (--node-name node-a and node-b)
// profile one two-node SLURM job into a Pyroscope (the stand-in, or
// PYROSCOPE_URL with PYROSCOPE_TENANT), and reads it back through the
// datasource plugin over gRPC: the job's flame graph is the sum of its
// two nodes' graphs, and profile series grouped by host.name give both
// nodes, whose totals sum to the job's.
func TestDatasourceTwoNode(t *testing.T) {
	lane(t, &slurmLane)
	testenv.RequireIntegration(t, slurmtest.Needs(slurmtest.V2))
	pyroURL, tenant := os.Getenv("PYROSCOPE_URL"), os.Getenv("PYROSCOPE_TENANT")
	fresh := pyroURL == ""
	if fresh {
		srv := pyrostandin.New()
		if err := srv.Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		pyroURL = srv.URL()
	}
	agent := buildAgent(t)
	ds := buildDatasource(t)
	ctx := context.Background()
	c := slurmtest.StartT(t, slurmtest.Options{Mode: slurmtest.V2})
	bins := buildWorkloads(t, c.JobDir())
	nodes := []string{"node-a", "node-b"}

	start := time.Now()
	spool := t.TempDir()
	var agents []*agentProc
	for _, node := range nodes {
		args := []string{"run", "--node-name", node, "--pyroscope-url", pyroURL,
			"--spool-dir", filepath.Join(spool, node), "--upload-interval", "3s",
			"--gpu-metrics=false", "--metrics-addr", ""}
		if tenant != "" {
			args = append(args, "--pyroscope-tenant", tenant)
		}
		agents = append(agents, startAgent(t, agent, args...))
	}

	// A job name of its own, so that a real server's data from earlier
	// runs (whose slurmctld handed out the same job ids) never matches.
	name := fmt.Sprintf("ds-twonode-%d", time.Now().UnixNano())
	id, err := c.Sbatch(ctx, "ssalice", []string{"-J", name, "-N2"}, fmt.Sprintf("srun %s %d\n", bins.cpusplit, twoNodeSeconds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Cancel(context.Background(), id) })
	js, err := c.WaitState(ctx, id, "RUNNING", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(js[0].Nodes, nodes) {
		t.Fatalf("job %s runs on %v, want %v", id, js[0].Nodes, nodes)
	}
	t.Logf("job %s (%s as %s) on %v", id, js[0].Name, js[0].User, js[0].Nodes)
	waitJobDone(t, c, id, twoNodeSeconds*time.Second+90*time.Second)
	// SIGTERM flushes the last interval to Pyroscope.
	for _, a := range agents {
		a.stop(t)
	}

	p := launch(t, ds)
	settings := map[string]any{"pyroscope": map[string]any{"url": pyroURL, "tenantId": tenant}}
	admin := &pluginv2.User{Login: "admin", Role: "Admin"}
	from, to := start.Add(-time.Minute), time.Now().Add(time.Minute)
	job := fmt.Sprintf("%s == %q", schema.JobID.Name, id)
	if !fresh {
		job += fmt.Sprintf(" && %s == %q", schema.JobName.Name, name)
	}
	onHost := func(node string) string { return fmt.Sprintf("%s && %s == %q", job, schema.HostName.Name, node) }
	flameOf := func(filter string) *flame.Tree {
		t.Helper()
		return p.flame(t, settings, admin, filter, from, to)
	}

	// A real server makes data queryable a little after ingest: wait
	// until both nodes have some.
	perHost := map[string]*flame.Tree{}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		for _, node := range nodes {
			perHost[node] = flameOf(onHost(node))
		}
		if perHost["node-a"].Total() > 0 && perHost["node-b"].Total() > 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, node := range nodes {
		if perHost[node].Total() <= 0 {
			t.Fatalf("no profile of job %s on %s (filter %s)", id, node, onHost(node))
		}
	}

	t.Run("flamegraph-is-sum-of-nodes", func(t *testing.T) {
		got := flameOf(job)
		want := flame.New()
		for _, node := range nodes {
			want.Merge(perHost[node])
		}
		t.Logf("job %s: %d ns on node-a, %d on node-b, %d in all, %d frames", id,
			perHost["node-a"].Total(), perHost["node-b"].Total(), got.Total(), got.Len())
		if got.Len() >= twoNodeMaxFrames {
			t.Fatalf("the job's graph has %d frames: truncated to the default maxNodes, it cannot equal the sum", got.Len())
		}
		if g, w := treeLines(got), treeLines(want); !reflect.DeepEqual(g, w) {
			t.Errorf("job flame graph (%d frames)\n%s\nwant the sum of its nodes' (%d frames)\n%s",
				got.Len(), strings.Join(g, "\n"), want.Len(), strings.Join(w, "\n"))
		}
	})

	t.Run("hot-functions-dominate", func(t *testing.T) {
		for _, node := range nodes {
			self := map[string]int64{}
			perHost[node].Walk(func(_ int, fn string, s, _ int64) bool {
				self[fn] += s
				return true
			})
			total := perHost[node].Total()
			share := float64(self["hot_a"]+self["hot_b"]) / float64(total)
			t.Logf("%s: hot_a %d, hot_b %d of %d ns (%.1f%%); top leaves %v", node, self["hot_a"], self["hot_b"], total, 100*share, topLeaves(self, 6))
			if share < twoNodeMinHotShare {
				t.Errorf("%s: hot_a and hot_b have %.1f%% of the job's CPU time, want ≥ %.0f%%", node, 100*share, 100*twoNodeMinHotShare)
			}
			if self["hot_a"] <= self["hot_b"] {
				t.Errorf("%s: hot_a %d ns ≤ hot_b %d ns; cpusplit does three times hot_b's work in hot_a", node, self["hot_a"], self["hot_b"])
			}
		}
	})

	t.Run("group-by-host", func(t *testing.T) {
		frames := p.query(t, settings, admin, map[string]any{"queryType": "profileSeries",
			"filter": job, "groupBy": []string{schema.HostName.Name}}, from, to)
		got := totals(t, frames, schema.HostName.Name)
		if len(got) != 2 || got["node-a"] <= 0 || got["node-b"] <= 0 {
			t.Fatalf("series by %s: %v, want node-a and node-b, both > 0:\n%s", schema.HostName.Name, got, dump(frames))
		}
		frames = p.query(t, settings, admin, map[string]any{"queryType": "profileSeries", "filter": job}, from, to)
		merged := totals(t, frames, "")
		if len(merged) != 1 || math.Abs(merged[""]-(got["node-a"]+got["node-b"])) > 1e-6*merged[""] {
			t.Errorf("merged series %v, want one series of %v + %v", merged, got["node-a"], got["node-b"])
		}
		// The series count what the flame graphs do.
		for _, node := range nodes {
			if w := float64(perHost[node].Total()); math.Abs(got[node]-w) > 1e-6*w {
				t.Errorf("%s: series total %v, flame graph total %v", node, got[node], w)
			}
		}
		t.Logf("series totals: %v, merged %v", got, merged[""])
	})
}
