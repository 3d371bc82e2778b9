package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/slurmscope/slurmscope/agent/gpu/gputest"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
	"github.com/slurmscope/slurmscope/schema"
)

// Attacks on attribution, each run by a real unprivileged user against the
// real agent and a real slurmd: a look-alike of Slurm's cgroup tree (a
// user's delegated subtree), SLUID directories whose jobs claim one id,
// and jobs that claim GPUs in their environment.

// parseMetrics reads an agent's /metrics.
func parseMetrics(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// series returns the label sets (and values) of name's series that have
// every label of match.
func series(fams map[string]*dto.MetricFamily, name string, match map[string]string) []map[string]string {
	var out []map[string]string
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		for k, v := range match {
			if l[k] != v {
				continue next
			}
		}
		v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		l["__value__"] = strconv.FormatFloat(v, 'g', -1, 64)
		out = append(out, l)
	}
	return out
}

// startAgentWith starts the metrics-only agent on the NVML stand-in with
// env added (SLURM_CONF for --slurmctld).
func startAgentWith(t *testing.T, agent, stub, scenario string, env []string, args ...string) string {
	t.Helper()
	args = append([]string{"run", "--cpu-profiling=false", "--offcpu-profiling=false", "--gpu-interval", "1s", "--node-name", gpuNode,
		"--metrics-addr", "127.0.0.1:0", "--nvml-library", stub, "--output-dir", t.TempDir()}, args...)
	p := launchAgent(t, append([]string{gputest.EnvScenario + "=" + scenario}, env...), agent, args...)
	p.waitLog(t, "did not serve /metrics", func(log string) bool { return metricsAddr.MatchString(log) })
	return p.servingAddr(t)
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// moveTo puts pid into the cgroup directory dir, as root.
func moveTo(t *testing.T, dir string, pid int) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid))
}

func killAtCleanup(t *testing.T, cmd *exec.Cmd) {
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// TestLookalikeCgroupIsNotAJob: ssalice owns a cgroup subtree, as a
// systemd user manager's (Delegate=yes) is, that pam_slurm_adopt does not
// capture. In it she builds the path of ssbob's running job,
// .../node-a_slurmstepd.scope/job_<id>/step_0/user/task_0, moves herself
// there and starts more processes than his job has, each holding GPU
// memory. None is in his job: the job's GPU memory is his task's alone,
// its owner stays his, and each look-alike process is counted.
func TestLookalikeCgroupIsNotAJob(t *testing.T) {
	lane(t, &slurmLane)
	testenv.RequireIntegration(t, slurmtest.Needs(slurmtest.V2))
	agent := buildAgent(t)
	stub := gputest.Library(t)
	ctx := context.Background()
	c := slurmtest.StartT(t, slurmtest.Options{Mode: slurmtest.V2, Nodes: []string{gpuNode}})
	bob, err := c.Sbatch(ctx, "ssbob", []string{"-J", "bobs-job"}, "exec sleep 600\n")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Cancel(context.Background(), bob) })
	if _, err := c.WaitState(ctx, bob, "RUNNING", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	bobPID := waitTaskPID(t, c, bob, "sleep")

	// The delegated subtree, as systemd makes it for user@<uid>.service:
	// the directory and its cgroup.procs, cgroup.threads and
	// cgroup.subtree_control belong to the user.
	alice, _ := c.User("ssalice")
	base := filepath.Join(c.CgroupV2Mount(), "slurmscope-e2e-users.slice")
	deleg := filepath.Join(base, fmt.Sprintf("user@%d.service", alice.UID))
	if err := os.MkdirAll(deleg, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
		if err := os.Chown(filepath.Join(deleg, p), alice.UID, alice.UID); err != nil {
			t.Fatal(err)
		}
	}
	lookalike := filepath.Join(deleg, "app.slice", gpuNode+"_slurmstepd.scope", "job_"+bob, "step_0", "user", "task_0")
	t.Cleanup(func() {
		for p := lookalike; strings.HasPrefix(p, base); p = filepath.Dir(p) {
			for range 50 {
				if err := os.Remove(p); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	// Everything below is alice's own doing, as alice.
	script := fmt.Sprintf(`while [ ! -e %[1]s/go ]; do sleep 0.1; done
mkdir -p %[2]s && echo $$ > %[2]s/cgroup.procs || exit 3
for i in 1 2 3 4; do sleep 600 & done
exec sleep 600`, c.JobDir(), lookalike)
	attacker, err := c.StartAs("ssalice", []string{"SLURM_JOB_ID=" + bob, "SLURM_JOB_NAME=hijack", "SLURM_JOB_USER=ssbob"}, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	killAtCleanup(t, attacker)
	t.Cleanup(func() { // the sleeps it started
		for _, pid := range readPIDs(filepath.Join(lookalike, "cgroup.procs")) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	moveTo(t, deleg, attacker.Process.Pid) // where systemd starts a user's manager
	writeFile(t, filepath.Join(c.JobDir(), "go"), "")
	var pids []int
	deadline := time.Now().Add(30 * time.Second)
	for len(pids) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the look-alike holds %v, want 5 of alice's processes", pids)
		}
		time.Sleep(100 * time.Millisecond)
		pids = readPIDs(filepath.Join(lookalike, "cgroup.procs"))
	}
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pids[0]))
	t.Logf("alice's processes %v are in %s", pids, strings.TrimSpace(string(cg)))

	// Each of alice's processes holds 7 GiB of GPU 0, bob's task 1 GiB.
	dev := gputest.Device{UUID: gpu0UUID, Name: gpuName, Minor: gputest.Int(0), Memory: &gputest.Memory{Total: 80 * gib, Used: 36 * gib},
		Utilization: &gputest.Utilization{GPU: 50, Memory: 10}}
	dev.Processes = append(dev.Processes, gputest.Process{PID: bobPID, UsedMemory: gib, SMUtil: gputest.Int(5), MemUtil: gputest.Int(1)})
	for _, pid := range pids {
		dev.Processes = append(dev.Processes, gputest.Process{PID: pid, UsedMemory: 7 * gib, SMUtil: gputest.Int(9), MemUtil: gputest.Int(1)})
	}
	scen := filepath.Join(t.TempDir(), "scenario.json")
	gputest.Write(t, scen, gputest.Scenario{Devices: []gputest.Device{dev}})
	addr := startAgentWith(t, agent, stub, scen, nil)

	job := map[string]string{schema.JobID.Label: bob}
	body := waitMetrics(t, addr, func(body string) bool {
		fams := parseMetrics(t, body)
		return len(series(fams, "slurmscope_job_gpu_memory_used_bytes", job)) > 0 &&
			len(series(fams, "slurmscope_agent_cgroup_refused_total", map[string]string{"reason": "outside_slurm_tree"})) > 0 &&
			series(fams, "slurmscope_agent_cgroup_refused_total", map[string]string{"reason": "outside_slurm_tree"})[0]["__value__"] != "0"
	})
	fams := parseMetrics(t, body)
	mem := series(fams, "slurmscope_job_gpu_memory_used_bytes", job)
	if len(mem) != 1 || mem[0]["__value__"] != strconv.FormatFloat(float64(gib), 'g', -1, 64) {
		t.Errorf("bob's job's GPU memory = %v, want his task's 1 GiB alone", mem)
	}
	for _, s := range series(fams, "slurmscope_job_info", nil) {
		if s[schema.JobID.Label] == bob && s[schema.JobUser.Label] != "ssbob" {
			t.Errorf("bob's job is labelled %v", s)
		}
		if s[schema.JobUser.Label] == "ssalice" || s[schema.JobName.Label] == "hijack" {
			t.Errorf("alice's look-alike is a job: %v", s)
		}
	}
	refused := series(fams, "slurmscope_agent_cgroup_refused_total", map[string]string{"reason": "outside_slurm_tree"})
	if n, _ := strconv.ParseFloat(refused[0]["__value__"], 64); n < float64(len(pids)) {
		t.Errorf("refused %v, want at least %d (alice's processes)", refused, len(pids))
	}

	// `slurmscope-agent jobs` places none of them in a job either.
	out, err := exec.Command(agent, "jobs", "--json", "--all", "--node-name", gpuNode).Output()
	if err != nil {
		t.Fatalf("jobs: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		pid := int(m["pid"].(float64))
		if slices.Contains(pids, pid) && m[schema.JobID.Name] != nil {
			t.Errorf("jobs places alice's pid %d in job %v", pid, m[schema.JobID.Name])
		}
		if pid == bobPID && (m[schema.JobID.Name] != bob || m[schema.JobUser.Name] != "ssbob") {
			t.Errorf("bob's task: %v", m)
		}
	}
}

func readPIDs(path string) []int {
	b, _ := os.ReadFile(path)
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// TestSLUIDJobsCannotCollide: Slurm 26.05 names job directories by SLUID
// (CgroupJobIdPaths=no); the job id comes from slurmstepd's title
// ("slurmstepd: [<id>.<step>]"), which only root writes, and never from
// the tasks' SLURM_JOB_ID. Three SLUID jobs, laid out as slurmstepd lays
// them (root's directories, a root "slurmstepd" in each step's slurm
// leaf, the user's task in user/task_0; this 22.05 slurmd makes job_<id>
// directories, so the test makes these): A's task claims another id, B's
// slurmstepd names the same job as A's, C's task claims A's id. /metrics
// answers every scrape, each job once, and no task's claim is believed.
func TestSLUIDJobsCannotCollide(t *testing.T) {
	lane(t, &slurmLane)
	testenv.RequireIntegration(t, slurmtest.Needs(slurmtest.V2))
	agent := buildAgent(t)
	stub := gputest.Library(t)
	c := slurmtest.StartT(t, slurmtest.Options{Mode: slurmtest.V2, Nodes: []string{gpuNode}})
	scope := filepath.Join(c.CgroupV2Mount(), "system.slice", gpuNode+"_slurmstepd.scope")
	type sluidJob struct {
		sluid, title, user string
		env                []string
		task               int
	}
	jobs := []*sluidJob{
		{sluid: "0W5FQ2XKD8Y3MA", title: "slurmstepd: [4242.0]", user: "ssalice", env: []string{"SLURM_JOB_ID=777", "SLURM_JOB_NAME=liar"}},
		{sluid: "0W5FQ2XKD8Y3MB", title: "slurmstepd: [4242.0]", user: "ssbob", env: []string{"SLURM_JOB_ID=4242", "SLURM_JOB_NAME=twin"}},
		{sluid: "0W5FQ2XKD8Y3MC", title: "slurmstepd: [5000.0]", user: "ssbob", env: []string{"SLURM_JOB_ID=4242", "SLURM_JOB_NAME=claims-4242"}},
	}
	for _, j := range jobs {
		step := filepath.Join(scope, "s"+j.sluid, "step_0")
		for _, d := range []string{"slurm", "user/task_0"} {
			if err := os.MkdirAll(filepath.Join(step, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		stepd := &exec.Cmd{Path: "/bin/sleep", Args: []string{j.title, "600"}}
		if err := stepd.Start(); err != nil {
			t.Fatal(err)
		}
		killAtCleanup(t, stepd)
		moveTo(t, filepath.Join(step, "slurm"), stepd.Process.Pid)
		task, err := c.StartAs(j.user, j.env, "/bin/sleep", "600")
		if err != nil {
			t.Fatal(err)
		}
		killAtCleanup(t, task)
		moveTo(t, filepath.Join(step, "user", "task_0"), task.Process.Pid)
		j.task = task.Process.Pid
	}

	// Both ways job info is served: by the GPU collector, and on a node
	// without GPUs from the attribution cache (which the CPU profiler's
	// rescans keep current).
	scen := filepath.Join(t.TempDir(), "scenario.json")
	gputest.Write(t, scen, gputest.Scenario{Devices: []gputest.Device{{UUID: gpu0UUID, Name: gpuName, Memory: &gputest.Memory{Total: 80 * gib}}}})
	withGPU := startAgentWith(t, agent, stub, scen, nil)
	noGPU := startAgent(t, agent, "run", "--gpu-metrics=false", "--output-dir", t.TempDir(), "--upload-interval", "2s",
		"--node-name", gpuNode, "--metrics-addr", "127.0.0.1:0").servingAddr(t)
	for name, addr := range map[string]string{"gpu collector": withGPU, "attribution cache": noGPU} {
		t.Run(name, func(t *testing.T) {
			body := waitMetrics(t, addr, func(body string) bool {
				return len(series(parseMetrics(t, body), "slurmscope_job_info", nil)) == 3
			})
			for range 5 { // every scrape answers
				if code, _ := httpGet(t, "http://"+addr+"/metrics", "", ""); code != http.StatusOK {
					t.Fatalf("GET /metrics answered %d", code)
				}
				time.Sleep(200 * time.Millisecond)
			}
			fams := parseMetrics(t, body)
			ids := map[string]map[string]string{}
			for _, s := range series(fams, "slurmscope_job_info", nil) {
				if ids[s[schema.JobID.Label]] != nil {
					t.Errorf("two jobs have id %s", s[schema.JobID.Label])
				}
				ids[s[schema.JobID.Label]] = s
			}
			if ids["777"] != nil {
				t.Errorf("a task's SLURM_JOB_ID became a job id: %v", ids["777"])
			}
			a, b := ids["4242"], ids["s"+jobs[1].sluid]
			if a == nil || a[schema.JobUser.Label] != "ssalice" || a[schema.JobName.Label] != "" {
				t.Errorf("job 4242 (A's slurmstepd came first) = %v, want ssalice's, unnamed (its task names job 777)", a)
			}
			if b == nil || b[schema.JobUser.Label] != "ssbob" {
				t.Errorf("B, whose slurmstepd names A's job, = %v, want it under its SLUID", b)
			}
			if c := ids["5000"]; c == nil || c[schema.JobName.Label] != "" {
				t.Errorf("job 5000 = %v, want it unnamed (its task names job 4242)", c)
			}
			if conf := series(fams, "slurmscope_agent_job_id_conflicts_total", nil); len(conf) != 1 || conf[0]["__value__"] == "0" {
				t.Errorf("job id conflicts = %v, want counted", conf)
			}
		})
	}
}

// TestGPUGrantsComeFromSlurm: on a mixed node (GPUs 0 and 1 whole, GPU 2
// in MIG mode) a job holding both whole GPUs is allocated both (on a MIG
// node the tasks' ordinals are ambiguous, so before Slurm's grant was read
// it had no series at all); another holds the 3g.40gb instance. What the
// jobs' tasks claim in their environment (another job's GPU, an instance
// nobody was given, a GPU for a job that holds none) is counted and never
// allocated. On cgroup v2 the grant is the device program slurmstepd
// attached to the job's cgroup; on v1, whose devices.list does not show
// it, slurmctld's record (--slurmctld) mapped through slurmd -G.
func TestGPUGrantsComeFromSlurm(t *testing.T) {
	lane(t, &slurmLane)
	for _, mode := range []slurmtest.Mode{slurmtest.V2, slurmtest.V1} {
		t.Run(mode.String(), func(t *testing.T) {
			testenv.RequireIntegration(t, slurmtest.Needs(mode))
			testGrants(t, mode)
		})
	}
}

func testGrants(t *testing.T, mode slurmtest.Mode) {
	agent := buildAgent(t)
	stub := gputest.Library(t)
	ctx := context.Background()
	mixed := newMixedNode(t, gpuNode)
	c := slurmtest.StartT(t, slurmtest.Options{Mode: mode, Nodes: []string{gpuNode}, GRES: mixed.gres})
	submit := func(user, name, gres, env string) string {
		args := []string{"-J", name}
		if gres != "" {
			args = append(args, "--gres="+gres)
		}
		id, err := c.Sbatch(ctx, user, args, env+"exec sleep 600\n")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Cancel(context.Background(), id) })
		if _, err := c.WaitState(ctx, id, "RUNNING", 60*time.Second); err != nil {
			t.Fatal(err)
		}
		waitTaskPID(t, c, id, "sleep") // the exports are in its environment
		return id
	}
	two := submit("ssalice", "two-gpus", "gpu:h100:2", fmt.Sprintf("export CUDA_VISIBLE_DEVICES=%s\nexport SLURM_JOB_GPUS=3\n", mig4gUUID))
	mig := submit("ssbob", "mig", "gpu:3g.40gb:1", fmt.Sprintf("export CUDA_VISIBLE_DEVICES=%s\n", gpu0UUID))
	none := submit("ssbob", "no-gres", "", fmt.Sprintf("export CUDA_VISIBLE_DEVICES=%s,%s\n", gpu1UUID, mig4gUUID))

	dev := func(i int, uuid string) gputest.Device {
		return gputest.Device{UUID: uuid, Name: gpuName, Minor: gputest.Int(i), Memory: &gputest.Memory{Total: 80 * gib},
			Utilization: &gputest.Utilization{}}
	}
	g2 := dev(2, gpu2UUID)
	g2.Utilization = nil
	g2.MIG = []gputest.MIG{
		{UUID: mig3gUUID, Profile: "3g.40gb", GPUInstanceID: mig3gGI, Memory: &gputest.Memory{Total: 40 * gib}},
		{UUID: mig4gUUID, Profile: "4g.40gb", GPUInstanceID: mig4gGI, Memory: &gputest.Memory{Total: 40 * gib}},
	}
	scen := filepath.Join(t.TempDir(), "scenario.json")
	gputest.Write(t, scen, gputest.Scenario{Devices: []gputest.Device{dev(0, gpu0UUID), dev(1, gpu1UUID), g2}})
	var env []string
	flags := mixed.agentFlags()
	if mode == slurmtest.V1 {
		env = []string{"SLURM_CONF=" + c.ConfPath()}
		flags = append(flags, "--slurmctld")
	}
	addr := startAgentWith(t, agent, stub, scen, env, flags...)

	alloc := func(fams map[string]*dto.MetricFamily, id string) []string {
		var out []string
		for _, s := range series(fams, "slurmscope_job_gpu_allocated", map[string]string{schema.JobID.Label: id}) {
			out = append(out, s[schema.GPUIndex.Label]+"/"+s[schema.GPUMIGProfile.Label])
		}
		slices.Sort(out)
		return out
	}
	want := map[string][]string{two: {"0/", "1/"}, mig: {"2/3g.40gb"}, none: nil}
	var fams map[string]*dto.MetricFamily
	waitMetrics(t, addr, func(body string) bool {
		fams = parseMetrics(t, body)
		for id, w := range want {
			if !slices.Equal(alloc(fams, id), w) {
				return false
			}
		}
		return true
	})
	for id, w := range want {
		t.Logf("job %s allocated %v (want %v)", id, alloc(fams, id), w)
	}
	outside := series(fams, "slurmscope_gpu_allocation_errors_total", map[string]string{"reason": "outside_grant"})
	if len(outside) != 1 || outside[0]["__value__"] == "0" {
		t.Errorf("claims outside the grant: %v, want counted", outside)
	}
	for _, reason := range []string{"grant_unknown", "no_device_file"} {
		if s := series(fams, "slurmscope_gpu_allocation_errors_total", map[string]string{"reason": reason}); len(s) != 1 || s[0]["__value__"] != "0" {
			t.Errorf("%s: %v, want 0 (Slurm's grant of every job was read)", reason, s)
		}
	}
}
