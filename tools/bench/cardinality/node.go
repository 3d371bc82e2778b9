package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/agent/gpu/gputest"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/slurm"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// clock is the simulated time every component reads.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// task is one simulated process of a job.
type task struct {
	pid   int
	start uint64 // clock ticks since boot, field 22 of stat
	comm  string
	step  string  // batch, extern, 0
	local int     // its task_<n>
	rank  int     // SLURM_PROCID
	busy  float64 // CPUs it keeps busy
	gpu   int     // the GPU it runs on, -1 for none
	prog  *program
}

// job is one simulated SLURM job.
type job struct {
	id, name, user, account string
	uid                     int
	gpus                    []int
	end                     time.Time
	tasks                   []*task
	// nodeIndex is this node's in the job (SLURM_NODEID); ranks, the
	// ranks it runs here, 0 for a job of one worker per GPU in one task.
	nodeIndex, ranks int
}

// node is the simulated host: its /proc tree, its GPUs and its jobs.
type node struct {
	name     string
	procRoot string
	// cgroups mirrors the jobs' cgroup directories, as slurmd makes them,
	// owned by whoever runs the bench.
	cgroups  *cgroup.Tree
	scenario string
	gpus     int
	boot     time.Time
	rng      *rand.Rand
	nextPID  int
	nextJob  int
	jobs     []*job
	queue    []*job // waiting for GPUs
	progs    []*program
	frames   []string // symbol table of the synthetic stacks
	modules  []string
	users    map[int]string
	lastTick time.Time
}

var jobNames = []string{"train-llama", "finetune-bert", "train-resnet", "eval", "preprocess", "train-vit", "rl-sweep", "inference-bench"}

func newNode(dir string, gpus int, seed uint64, start time.Time) (*node, error) {
	n := &node{name: "node-0001", procRoot: filepath.Join(dir, "proc"), scenario: filepath.Join(dir, "scenario.json"),
		cgroups: &cgroup.Tree{Root: filepath.Join(dir, "cgroup"), Owner: os.Getuid()},
		gpus:    gpus, boot: start.Add(-24 * time.Hour), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), // #nosec G404 -- a seeded generator, so that a benchmark run is reproducible
		nextPID: 10000, nextJob: 700000, users: map[int]string{}, lastTick: start}
	if err := os.MkdirAll(n.procRoot, 0o755); err != nil {
		return nil, err
	}
	for i := 0; i < 40; i++ {
		n.users[2000+i] = fmt.Sprintf("user%02d", i)
	}
	n.symbols()
	return n, n.writeScenario()
}

// program is the stacks one kind of job samples: a tree of calls, so
// that stacks share their callers as real ones do, weighted by a Zipf
// law (a few hot paths, a long tail).
type program struct {
	stacks  [][]uint64 // frame ids, innermost first
	kernel  [][]uint64 // kernel part of the same samples, often none
	weights []float64  // cumulative
}

// symbols makes the frame table (names as long as C++ and Python ones
// are) and one program per job name.
func (n *node) symbols() {
	parts := []string{"torch::autograd::Engine", "at::native", "c10::cuda", "std::__1::function", "Model.forward",
		"DataLoader.__next__", "numpy.core._multiarray", "cudaLaunchKernel", "nccl::ProxyProgress", "_PyEval_EvalFrame"}
	for i := 0; i < 6000; i++ {
		n.frames = append(n.frames, fmt.Sprintf("%s::%s_%d(%s)", parts[i%len(parts)], []string{"run", "apply", "step", "launch", "copy"}[i%5], i,
			strings.Repeat("T", 1+i%7)))
	}
	n.modules = []string{"/usr/lib/libtorch_cpu.so", "/usr/lib/libtorch_cuda.so", "/usr/bin/python3.11", "/usr/lib/libcuda.so.1",
		"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/libnccl.so.2"}
	for p := range jobNames {
		prog := &program{}
		total := 0.0
		for s := 0; s < 400; s++ {
			// Walk down a tree: the first frames are few, the deep ones many.
			depth := 12 + n.rng.IntN(30)
			st := make([]uint64, depth)
			for d := 0; d < depth; d++ {
				width := min(6000, 2+d*d*4)
				st[depth-1-d] = uint64((p*131 + n.rng.IntN(width)*7 + d*977) % 6000) // #nosec G115 -- a sum of non-negative terms mod 6000
			}
			prog.stacks = append(prog.stacks, st)
			var k []uint64
			if s%5 == 0 {
				k = []uint64{uint64(5000 + s%200), uint64(5400 + s%50), 5999} // #nosec G115 -- s is a loop index, never negative
			}
			prog.kernel = append(prog.kernel, k)
			total += 1 / math.Pow(float64(s+1), 1.1)
			prog.weights = append(prog.weights, total)
		}
		for i := range prog.weights {
			prog.weights[i] /= total
		}
		n.progs = append(n.progs, prog)
	}
}

// step advances the node to t: jobs that ended leave, arrivals (a
// Poisson stream) start when their GPUs are free.
func (n *node) step(t time.Time, c config) error {
	dt := t.Sub(n.lastTick)
	n.lastTick = t
	var live []*job
	for _, j := range n.jobs {
		if t.Before(j.end) {
			live = append(live, j)
			continue
		}
		for _, tk := range j.tasks {
			if err := os.RemoveAll(filepath.Join(n.procRoot, fmt.Sprint(tk.pid))); err != nil {
				return err
			}
		}
	}
	n.jobs = live
	if n.rng.Float64() < c.jobsPerHour*dt.Hours() {
		n.queue = append(n.queue, n.newJob(t, c))
	}
	// Queued jobs start in order where their GPUs are free; a big one
	// does not hold back smaller ones behind it (backfill).
	var waiting []*job
	for _, j := range n.queue {
		free := n.freeGPUs()
		if len(free) < len(j.gpus) {
			waiting = append(waiting, j)
			continue
		}
		j.gpus = free[:len(j.gpus)]
		d := time.Duration(n.rng.ExpFloat64() * float64(c.meanDuration))
		j.end = t.Add(max(d, 2*time.Minute))
		if err := n.startJob(j, t); err != nil {
			return err
		}
		n.jobs = append(n.jobs, j)
	}
	n.queue = waiting
	return n.writeScenario()
}

func (n *node) newJob(t time.Time, c config) *job {
	uid := 2000 + n.rng.IntN(len(n.users))
	j := &job{id: fmt.Sprint(n.nextJob), name: jobNames[n.rng.IntN(len(jobNames))], uid: uid, user: n.users[uid],
		account: []string{"physics", "bio", "ml", "chem", "astro"}[n.rng.IntN(5)]}
	n.nextJob++
	k := []int{1, 1, 1, 2, 2, 4, 8}[n.rng.IntN(7)]
	if c.ranksPerNode > 0 {
		k, j.ranks, j.nodeIndex = c.ranksPerNode, min(c.ranksPerNode, c.gpus), n.rng.IntN(max(c.jobNodes, 1))
	}
	j.gpus = make([]int, min(k, c.gpus))
	return j
}

func (n *node) freeGPUs() []int {
	used := map[int]bool{}
	for _, j := range n.jobs {
		for _, g := range j.gpus {
			used[g] = true
		}
	}
	var free []int
	for g := 0; g < n.gpus; g++ {
		if !used[g] {
			free = append(free, g)
		}
	}
	return free
}

func (n *node) progOf(j *job) *program {
	for i, name := range jobNames {
		if name == j.name {
			return n.progs[i]
		}
	}
	return n.progs[0]
}

// startJob writes the job's processes into the /proc tree: the batch
// script, the extern step's sleep, and one Python worker per GPU in step
// 0, as slurmstepd lays them out (cgroup v2). A job of ranks runs each
// worker as a task of its own, its global rank after the ranks of the
// nodes before this one, and its batch script only on its first node.
func (n *node) startJob(j *job, t time.Time) error {
	ticks := uint64(t.Sub(n.boot) / (10 * time.Millisecond)) // #nosec G115 -- t is after boot, which newNode sets a day before the start
	add := func(comm, step string, busy float64, g, local int) *task {
		tk := &task{pid: n.nextPID, start: ticks, comm: comm, step: step, busy: busy, gpu: g, prog: n.progOf(j),
			local: local, rank: j.nodeIndex*j.ranks + local}
		n.nextPID++
		j.tasks = append(j.tasks, tk)
		return tk
	}
	if j.nodeIndex == 0 {
		add("bash", "batch", 0.02, -1, 0)
	}
	add("sleep", "extern", 0, -1, 0)
	for i, g := range j.gpus {
		local := 0
		if j.ranks > 0 {
			local = i
		}
		add("python3", "0", 1.5, g, local)
	}
	idx := make([]string, len(j.gpus))
	vis := make([]string, len(j.gpus))
	for i, g := range j.gpus {
		idx[i], vis[i] = fmt.Sprint(g), fmt.Sprint(i)
	}
	for _, tk := range j.tasks {
		d := filepath.Join(n.procRoot, fmt.Sprint(tk.pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		cg := fmt.Sprintf("system.slice/slurmstepd.scope/job_%s/step_%s/user/task_%d", j.id, tk.step, tk.local)
		if err := os.MkdirAll(filepath.Join(n.cgroups.Root, "unified", cg), 0o755); err != nil {
			return err
		}
		env := fmt.Sprintf("PATH=/usr/bin\x00SLURM_JOB_ID=%s\x00SLURM_JOB_NAME=%s\x00SLURM_JOB_ACCOUNT=%s\x00SLURM_JOB_PARTITION=gpu\x00%s=%s\x00%s=%s\x00",
			j.id, j.name, j.account, gpu.EnvJobGPUs, strings.Join(idx, ","), gpu.EnvVisibleGPUs, strings.Join(vis, ","))
		if j.ranks > 0 {
			env += fmt.Sprintf("%s=%d\x00%s=%d\x00SLURM_LOCALID=%d\x00", slurm.EnvProcID, tk.rank, slurm.EnvNodeID, j.nodeIndex, tk.local)
		}
		for name, body := range map[string]string{
			"stat":    fmt.Sprintf("%d (%s) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", tk.pid, tk.comm, tk.start),
			"cgroup":  "0::/" + cg + "\n",
			"status":  fmt.Sprintf("Name:\t%s\nUid:\t%d\t%d\t%d\t%d\n", tk.comm, j.uid, j.uid, j.uid, j.uid),
			"environ": env,
		} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// Grant is Slurm's grant of the simulated jobs: their GPUs' device files.
func (n *node) Grant(_ context.Context, j *attribution.Job, _ []gpu.DevNum) (map[gpu.DevNum]bool, string, bool, error) {
	for _, sj := range n.jobs {
		if sj.id == j.ID {
			out := map[gpu.DevNum]bool{}
			for _, g := range sj.gpus {
				out[gputest.GPUDev(g)] = true
			}
			return out, "simulation", true, nil
		}
	}
	return nil, "", false, nil
}

// writeScenario tells the NVML stand-in what the GPUs do now: busy ones
// run their job's workers, the rest idle.
func (n *node) writeScenario() error {
	var sc gputest.Scenario
	busy := map[int][]*task{}
	for _, j := range n.jobs {
		for _, tk := range j.tasks {
			if tk.gpu >= 0 {
				busy[tk.gpu] = append(busy[tk.gpu], tk)
			}
		}
	}
	for g := 0; g < n.gpus; g++ {
		util, mem := 0, uint64(0)
		var procs []gputest.Process
		for _, tk := range busy[g] {
			util, mem = 70+n.rng.IntN(30), uint64(30+n.rng.IntN(40))<<30 // #nosec G115 -- 30..69
			procs = append(procs, gputest.Process{PID: tk.pid, UsedMemory: mem, SMUtil: gputest.Int(util), MemUtil: gputest.Int(util / 2)})
		}
		sc.Devices = append(sc.Devices, gputest.Device{
			UUID: fmt.Sprintf("GPU-%08x-1111-4000-8000-%012x", g, g), Name: "NVIDIA H100 80GB HBM3",
			Utilization: &gputest.Utilization{GPU: util, Memory: util / 2}, Memory: &gputest.Memory{Total: 80 << 30, Used: mem},
			PowerMW: gputest.Int(70000 + util*4000), TemperatureC: gputest.Int(35 + util/4), SMClockMHz: gputest.Int(1980),
			GPM:       &gputest.GPM{SMActive: float64(util) * 0.8, SMOccupancy: float64(util) * 0.4, TensorActive: float64(util) * 0.3},
			Processes: procs,
		})
	}
	b, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	// A new file renamed over the old: the stand-in reloads it whole.
	tmp := n.scenario + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, n.scenario)
}

// sampler is the CPU sampler's stand-in: every drain, each task's busy
// CPUs yield 97 samples a second over its program's stacks, counted per
// stack as the eBPF maps count them.
type sampler struct {
	n    *node
	clk  *clock
	rate int
	last time.Time
}

func (s *sampler) Drain() ([]cpu.Sample, cpu.Stats, error) {
	now := s.clk.Now()
	dt := now.Sub(s.last).Seconds()
	s.last = now
	var out []cpu.Sample
	for _, j := range s.n.jobs {
		for _, tk := range j.tasks {
			count := map[int]uint64{}
			for k := int(tk.busy * float64(s.rate) * dt); k > 0; k-- {
				u := s.n.rng.Float64()
				lo, hi := 0, len(tk.prog.weights)-1
				for lo < hi {
					if m := (lo + hi) / 2; tk.prog.weights[m] < u {
						lo = m + 1
					} else {
						hi = m
					}
				}
				count[lo]++
			}
			for st, c := range count {
				out = append(out, cpu.Sample{Proc: procfs.ID{PID: tk.pid, Start: tk.start}, Comm: tk.comm,
					User: tk.prog.stacks[st], Kernel: tk.prog.kernel[st], Count: c})
			}
		}
	}
	return out, cpu.Stats{}, nil
}

// symbolizer names the synthetic frames.
type symbolizer struct{ n *node }

func (s symbolizer) frames(addrs []uint64, module func(uint64) string) []symbolize.Frame {
	out := make([]symbolize.Frame, len(addrs))
	for i, a := range addrs {
		out[i] = symbolize.Frame{Function: s.n.frames[a%uint64(len(s.n.frames))], Module: module(a), Address: 0x400000 + a*16}
	}
	return out
}

func (s symbolizer) User(_ procfs.ID, addrs []uint64) []symbolize.Frame {
	return s.frames(addrs, func(a uint64) string { return s.n.modules[a%uint64(len(s.n.modules))] })
}

func (s symbolizer) Kernel(addrs []uint64) []symbolize.Frame {
	return s.frames(addrs, func(uint64) string { return symbolize.KernelModule })
}

func (symbolizer) Prepare(procfs.ID) {}
func (symbolizer) Forget(procfs.ID)  {}
