package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/internal/printable"
)

func init() {
	register("job", "summarise one job: findings, nodes, host and GPU use, idle GPUs, top CPU functions and GPU kernels", jobCmd)
}

func jobCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("slurmscope job", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pyroURL := fs.String("pyroscope-url", "", "Pyroscope base URL")
	promURL := fs.String("prometheus-url", "", "Prometheus (or Mimir/Thanos) base URL")
	tenant := fs.String("tenant", "", "X-Scope-OrgID sent to both")
	since := fs.Duration("since", 24*time.Hour, "look back this far from --to")
	toFlag := fs.String("to", "", "end of the range, RFC 3339 (default: now)")
	timeout := fs.Duration("timeout", 30*time.Second, "per backend call")
	maxQuery := fs.Duration("max-query-length", query.DefaultMaxQueryLength, "Pyroscope's max_query_length: longer ranges are asked for in chunks of it")
	parallel := fs.Int("parallel", query.DefaultParallel, "backend calls in flight at once")
	maxCalls := fs.Int("max-calls", query.DefaultMaxCalls, "most Pyroscope calls one query may make")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	var th findings.Thresholds
	th.Flags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: slurmscope job <job id> [--pyroscope-url URL] [--prometheus-url URL] [--since 24h] [--json]

Prints the job's findings first (idle GPUs, unused cores, memory requested
far above its peak or close to its limit, OOM kills, GPU memory mostly
unused, GPUs waiting for saturated CPUs; the thresholds are the flags
below), then its nodes and what its cgroup on each said (CPU time, cores
used and allocated, memory peak and limit, OOM kills), per-GPU utilisation
and memory (mean and max over the range), GPUs allocated to it that stayed
idle, its top CPU functions and, where GPU kernel profiles exist, its top
GPU kernels. It asks the same engine the Grafana datasource uses; a
--since longer than Pyroscope's max_query_length is asked for a chunk at
a time.

Exit status: 0 the report; 1 a backend failed; 2 bad usage; 3 no data:
the backends hold no profile, series or node of the job in the range
(a mistyped job id, a range that misses the job, or no agent on its
nodes). Then the report is replaced by a note saying so on stderr, or,
with --json, by an object with "no_data": true on stdout.

`)
		fs.PrintDefaults()
	}
	// Flags may come before or after the job id.
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) == 1 && isArrayTaskID(pos[0]) {
		id := printable.String(pos[0], "")
		fmt.Fprintf(stderr, "slurmscope job: %s is an array job's task: its profiles and metrics are under the task's own job id; "+
			"give that (JobIDRaw in 'sacct -j %s -o JobID,JobIDRaw')\n", id, id)
		return 2
	}
	if len(pos) != 1 || !isJobID(pos[0]) {
		fmt.Fprintln(stderr, "slurmscope job: want exactly one job id (digits)")
		fs.Usage()
		return 2
	}
	if *pyroURL == "" && *promURL == "" {
		fmt.Fprintln(stderr, "slurmscope job: give --pyroscope-url, --prometheus-url or both")
		return 2
	}
	to := time.Now()
	if *toFlag != "" {
		t, err := time.Parse(time.RFC3339, *toFlag)
		if err != nil {
			fmt.Fprintf(stderr, "slurmscope job: --to: %v\n", err)
			return 2
		}
		to = t
	}
	if *since <= 0 {
		fmt.Fprintln(stderr, "slurmscope job: --since must be positive")
		return 2
	}
	if *maxQuery < time.Second || *parallel < 1 || *maxCalls < 1 {
		fmt.Fprintln(stderr, "slurmscope job: --max-query-length must be at least 1s, --parallel and --max-calls at least 1")
		return 2
	}
	if err := th.Validate(); err != nil {
		fmt.Fprintf(stderr, "slurmscope job: thresholds: %v\n", err)
		return 2
	}
	eng := &query.Engine{MaxQueryLength: *maxQuery, Parallel: *parallel, MaxCalls: *maxCalls, Thresholds: th}
	if *pyroURL != "" {
		p, err := backends.NewPyroscope(backends.Config{URL: *pyroURL, TenantID: *tenant, Timeout: *timeout})
		if err != nil {
			fmt.Fprintf(stderr, "slurmscope job: %v\n", err)
			return 2
		}
		eng.Profiles = p
	}
	if *promURL != "" {
		p, err := backends.NewPrometheus(backends.Config{URL: *promURL, TenantID: *tenant, Timeout: *timeout})
		if err != nil {
			fmt.Fprintf(stderr, "slurmscope job: %v\n", err)
			return 2
		}
		eng.Metrics = p
	}
	rep, err := eng.Job(context.Background(), pos[0], query.Range{From: to.Add(-*since), To: to, Step: time.Minute})
	if err != nil {
		// A backend's message may quote what a job named itself.
		fmt.Fprintf(stderr, "slurmscope job: %s\n", printable.String(err.Error(), ""))
		return 1
	}
	if noData(rep) {
		nd := noDataReport{Error: fmt.Sprintf("no data for job %s from %s to %s", rep.JobID, rep.From, rep.To),
			NoData: true, JobID: rep.JobID, From: rep.From, To: rep.To, Since: since.String(),
			Hints: noDataHints(rep.JobID, *since), Warnings: rep.Warnings}
		if nd.Warnings == nil {
			nd.Warnings = []string{}
		}
		if *asJSON {
			if err := writeJSON(stdout, nd); err != nil {
				return 1
			}
			return exitNoData
		}
		fmt.Fprintf(stderr, "slurmscope job: %s (--since %s): the backends hold no profile, series or node of it\n", nd.Error, nd.Since)
		for _, warn := range rep.Warnings {
			fmt.Fprintf(stderr, "note: %s\n", printable.String(warn, ""))
		}
		for _, h := range nd.Hints {
			fmt.Fprintf(stderr, "  - %s\n", h)
		}
		return exitNoData
	}
	if *asJSON {
		if err := writeJSON(stdout, jsonReport(rep)); err != nil {
			return 1
		}
		return 0
	}
	printJob(stdout, rep)
	return 0
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// noData says whether the backends returned nothing at all for the job:
// no node, no profile, no series. An empty findings list is no sign: a
// job that was judged and found fine has none either.
func noData(r *query.JobReport) bool {
	return len(r.Nodes) == 0 && len(r.Host) == 0 && len(r.GPUs) == 0 && len(r.IdleGPUs) == 0 &&
		r.CPUTotal == 0 && len(r.TopCPU) == 0 && r.GPUProfile == "" && len(r.TopKernels) == 0
}

// noDataReport is what `slurmscope job --json` prints in place of the
// report when there is no data for the job.
type noDataReport struct {
	Error    string   `json:"error"`
	NoData   bool     `json:"no_data"`
	JobID    string   `json:"job_id"`
	From     string   `json:"from"`
	To       string   `json:"to"`
	Since    string   `json:"since"`
	Hints    []string `json:"hints"`
	Warnings []string `json:"warnings"`
}

func noDataHints(jobID string, since time.Duration) []string {
	return []string{
		fmt.Sprintf("check the job id %s ('sacct -j %s' or 'squeue -j %s')", jobID, jobID, jobID),
		fmt.Sprintf("the range is the %s before --to: a job that ran earlier needs a longer --since, or --to set near its end", since),
		"the slurmscope agent must have run on the job's nodes while it ran, sending to these Pyroscope and Prometheus servers (and --tenant)",
		"each task of an array job has its own job id: give that, not the array's (for task 5 of array 1234, JobIDRaw in 'sacct -j 1234_5 -o JobID,JobIDRaw')",
	}
}

// jsonReport returns r with every list that has no omitempty set to []
// where it is nil, so that the JSON never holds null for a list.
func jsonReport(r *query.JobReport) *query.JobReport {
	c := *r
	if c.Findings == nil {
		c.Findings = []findings.Finding{}
	}
	if c.Nodes == nil {
		c.Nodes = []string{}
	}
	if c.Host == nil {
		c.Host = []query.HostStats{}
	}
	if c.GPUs == nil {
		c.GPUs = []query.GPUStats{}
	}
	if c.IdleGPUs == nil {
		c.IdleGPUs = []query.GPUStats{}
	}
	if c.TopCPU == nil {
		c.TopCPU = []query.FuncStats{}
	}
	return &c
}

// isArrayTaskID says whether s names an array job's task as SLURM
// writes it: 1234_5, or 1234_[1-3] for several.
func isArrayTaskID(s string) bool {
	base, task, ok := strings.Cut(s, "_")
	return ok && isJobID(base) && task != ""
}

func isJobID(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// printJob writes the report for a terminal. Every name in it came from
// a job or a backend (node, GPU and function names, label values, the
// backends' warnings), so each goes through printable.String: a job
// cannot send the reader's terminal an escape sequence or forge a line.
func printJob(w io.Writer, r *query.JobReport) {
	p := func(s string) string { return printable.String(s, `""`) }
	fmt.Fprintf(w, "job %s, %s to %s\n", p(r.JobID), r.From, r.To)
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "note: %s\n", printable.String(warn, ""))
	}
	printFindings(w, r)
	if len(r.Nodes) == 0 {
		fmt.Fprintln(w, "\nnodes: none seen in the range")
	} else {
		nodes := make([]string, len(r.Nodes))
		for i, n := range r.Nodes {
			nodes[i] = p(n)
		}
		fmt.Fprintf(w, "\nnodes (%d): %s\n", len(r.Nodes), strings.Join(nodes, ", "))
	}
	if len(r.Host) > 0 {
		fmt.Fprintln(w, "\nhost (the job's cgroup on each node):")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  HOST\tSEEN\tCPU TIME\tCORES USED\tALLOCATED\tMEM PEAK\tMEM LIMIT\tOOM KILLS\t")
		for _, h := range r.Host {
			used, alloc, peak, limit := "-", "-", "-", "-"
			if h.UsedCores != nil {
				used = fmt.Sprintf("%.2f", *h.UsedCores)
			}
			if h.AllocatedCores > 0 {
				alloc = fmt.Sprintf("%.0f", h.AllocatedCores)
			}
			if h.MemPeakBytes > 0 {
				peak = bytesIEC(h.MemPeakBytes)
			}
			if h.MemLimitBytes > 0 {
				limit = bytesIEC(h.MemLimitBytes)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%.2fs\t%s\t%s\t%s\t%s\t%.0f\t\n", p(h.Host),
				time.Duration(h.Seconds*float64(time.Second)).Round(time.Second), h.CPUSeconds, used, alloc, peak, limit, h.OOMKills)
		}
		tw.Flush()
	}
	if len(r.GPUs) > 0 {
		fmt.Fprintln(w, "\nGPUs:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  HOST\tGPU\tUUID\tUTIL MEAN\tUTIL MAX\tMEM MEAN\tMEM MAX\t")
		for _, g := range r.GPUs {
			idx := g.Index
			if g.MIGInstance != "" {
				idx += "/mig" + g.MIGInstance
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%.1f%%\t%.1f%%\t%s\t%s\t\n", p(g.Host), p(idx), p(g.UUID),
				100*g.UtilMean, 100*g.UtilMax, bytesIEC(g.MemMeanBytes), bytesIEC(g.MemMaxBytes))
		}
		tw.Flush()
	}
	if len(r.IdleGPUs) > 0 {
		fmt.Fprintf(w, "\nidle allocated GPUs (%d):\n", len(r.IdleGPUs))
		for _, g := range r.IdleGPUs {
			fmt.Fprintf(w, "  %s GPU %s (%s)\n", p(g.Host), p(g.Index), p(g.UUID))
		}
	}
	printFuncs(w, fmt.Sprintf("top CPU functions (of %s CPU time)", seconds(r.CPUTotal)), r.TopCPU)
	if r.GPUProfile != "" {
		printFuncs(w, "top GPU kernels", r.TopKernels)
	}
}

// printFindings is the report's first section, like jobstats' notes.
func printFindings(w io.Writer, r *query.JobReport) {
	if r.Findings == nil {
		return // no Prometheus: the note above says so
	}
	if len(r.Findings) == 0 {
		fmt.Fprintln(w, "\nfindings: none")
		return
	}
	fmt.Fprintf(w, "\nfindings (%d):\n", len(r.Findings))
	for _, f := range r.Findings {
		fmt.Fprintf(w, "  %-8s %s: %s\n", strings.ToUpper(string(f.Severity)), f.Kind, printable.String(f.Summary, `""`))
		fmt.Fprintf(w, "           %s\n", printable.String(f.Advice, ""))
	}
}

func printFuncs(w io.Writer, title string, fs []query.FuncStats) {
	if len(fs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SELF\tTOTAL\tFUNCTION\t")
	for _, f := range fs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", seconds(f.Self), seconds(f.Total), printable.String(f.Name, `""`))
	}
	tw.Flush()
}

func seconds(ns int64) string { return fmt.Sprintf("%.2fs", float64(ns)/1e9) }

func bytesIEC(b float64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%.0f B", b)
	}
	div, exp := float64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", b/div, "KMGTPE"[exp])
}
