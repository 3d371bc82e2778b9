// Command cardinality measures what one GPU node running slurmscope sends
// to its backends: profile series and bytes pushed to Pyroscope, metric
// series, samples and bytes remote-written to Prometheus, per hour, and
// the series that appear each hour (churn). It drives the agent's real
// collectors over simulated time: the GPU collector through go-nvml's real
// dlopen of the NVML stand-in (agent/gpu/nvmlstub) with a scenario of 8
// GPUs, attribution over a procfs tree of simulated SLURM jobs, and the
// daemon's real profile building; only the CPU sampler and symbolizer are
// replaced by a synthetic stream of stacks (eBPF cannot run an hour in a
// second). Profiles go to the Pyroscope stand-in, which splits series as
// the server does. It ends with the figures for --nodes nodes.
//
//	go run ./tools/bench/cardinality --hours 6 --jobs-per-hour 3 --mean-duration 1h
//
// With --ranks-per-node, every job is one node's part of a job of
// --job-nodes nodes: that many ranks, each a Slurm task of its own
// (task_<n>, SLURM_PROCID, SLURM_NODEID), one per GPU. Run it with
// --rank-labels and --rank-labels=false to see what the agent's rank
// labels cost.
//
//	go run ./tools/bench/cardinality --hours 2 --ranks-per-node 8 --job-nodes 64 --rank-labels=false
//
// Run it from the repository root: it builds the NVML stand-in with
// agent/gpu/nvmlstub/build.sh (a C compiler is needed).
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	var c config
	flag.IntVar(&c.hours, "hours", 6, "simulated hours measured (after one hour of warm-up)")
	flag.Float64Var(&c.jobsPerHour, "jobs-per-hour", 3, "mean job arrivals per hour on the node (1, 2, 4 or 8 GPUs each)")
	flag.DurationVar(&c.meanDuration, "mean-duration", time.Hour, "mean job length (exponential, at least 2 minutes)")
	flag.IntVar(&c.gpus, "gpus", 8, "GPUs on the node")
	flag.IntVar(&c.nodes, "nodes", 1000, "nodes to extrapolate to")
	flag.Uint64Var(&c.seed, "seed", 1, "random seed of the job stream")
	flag.IntVar(&c.ranksPerNode, "ranks-per-node", 0, "every job runs this many ranks on the node, one Slurm task per GPU (0: jobs of 1, 2, 4 or 8 GPUs, one worker per GPU, all in task 0)")
	flag.IntVar(&c.jobNodes, "job-nodes", 64, "with --ranks-per-node: the nodes each job spans; the node's index in it is drawn per job")
	flag.BoolVar(&c.rankLabels, "rank-labels", true, "label samples with each process's rank, local task id and node index, as the agent's --rank-labels")
	flag.Parse()
	if err := run(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cardinality:", err)
		os.Exit(1)
	}
}
