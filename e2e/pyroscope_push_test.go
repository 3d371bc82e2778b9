package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/querier/v1/querierv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/internal/testenv/simjob"
	"github.com/slurmscope/slurmscope/schema"
)

const spinEnv = "SLURMSCOPE_E2E_SPIN"

// binDir holds what the tests build once (the agent).
var binDir string

// TestMain lets the test binary double as a CPU workload, so the profile
// has a function we know the name of. The tests wait on their lane
// (lane), not on -parallel: unless it is given, every test may start.
func TestMain(m *testing.M) {
	if os.Getenv(spinEnv) == "1" {
		spinForPushTest()
	}
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", "64")
	}
	var err error
	if binDir, err = os.MkdirTemp("", "slurmscope-e2e-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

//go:noinline
func spinForPushTest() {
	x := 0
	for {
		for i := 0; i < 1<<20; i++ {
			x += i ^ (x >> 3)
		}
		if x == 42 {
			fmt.Println(x)
		}
	}
}

// TestPushToPyroscope runs the agent against a Pyroscope (the stand-in, or
// a real server from PYROSCOPE_URL, with PYROSCOPE_TENANT if it needs one)
// and reads the job's profile back with SelectMergeStacktraces.
func TestPushToPyroscope(t *testing.T) {
	alone(t)
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	url, tenant := os.Getenv("PYROSCOPE_URL"), os.Getenv("PYROSCOPE_TENANT")
	if url == "" {
		srv := pyrostandin.New()
		if err := srv.Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		url = srv.URL()
	}
	// A fresh job id per run, so a real server's older data never matches.
	jobID := strconv.Itoa(3000000 + int(time.Now().UnixNano()/1e6%1000000))
	job, err := simjob.Create("slurmscope-e2e.slice", jobID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Remove() })

	spin := exec.Command(os.Args[0])
	spin.Env = append(os.Environ(), spinEnv+"=1", "SLURM_JOB_ID="+jobID, "SLURM_JOB_NAME=push e2e ✓", "SLURM_JOB_PARTITION=e2e")
	if err := spin.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spin.Process.Kill(); spin.Wait() })
	if err := job.Add(spin.Process.Pid); err != nil {
		t.Fatal(err)
	}

	agent := buildAgent(t)
	start := time.Now()
	args := []string{"run", "--pyroscope-url", url, "--spool-dir", filepath.Join(t.TempDir(), "spool"),
		"--upload-interval", "2s", "--node-name", "e2e-node", "--metrics-addr", "", "--slurm-cgroup-v2-parent", job.Parent,
		"--slurm-cgroup-v1-parent", job.Parent}
	if tenant != "" {
		args = append(args, "--pyroscope-tenant", tenant)
	}
	a := exec.Command(agent, args...)
	var logs strings.Builder
	a.Stdout, a.Stderr = &logs, &logs
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	a.Process.Signal(syscall.SIGTERM)
	if err := a.Wait(); err != nil {
		t.Fatalf("agent: %v\n%s", err, logs.String())
	}

	q := querierv1connect.NewQuerierServiceClient(http.DefaultClient, url, connect.WithInterceptors(tenantInterceptor(tenant)))
	ctx := context.Background()
	sel := fmt.Sprintf(`{%s=%q}`, schema.JobID.Label, jobID)
	var fg *querierv1.FlameGraph
	// A real server makes data queryable a little after ingest.
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err := q.SelectMergeStacktraces(ctx, connect.NewRequest(&querierv1.SelectMergeStacktracesRequest{
			ProfileTypeID: "process_cpu:cpu:nanoseconds:cpu:nanoseconds", LabelSelector: sel,
			Start: start.Add(-time.Minute).UnixMilli(), End: time.Now().Add(time.Minute).UnixMilli(),
		}))
		if err != nil {
			t.Fatalf("SelectMergeStacktraces: %v", err)
		}
		fg = resp.Msg.Flamegraph
		if fg.GetTotal() > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if fg.GetTotal() <= 0 {
		t.Fatalf("no data for %s\nagent log:\n%s", sel, logs.String())
	}
	// The spinning function must carry (nearly) all of the job's time.
	self := map[string]int64{}
	for _, lvl := range fg.Levels {
		for i := 0; i+3 < len(lvl.Values); i += 4 {
			self[fg.Names[lvl.Values[i+3]]] += lvl.Values[i+2]
		}
	}
	var spinSelf int64
	for name, v := range self {
		if strings.Contains(name, "spinForPushTest") {
			spinSelf += v
		}
	}
	if share := float64(spinSelf) / float64(fg.Total); share < 0.9 {
		t.Errorf("spinForPushTest has %.0f%% of the job's CPU time, want >= 90%%; self times: %v", share*100, self)
	}
	// The CPU profile and the off-CPU one (the Go runtime's threads park
	// and sleep) carry the same labels.
	for _, pt := range []string{schema.ProcessCPU.ID(), schema.OffCPU.ID()} {
		m := fmt.Sprintf(`{%s=%q, __profile_type__=%q}`, schema.JobID.Label, jobID, pt)
		for name, want := range map[string]string{schema.JobName.Label: "push e2e ✓", schema.JobUser.Label: "root",
			schema.JobPartition.Label: "e2e", schema.HostName.Label: "e2e-node", schema.ServiceName: "push e2e ✓"} {
			resp, err := q.LabelValues(ctx, connect.NewRequest(&typesv1.LabelValuesRequest{Name: name, Matchers: []string{m},
				Start: start.Add(-time.Minute).UnixMilli(), End: time.Now().Add(time.Minute).UnixMilli()}))
			if err != nil {
				t.Fatalf("LabelValues(%s): %v", name, err)
			}
			if got := resp.Msg.Names; len(got) != 1 || got[0] != want {
				t.Errorf("%s: %s = %q, want [%q]", pt, name, got, want)
			}
		}
	}
}

func tenantInterceptor(tenant string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if tenant != "" {
				req.Header().Set("X-Scope-OrgID", tenant)
			}
			return next(ctx, req)
		}
	}
}
