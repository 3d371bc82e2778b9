package e2e

import (
	"bytes"
	"context"
	"debug/dwarf"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
	"github.com/slurmscope/slurmscope/schema"
)

// The split jobs burn CPU for workSeconds; the split between their two hot
// functions is fixed by the work each does per round (see the sources).
// The other jobs are shorter, so that on a small host the split jobs get
// most of the CPU, and hence samples, for the second half.
const (
	workSeconds  = 12
	otherSeconds = 6
	// Job E runs shortRuns processes of shortSeconds each, one after the
	// other: longer than the agent's rescan (1s), so each is attributed
	// while it runs, but most start and exit between two drains of the
	// sampler (5s), as the many short processes of real job scripts do.
	shortRuns    = 4
	shortSeconds = 1.5
	// wantHotShare is the first hot function's share of the two hot
	// functions' self time, and splitTolerance how far the profile may be
	// off. With ~800 samples per job the binomial error alone is about
	// 1.5 points.
	wantHotShare   = 0.75
	splitTolerance = 0.05
	// minOwnShare is how much of a job's CPU time must fall in the
	// workload's own code; the rest is the batch shell, slurmstepd and the
	// kernel on their behalf.
	minOwnShare = 0.90
	// minHotSamples keeps a starved run from passing on noise.
	minHotSamples = 150
	profiledNode  = "node-a"
	otherNode     = "node-b"
)

// TestCPUProfiles runs `slurmscope-agent run` (real eBPF sampling) on a
// real local SLURM while jobs with a known CPU profile run, and checks
// the pprof files it writes per job: the functions' split, that the
// samples are the job's own, that no job's samples leak into another's,
// the labels, and that --node-name leaves the other node's jobs alone.
func TestCPUProfiles(t *testing.T) {
	alone(t)
	for _, mode := range []slurmtest.Mode{slurmtest.V2, slurmtest.V1} {
		t.Run(mode.String(), func(t *testing.T) {
			testenv.RequireIntegration(t, slurmtest.Needs(mode))
			testCPUProfiles(t, mode, buildAgent(t))
		})
	}
}

// workload is one job of the test and what its profile must show.
type workload struct {
	key      string // how the test refers to it
	user     string
	name     string // SLURM job name
	node     string
	bin      string // path of the built binary
	hot      [2]string
	distinct string // a function no other workload has
	own      map[string]bool
	script   string
	secs     float64
	id       string
	job      slurmtest.Job // squeue's view while it ran
}

func testCPUProfiles(t *testing.T, mode slurmtest.Mode, agent string) {
	ctx := context.Background()
	c := slurmtest.StartT(t, slurmtest.Options{Mode: mode})
	bins := buildWorkloads(t, c.JobDir())

	a := &workload{key: "A", user: "ssalice", name: "cpusplit", node: profiledNode, bin: bins.cpusplit, secs: workSeconds,
		hot: [2]string{"hot_a", "hot_b"}, distinct: "hot_a"}
	b := &workload{key: "B", user: "ssbob", name: "gosplit", node: profiledNode, bin: bins.gosplit, secs: workSeconds,
		hot: [2]string{"main.hotA", "main.hotB"}, distinct: "main.hotA"}
	// C shares node, user and binary format with A, and has the name that
	// tests quoting; D runs on the node the agent must ignore; E's
	// processes are mostly gone by the time the agent symbolises their
	// samples.
	cw := &workload{key: "C", user: "ssalice", name: jobName, node: profiledNode, secs: otherSeconds, distinct: "spin_other_job",
		script: fmt.Sprintf("exec %s %d\n", bins.spinother, otherSeconds)}
	d := &workload{key: "D", user: "ssbob", name: "other-node", node: otherNode, secs: otherSeconds, distinct: "spin_other_job",
		script: fmt.Sprintf("exec %s %d\n", bins.spinother, otherSeconds)}
	e := &workload{key: "E", user: "ssbob", name: "short-processes", node: profiledNode, bin: bins.cpusplit, secs: shortRuns * shortSeconds,
		script: fmt.Sprintf("for i in $(seq %d); do %s %g; done\n", shortRuns, bins.cpusplit, shortSeconds)}
	a.script = fmt.Sprintf("exec %s %d\n", a.bin, workSeconds)
	b.script = fmt.Sprintf("exec %s %d\n", b.bin, workSeconds)
	var err error
	if a.own, err = ownFunctions(a.bin, "cpusplit.c"); err != nil {
		t.Fatal(err)
	}
	e.own = a.own
	if b.own, err = ownFunctions(b.bin, "main"); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*workload{a, b} {
		for _, h := range w.hot {
			if !w.own[h] {
				t.Fatalf("%s: the debug info of %s has no %s (own functions: %v)", w.key, w.bin, h, keys(w.own))
			}
		}
	}

	out := evidenceDir(t, "slurmscope-profiles-")
	ag := startAgent(t, agent, "run", "--output-dir", out, "--upload-interval", "5s",
		"--node-name", profiledNode, "--sample-rate", "97", "--metrics-addr", "127.0.0.1:0")

	all := []*workload{a, b, cw, d, e}
	for _, w := range all {
		w.id, err = c.Sbatch(ctx, w.user, []string{"-J", w.name, "-w", w.node}, w.script)
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range all {
		js, err := c.WaitState(ctx, w.id, "RUNNING", 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		w.job = js[0]
		if len(w.job.Nodes) != 1 || w.job.Nodes[0] != w.node {
			t.Fatalf("job %s (%s) runs on %v, want %s", w.id, w.key, w.job.Nodes, w.node)
		}
		t.Logf("job %s: %s as %s on %s", w.id, w.key, w.job.User, w.node)
	}
	for _, w := range all {
		waitJobDone(t, c, w.id, time.Duration(w.secs*float64(time.Second))+90*time.Second)
	}
	// What the agent counted (samples lost or dropped) explains a thin
	// profile; it is logged, not asserted.
	ag.logMetrics(t, "slurmscope_agent_cpu_samples")
	// No GPU here: job info comes from the attribution cache, jobs that
	// ended a moment ago included.
	info := strings.Join(ag.logMetrics(t, "slurmscope_job_info"), "\n")
	for _, w := range []*workload{a, b} {
		want := fmt.Sprintf(`%s=%q`, schema.JobID.Label, w.id)
		if !strings.Contains(info, want) || !strings.Contains(info, fmt.Sprintf(`%s=%q`, schema.JobUser.Label, w.job.User)) {
			t.Errorf("slurmscope_job_info lacks job %s of %s:\n%s", w.id, w.job.User, info)
		}
	}
	ag.stop(t)

	profs, offProfs := readProfiles(t, out)
	byID := map[string]*workload{}
	for _, w := range all {
		byID[w.id] = w
	}
	for dir := range profs {
		w, ok := byID[dir]
		switch {
		case !ok:
			t.Errorf("profiles under %s/ belong to none of the test's jobs (no --all-processes was given)", dir)
		case w.node != profiledNode:
			t.Errorf("job %s runs on %s, but the agent with --node-name %s wrote profiles for it", w.id, w.node, profiledNode)
		}
	}

	t.Run("labels", func(t *testing.T) {
		for _, w := range []*workload{a, b, cw, e} {
			files := profs[w.id]
			if len(files) == 0 {
				t.Errorf("job %s (%s): no profiles under %s", w.id, w.key, filepath.Join(out, w.id))
				continue
			}
			want := map[string]string{
				schema.JobID.Label:    w.id,
				schema.JobName.Label:  w.job.Name,
				schema.JobUser.Label:  w.job.User,
				schema.HostName.Label: profiledNode,
				schema.ServiceName:    w.job.Name,
			}
			// Its off-CPU profiles (the batch shell's waits, its
			// preemptions) are labelled alike.
			if len(offProfs[w.id]) == 0 {
				t.Errorf("job %s (%s): no off-CPU profiles", w.id, w.key)
			}
			for _, f := range append(files, offProfs[w.id]...) {
				got := commentLabels(f.p)
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%s: %s = %q, want %q (comments %q)", f.path, k, got[k], v, f.p.Comments)
					}
				}
			}
		}
	})

	for _, w := range []*workload{a, b} {
		t.Run("split-"+w.name, func(t *testing.T) {
			st := stackStats(profs[w.id], w.own, w.hot)
			hot := st.self[w.hot[0]] + st.self[w.hot[1]]
			t.Logf("job %s (%s): %d samples in %d files, %d in its own code, %s %d, %s %d, steps %v",
				w.id, w.name, st.total, len(profs[w.id]), st.own, w.hot[0], st.self[w.hot[0]], w.hot[1], st.self[w.hot[1]], st.steps)
			if hot < minHotSamples {
				t.Fatalf("only %d samples in %s and %s; too few to judge the split", hot, w.hot[0], w.hot[1])
			}
			share := float64(st.self[w.hot[0]]) / float64(hot)
			t.Logf("measured split %s/%s: %.1f%% / %.1f%% (want %.0f/%.0f ±%.0f points)",
				w.hot[0], w.hot[1], 100*share, 100*(1-share), 100*wantHotShare, 100*(1-wantHotShare), 100*splitTolerance)
			if share < wantHotShare-splitTolerance || share > wantHotShare+splitTolerance {
				t.Errorf("%s has %.1f%% of the hot functions' self time, want %.0f%% ±%.0f points", w.hot[0], 100*share, 100*wantHotShare, 100*splitTolerance)
			}
			if own := float64(st.own) / float64(st.total); own < minOwnShare {
				t.Errorf("%.1f%% of job %s's samples have a frame of %s's own code, want ≥ %.0f%%; top leaves: %v",
					100*own, w.id, filepath.Base(w.bin), 100*minOwnShare, topLeaves(st.self, 8))
				for _, f := range profs[w.id] {
					fs := stackStats([]profFile{f}, w.own, w.hot)
					t.Logf("%s: %d samples, %d own, top leaves %v", filepath.Base(f.path), fs.total, fs.own, topLeaves(fs.self, 4))
				}
			}
			// The workload is the batch script (exec), so its samples
			// belong to the batch step.
			if st.hotSteps["batch"] != hot {
				t.Errorf("hot samples by %s: %v, want all %d in batch", schema.JobStep.Label, st.hotSteps, hot)
			}
		})
	}

	// Every process of E ran for a fraction of an interval; its samples
	// must still be attributed to E and symbolised.
	t.Run("short-processes", func(t *testing.T) {
		st := stackStats(profs[e.id], e.own, a.hot)
		t.Logf("job %s (%s): %d samples in %d files, %d in its own code, top leaves %v",
			e.id, e.name, st.total, len(profs[e.id]), st.own, topLeaves(st.self, 6))
		if st.total < minHotSamples {
			// The agent counts what it dropped in
			// slurmscope_agent_cpu_samples_unattributed_total.
			t.Fatalf("only %d samples for %d × %gs of cpusplit: the samples of processes that exited before the drain were lost",
				st.total, shortRuns, shortSeconds)
		}
		// Each process here lives 1.5 s, so exec, the dynamic loader and
		// first-touch page faults weigh more than in A: a lower bar, which
		// still fails if short processes go unsymbolised.
		// Samples the kernel kept without any stack (counted by the agent
		// as stack errors or a full stack map) say nothing about symbolisation,
		// so they are left out of the share.
		const minShortOwnShare = 0.8
		withStack := st.total - st.self["[no stack]"]
		if own := float64(st.own) / float64(withStack); own < minShortOwnShare {
			t.Errorf("%.1f%% of job %s's samples with a stack have a frame of cpusplit's own code, want ≥ %.0f%%", 100*own, e.id, 100*minShortOwnShare)
		}
	})

	t.Run("no-leaks", func(t *testing.T) {
		for _, w := range []*workload{a, b, cw} {
			seen := functionsIn(profs[w.id])
			for _, other := range []*workload{a, b, cw} {
				if other.distinct != w.distinct && seen[other.distinct] {
					t.Errorf("job %s (%s) has %s, which only job %s (%s) runs", w.id, w.name, other.distinct, other.id, other.name)
				}
			}
			if !seen[w.distinct] {
				t.Errorf("job %s (%s) does not show its own %s", w.id, w.name, w.distinct)
			}
		}
	})

	t.Run("go-tool-pprof", func(t *testing.T) {
		if len(profs[a.id]) == 0 {
			t.Skip("no profile of job A")
		}
		// The fullest file: an interval in which A barely ran may not
		// show hot_a at all.
		f, most := "", int64(-1)
		for _, pf := range profs[a.id] {
			if n := stackStats([]profFile{pf}, nil, a.hot).total; n > most {
				f, most = pf.path, n
			}
		}
		cmd := exec.Command("go", "tool", "pprof", "-top", f)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		top, err := cmd.Output()
		if err != nil {
			t.Fatalf("go tool pprof -top %s: %v\n%s", f, err, stderr.String())
		}
		if !bytes.Contains(top, []byte("hot_a")) {
			t.Errorf("go tool pprof -top %s does not list hot_a:\n%s", f, top)
		}
	})

	t.Run("agent-top", func(t *testing.T) {
		for _, w := range []*workload{a, b} {
			res := runCmd(t, agent, "top", "--dir", out, "--job", w.id, "--json", "-n", "2")
			var j struct {
				Attributes map[string]any
				Functions  []struct{ Name string }
			}
			if err := json.Unmarshal(res, &j); err != nil {
				t.Fatalf("top --json: %v: %s", err, res)
			}
			if len(j.Functions) == 0 || j.Functions[0].Name != w.hot[0] {
				t.Errorf("top --job %s: first function %+v, want %s", w.id, j.Functions, w.hot[0])
			}
			if j.Attributes[schema.JobUser.Name] != w.job.User {
				t.Errorf("top --job %s: user %v, want %s", w.id, j.Attributes[schema.JobUser.Name], w.job.User)
			}
		}
	})
}

type workloadBins struct{ cpusplit, gosplit, spinother string }

// buildWorkloads compiles the workloads into dir, which the test users can
// read (t.TempDir's parent is not traversable for them).
func buildWorkloads(t *testing.T, dir string) workloadBins {
	t.Helper()
	b := workloadBins{
		cpusplit:  filepath.Join(dir, "cpusplit"),
		gosplit:   filepath.Join(dir, "gosplit"),
		spinother: filepath.Join(dir, "spinother"),
	}
	cflags := []string{"-O1", "-fno-omit-frame-pointer", "-fno-inline", "-g", "-Wall"}
	for _, cmd := range []*exec.Cmd{
		exec.Command("gcc", append(cflags, "-o", b.cpusplit, "../internal/testenv/workloads/cpusplit.c")...),
		exec.Command("gcc", append(cflags, "-o", b.spinother, "../internal/testenv/workloads/spinother/spinother.c")...),
		exec.Command("go", "build", "-o", b.gosplit, "../internal/testenv/workloads/gosplit"),
	} {
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
		}
	}
	return b
}

// ownFunctions lists the functions defined in the compile units of bin
// whose name is cu or ends in /cu: the workload's own code, as opposed to
// the C runtime's start files or the Go runtime.
func ownFunctions(bin, cu string) (map[string]bool, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	own := map[string]bool{}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if name != cu && !strings.HasSuffix(name, "/"+cu) {
			r.SkipChildren()
			continue
		}
		for {
			e, err := r.Next()
			if err != nil {
				return nil, err
			}
			if e == nil || e.Tag == 0 {
				break // end of this unit's children
			}
			if e.Tag == dwarf.TagSubprogram {
				// Only definitions: declarations have no code.
				if fn, ok := e.Val(dwarf.AttrName).(string); ok && e.Val(dwarf.AttrLowpc) != nil {
					own[fn] = true
				}
			}
			if e.Children {
				r.SkipChildren()
			}
		}
	}
	if len(own) == 0 {
		return nil, fmt.Errorf("%s: no functions in a compile unit named %s", bin, cu)
	}
	return own, nil
}

// waitJobDone waits until squeue no longer shows id as pending, running
// or completing (MinJobAge keeps finished jobs listed for a while), or no
// longer knows it: a job sbatch gave us the id of that slurmctld has
// forgotten ended more than MinJobAge ago (30 s: a loaded host waits that
// long on the job before it).
func waitJobDone(t *testing.T, c *slurmtest.Cluster, id string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		js, err := c.Jobs(context.Background(), id)
		if err != nil && strings.Contains(err.Error(), "Invalid job id specified") {
			return
		}
		if err == nil {
			done := true
			for _, j := range js {
				switch j.State {
				case "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED":
					done = false
				}
			}
			if done {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still not finished (%+v, %v); logs in %s", id, js, err, c.LogDir())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type profFile struct {
	path string
	p    *profile.Profile
}

var profName = regexp.MustCompile(`^(process_cpu|off_cpu)-[0-9]+(-[0-9]+)?\.pb\.gz$`)

// profTypes are the sample types of each profile type's files.
var profTypes = map[string]string{
	schema.ProcessCPU.Name: "samples/count,cpu/nanoseconds",
	schema.OffCPU.Name:     "switches/count,runnable/nanoseconds,blocked/nanoseconds",
}

// readProfiles parses every file under dir, by job directory, holding
// each to the file contract: name, sample types, valid pprof. The CPU
// profiles are returned, and the off-CPU ones apart.
func readProfiles(t *testing.T, dir string) (cpu, off map[string][]profFile) {
	t.Helper()
	out := map[string][]profFile{}
	off = map[string][]profFile{}
	jobs, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if !j.IsDir() {
			t.Errorf("%s: a file among the job directories", j.Name())
			continue
		}
		files, err := os.ReadDir(filepath.Join(dir, j.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			path := filepath.Join(dir, j.Name(), f.Name())
			m := profName.FindStringSubmatch(f.Name())
			if m == nil {
				t.Errorf("%s: name does not follow process_cpu-<unix seconds>.pb.gz or off_cpu-...", path)
				continue
			}
			r, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			p, err := profile.Parse(r)
			r.Close()
			if err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			var types []string
			for _, st := range p.SampleType {
				types = append(types, st.Type+"/"+st.Unit)
			}
			if strings.Join(types, ",") != profTypes[m[1]] {
				t.Errorf("%s: sample types %v, want %s", path, types, profTypes[m[1]])
				continue
			}
			if m[1] == schema.OffCPU.Name {
				off[j.Name()] = append(off[j.Name()], profFile{path, p})
				continue
			}
			out[j.Name()] = append(out[j.Name()], profFile{path, p})
		}
	}
	return out, off
}

func commentLabels(p *profile.Profile) map[string]string {
	m := map[string]string{}
	for _, c := range p.Comments {
		if k, v, ok := strings.Cut(c, "="); ok {
			m[k] = v
		}
	}
	return m
}

type stats struct {
	total, own int64            // samples (samples/count)
	self       map[string]int64 // leaf function -> samples
	steps      map[string]int64 // slurm_job_step -> samples
	hotSteps   map[string]int64 // the same, for samples in a hot function
}

// stackStats sums a job's files. A sample is the workload's own when any
// frame of its stack is one of own.
func stackStats(files []profFile, own map[string]bool, hot [2]string) stats {
	st := stats{self: map[string]int64{}, steps: map[string]int64{}, hotSteps: map[string]int64{}}
	for _, f := range files {
		for _, s := range f.p.Sample {
			n := s.Value[0]
			st.total += n
			step := strings.Join(s.Label[schema.JobStep.Label], ",")
			st.steps[step] += n
			leaf := "[no stack]"
			isOwn := false
			for i, loc := range s.Location {
				for k, l := range loc.Line {
					if l.Function == nil {
						continue
					}
					if i == 0 && k == 0 {
						leaf = l.Function.Name
					}
					isOwn = isOwn || own[l.Function.Name]
				}
			}
			st.self[leaf] += n
			if isOwn {
				st.own += n
			}
			if leaf == hot[0] || leaf == hot[1] {
				st.hotSteps[step] += n
			}
		}
	}
	return st
}

func functionsIn(files []profFile) map[string]bool {
	m := map[string]bool{}
	for _, f := range files {
		for _, fn := range f.p.Function {
			m[fn.Name] = true
		}
	}
	return m
}

func topLeaves(self map[string]int64, n int) []string {
	names := make([]string, 0, len(self))
	for k := range self {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return self[names[i]] > self[names[j]] })
	if len(names) > n {
		names = names[:n]
	}
	for i, k := range names {
		names[i] = fmt.Sprintf("%s=%d", k, self[k])
	}
	return names
}

// runCmd runs a short command and returns its stdout, failing t on error.
func runCmd(t *testing.T, prog string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, stderr.String())
	}
	return out
}
