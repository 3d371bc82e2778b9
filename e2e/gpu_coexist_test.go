package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
	"github.com/slurmscope/slurmscope/schema"
)

// The injection library beside the job's own GPU tools, in
// TestGPUKernelProfiles's cluster: a job that runs its own CUPTI profiler
// (the Kineto stand-in, which links libcupti as Kineto does) and a job
// that gives CUDA another injection library (as Nsight does).

// profilerHold is how long the Kineto stand-in holds CUPTI after its
// kernels: the library stands aside at least that long.
const profilerHold = 3 * time.Second

// nsightLib is what Nsight Systems would put in CUDA_INJECTION64_PATH;
// nothing needs to exist there.
const nsightLib = "/opt/nvidia/nsight-systems/target-linux-x64/libToolsInjection64.so"

type coexistJobs struct {
	c                   *slurmtest.Cluster
	kineto, nsight      string // job ids
	kinetoOut, report   string // the trainer's output, the stand-in's report
	truth, nsightRecord string
}

func submitCoexistJobs(t *testing.T, c *slurmtest.Cluster, bin string) *coexistJobs {
	t.Helper()
	ctx := context.Background()
	j := &coexistJobs{c: c,
		kinetoOut: filepath.Join(c.JobDir(), "kineto-trainer.out"), report: filepath.Join(c.JobDir(), "kineto-report"),
		truth: filepath.Join(c.JobDir(), "kineto-truth"), nsightRecord: filepath.Join(c.JobDir(), "nsight.injection")}
	// 40 kernels, the user's profiler on for 25 and held, 30 after.
	kineto := fmt.Sprintf("export SLURMSCOPE_CUPTI_PATH=%s SLURMSCOPE_MOCK_TRUTH_FILE=%s SLURMSCOPE_KINETO_STANDIN_REPORT=%s\n%s --user-profiler 40:25:30 --profiler-hold %g >%s 2>&1\n",
		filepath.Join(bin, "mock", "libcupti.so"), j.truth, j.report, filepath.Join(bin, "trainer"), profilerHold.Seconds(), j.kinetoOut)
	var err error
	if j.kineto, err = c.Sbatch(ctx, "ssalice", []string{"-J", "own-profiler", "-w", profiledNode}, kineto); err != nil {
		t.Fatal(err)
	}
	// Long enough for the agent's rescans to find it.
	nsight := fmt.Sprintf("echo \"${CUDA_INJECTION64_PATH:-}\" >%s\nsleep 5\n", j.nsightRecord)
	if j.nsight, err = c.Sbatch(ctx, "ssbob", []string{"-J", "nsight", "-w", profiledNode, "--export=ALL,CUDA_INJECTION64_PATH=" + nsightLib}, nsight); err != nil {
		t.Fatal(err)
	}
	return j
}

func (j *coexistJobs) wait(t *testing.T) {
	t.Helper()
	waitJobDone(t, j.c, j.kineto, 3*time.Minute)
	waitJobDone(t, j.c, j.nsight, 3*time.Minute)
}

// check wants: the user's profiler got all its callbacks and records; the
// job's gpu profiles hold the kernels before and after it exactly, none of
// its own, and the time aside under the untraced type; the per-job
// metrics name both jobs.
func (j *coexistJobs) check(t *testing.T, out string, metrics []string) {
	t.Helper()
	trainer := readTrimmed(t, j.kinetoOut)
	var window int64
	for _, f := range strings.Fields(trainer) {
		if v, ok := strings.CutPrefix(f, "window_ns="); ok {
			window, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if !strings.Contains(trainer, "profiler_subscribe=0 ") || window <= 0 {
		t.Fatalf("the job's own profiler could not subscribe:\n%s", trainer)
	}
	report := readTrimmed(t, j.report)
	for _, want := range []string{"subscribe=0 ", "unsubscribe=0 ", "launch_callbacks=25 ", "records=25", "record_kernel=profiled_kernel n=25"} {
		if !strings.Contains(report, want) {
			t.Errorf("the job's own profiler: report lacks %q:\n%s", want, report)
		}
	}
	if !strings.Contains(trainer, "slurmscope-inject: ") {
		t.Errorf("the library said nothing on stderr about stepping aside:\n%s", trainer)
	}

	truth := readKernelTotals(t, j.truth)
	got := map[string]int64{}
	var untraced int64
	for path, p := range readGPUProfiles(t, filepath.Join(out, j.kineto)) {
		for _, s := range p.Sample {
			fns := sampleFunctions(s)
			if s.Value[1] != 0 {
				untraced += s.Value[1]
				if len(fns) != 1 || !strings.Contains(fns[0], "stepped aside") || s.Value[2] != 0 {
					t.Errorf("%s: untraced time under %v with %d ns of GPU time", path, fns, s.Value[2])
				}
				continue
			}
			got[fns[0]] += s.Value[2]
		}
	}
	t.Logf("own-profiler job: gpu time %v, truth %v; untraced %.3f s, CUPTI held %.1f s in a %.3f s window",
		got, truth, float64(untraced)/1e9, profilerHold.Seconds(), float64(window)/1e9)
	for _, k := range []string{"before_kernel", "after_kernel"} {
		if truth[k] == 0 || got[k] != truth[k] {
			t.Errorf("%s: %d ns in the profiles, truth %d", k, got[k], truth[k])
		}
	}
	if got["profiled_kernel"] != 0 {
		t.Errorf("the user's own profiled kernels were traced too: %d ns", got["profiled_kernel"])
	}
	if untraced < int64(profilerHold) || untraced > window {
		t.Errorf("untraced %d ns, want from the hold (%d) to the window (%d)", untraced, profilerHold, window)
	}
	if v := jobMetric(metrics, schema.AgentGPUTraceSteppedAside.Name, j.kineto); v < profilerHold.Seconds() {
		t.Errorf("%s for job %s: %v, want >= %v", schema.AgentGPUTraceSteppedAside.Name, j.kineto, v, profilerHold.Seconds())
	}

	if got := readTrimmed(t, j.nsightRecord); got != nsightLib {
		t.Errorf("the TaskProlog changed the job's own CUDA_INJECTION64_PATH to %q", got)
	}
	if v := jobMetric(metrics, schema.AgentGPUTraceOtherInjection.Name, j.nsight); v < 1 {
		t.Errorf("%s for job %s: %v, want >= 1", schema.AgentGPUTraceOtherInjection.Name, j.nsight, v)
	}
	if len(readGPUProfiles(t, filepath.Join(out, j.nsight))) != 0 {
		t.Errorf("job %s with another injection library has gpu profiles", j.nsight)
	}
}

// jobMetric sums the samples of metric name in lines whose job label is
// job.
func jobMetric(lines []string, name, job string) float64 {
	var sum float64
	for _, l := range lines {
		if !strings.HasPrefix(l, name+"{") || !strings.Contains(l, schema.JobID.Label+`="`+job+`"`) {
			continue
		}
		if v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// readTrimmed reads a file that a job wrote, or fails.
func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// sharedTempDir is a temporary directory that the test users can read
// (t.TempDir's parents are root's alone).
func sharedTempDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// taskProlog is deploy/slurmscope-taskprolog.sh as installed, with the
// library where this test built it.
func taskProlog(t *testing.T, lib string) string {
	t.Helper()
	b, err := os.ReadFile("../deploy/slurmscope-taskprolog.sh")
	if err != nil {
		t.Fatal(err)
	}
	const installed = "lib=/usr/lib/slurmscope/libslurmscope_inject.so\n"
	if strings.Count(string(b), installed) != 1 {
		t.Fatalf("the TaskProlog no longer sets %q", installed)
	}
	return strings.Replace(string(b), installed, "lib="+lib+"\n", 1)
}
