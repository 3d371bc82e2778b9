package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
	"github.com/slurmscope/slurmscope/schema"
)

// pacedTrainer runs the stand-in trainer in short bursts (SIGSTOP/SIGCONT),
// so that a fixed number of launches spreads over several seconds: the
// trainer itself runs flat out (600k launches in a third of a second), and
// a process must live across the agent's rescans to be attributed.
const pacedTrainer = `"$TRAINER" --steps %d --seconds 120 >"$OUT" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
	sleep 0.02; kill -STOP "$pid" 2>/dev/null; sleep 0.4; kill -CONT "$pid" 2>/dev/null
done
wait "$pid"
`

// TestGPUKernelProfiles runs `slurmscope-agent run --gpu-inject-lib` on a
// real local SLURM while a job runs the stand-in trainer under the
// injection library (and the mock CUPTI), and checks the job's gpu
// profiles: kernels under their launching paths, per-kernel GPU time equal
// to the mock's truth, the job's labels, and nothing for another job.
func TestGPUKernelProfiles(t *testing.T) {
	lane(t, &slurmLane)
	testenv.RequireIntegration(t, slurmtest.Needs(slurmtest.V2))
	agent := buildAgent(t)
	ctx := context.Background()
	// The library and the stand-ins, built before the cluster starts: the
	// real TaskProlog, which gives jobs CUDA_INJECTION64_PATH, names them.
	bin := sharedTempDir(t, "slurmscope-gputrace-")
	for _, script := range []string{"../gpuinject/build.sh", "../internal/testenv/cudastandin/build.sh"} {
		if out, err := exec.Command("sh", script, bin).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	lib := filepath.Join(bin, "libslurmscope_inject.so")
	c := slurmtest.StartT(t, slurmtest.Options{Mode: slurmtest.V2, TaskProlog: taskProlog(t, lib)})
	truthFile := filepath.Join(c.JobDir(), "gpu-truth")
	os.Remove(truthFile)

	out := evidenceDir(t, "slurmscope-gpu-profiles-")
	ag := startAgent(t, agent, "run", "--output-dir", out, "--upload-interval", "5s", "--node-name", profiledNode,
		"--gpu-inject-lib", lib, "--gpu-metrics=false", "--metrics-addr", "127.0.0.1:0")

	const steps = 100000
	// Slurm exports the job's GPUs; without NVML here the agent can only
	// label by index, through this variable.
	// The library comes from the TaskProlog, as on a real cluster; each
	// job writes down what it got.
	env := fmt.Sprintf("export CUDA_VISIBLE_DEVICES=0 SLURMSCOPE_CUPTI_PATH=%s TRAINER=%s\n",
		filepath.Join(bin, "mock", "libcupti.so"), filepath.Join(bin, "trainer"))
	injected := func(job string) string {
		return fmt.Sprintf("echo \"${CUDA_INJECTION64_PATH:-}\" >%s\n", filepath.Join(c.JobDir(), job+".injection"))
	}
	gpuScript := env + injected("gpu") + fmt.Sprintf("export SLURMSCOPE_MOCK_TRUTH_FILE=%s OUT=%s\n", truthFile, filepath.Join(c.JobDir(), "gpu-trainer.out")) +
		fmt.Sprintf(pacedTrainer, steps)
	// The other job runs the same trainer, opted out of GPU tracing
	// through its environment: the TaskProlog gives it no library.
	otherScript := env + injected("other") + fmt.Sprintf("export OUT=%s\n", filepath.Join(c.JobDir(), "other-trainer.out")) +
		fmt.Sprintf(pacedTrainer, steps)
	gpuJob, err := c.Sbatch(ctx, "ssalice", []string{"-J", "gpu-train", "-w", profiledNode}, gpuScript)
	if err != nil {
		t.Fatal(err)
	}
	otherJob, err := c.Sbatch(ctx, "ssbob", []string{"-J", "no-inject", "-w", profiledNode, "--export=ALL,SLURMSCOPE_GPU_TRACE=off"}, otherScript)
	if err != nil {
		t.Fatal(err)
	}
	coexist := submitCoexistJobs(t, c, bin)
	js, err := c.WaitState(ctx, gpuJob, "RUNNING", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	job := js[0]
	waitJobDone(t, c, gpuJob, 3*time.Minute)
	waitJobDone(t, c, otherJob, 3*time.Minute)
	coexist.wait(t)
	// One more interval, so records the library flushed at exit are in.
	time.Sleep(6 * time.Second)
	metrics := ag.logMetrics(t, "slurmscope_agent_gpu")
	ag.stop(t)
	for job, want := range map[string]string{"gpu": lib, "other": ""} {
		if got := readTrimmed(t, filepath.Join(c.JobDir(), job+".injection")); got != want {
			t.Errorf("the TaskProlog gave the %s job CUDA_INJECTION64_PATH=%q, want %q", job, got, want)
		}
	}
	coexist.check(t, out, metrics)

	truth := readKernelTotals(t, truthFile)
	if len(truth) == 0 {
		b, _ := os.ReadFile(filepath.Join(c.JobDir(), "gpu-trainer.out"))
		t.Fatalf("the mock wrote no truth; trainer output:\n%s", b)
	}
	gpuProfs := readGPUProfiles(t, filepath.Join(out, gpuJob))
	if len(gpuProfs) == 0 {
		t.Fatalf("no gpu profiles under %s", filepath.Join(out, gpuJob))
	}
	if other := readGPUProfiles(t, filepath.Join(out, otherJob)); len(other) != 0 {
		t.Errorf("job %s ran without the injection library, yet has %d gpu profiles", otherJob, len(other))
	}

	paths := map[string][]string{
		"gemm_kernel":   {"launch_gemm", "forward", "train_step", "main"},
		"reduce_kernel": {"launch_reduce", "backward", "train_step", "main"},
	}
	got := map[string]int64{}
	var unsampled, total, onGPU0 int64
	for path, p := range gpuProfs {
		want := map[string]string{
			schema.JobID.Label:    gpuJob,
			schema.JobName.Label:  job.Name,
			schema.JobUser.Label:  job.User,
			schema.HostName.Label: profiledNode,
			schema.ServiceName:    job.Name,
		}
		labels := commentLabels(p)
		for k, v := range want {
			if labels[k] != v {
				t.Errorf("%s: %s = %q, want %q (comments %q)", path, k, labels[k], v, p.Comments)
			}
		}
		var types []string
		for _, st := range p.SampleType {
			types = append(types, st.Type+"/"+st.Unit)
		}
		if strings.Join(types, ",") != "kernel_launches/count,untraced/nanoseconds,gpu_time/nanoseconds" {
			t.Errorf("%s: sample types %v", path, types)
		}
		for _, s := range p.Sample {
			fns := sampleFunctions(s)
			if len(fns) < 2 {
				t.Errorf("%s: sample with stack %v", path, fns)
				continue
			}
			kernel := fns[0]
			if s.Value[1] != 0 {
				t.Errorf("%s: %v untraced %d ns: the job's own CUPTI client never subscribed", path, fns, s.Value[1])
			}
			gpuNs := s.Value[2]
			got[kernel] += gpuNs
			total += gpuNs
			switch idx := s.Label[schema.GPUIndex.Label]; {
			case len(idx) == 1 && idx[0] == "0":
				onGPU0 += gpuNs
			case len(idx) > 0:
				t.Errorf("%s: %s on %s %v; the job only sees GPU 0", path, kernel, schema.GPUIndex.Label, idx)
			}
			if fns[1] == "[unsampled launch]" {
				unsampled += gpuNs
				continue
			}
			for _, f := range paths[kernel] {
				if !slices.Contains(fns, f) {
					t.Errorf("%s: %s under %v, which lacks %s", path, kernel, fns, f)
				}
			}
			if kernel == "gemm_kernel" && slices.Contains(fns, "backward") || kernel == "reduce_kernel" && slices.Contains(fns, "forward") {
				t.Errorf("%s: %s under the wrong path %v", path, kernel, fns)
			}
		}
	}
	t.Logf("gpu time per kernel %v (unsampled %d of %d ns); truth %v", got, unsampled, total, truth)
	var truthTotal int64
	for name, ns := range truth {
		truthTotal += ns
		if strings.HasPrefix(name, "_Z") {
			continue // the profile names it demangled; counted in the total
		}
		if math.Abs(float64(got[name]-ns)) > 0.01*float64(ns) {
			t.Errorf("%s: %d ns in the profiles, truth %d ns", name, got[name], ns)
		}
	}
	if math.Abs(float64(total-truthTotal)) > 0.01*float64(truthTotal) {
		t.Errorf("all kernels: %d ns in the profiles, truth %d ns", total, truthTotal)
	}
	if total == unsampled {
		t.Errorf("no GPU time under a launching stack")
	}
	// Records that arrive after their process was forgotten keep their
	// time but may lose the device; nearly all must carry it.
	if float64(onGPU0) < 0.99*float64(total) {
		t.Errorf("only %d of %d ns carry %s=0", onGPU0, total, schema.GPUIndex.Label)
	}
}

// readKernelTotals reads the mock's "kernel=<name> ns=<n> launches=<n>"
// lines.
func readKernelTotals(t *testing.T, path string) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasPrefix(l, "kernel=") {
			continue
		}
		i := strings.LastIndex(l, " launches=")
		j := strings.LastIndex(l[:max(i, 0)], " ns=")
		if i < 0 || j < 0 {
			t.Fatalf("%s: bad line %q", path, l)
		}
		n, err := strconv.ParseInt(l[j+4:i], 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, l, err)
		}
		out[l[len("kernel="):j]] = n
	}
	return out
}

// readGPUProfiles parses dir/gpu-*.pb.gz; a missing dir reads as none.
func readGPUProfiles(t *testing.T, dir string) map[string]*profile.Profile {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "gpu-*.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*profile.Profile{}
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(r)
		r.Close()
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		out[f] = p
	}
	return out
}

// sampleFunctions lists a sample's functions, leaf first.
func sampleFunctions(s *profile.Sample) []string {
	var fns []string
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function != nil {
				fns = append(fns, l.Function.Name)
			}
		}
	}
	return fns
}
