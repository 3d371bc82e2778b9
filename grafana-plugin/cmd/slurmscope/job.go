package main

import (
	"cmp"
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
	register("job", "summarise one job: findings, nodes, host and GPU use, idle GPUs, top CPU functions, off-CPU waits and GPU kernels; or its ranks (--ranks)", jobCmd)
}

func jobCmd(args []string, stdout, stderr io.Writer) int {
	fs, o := newJobFlags(stderr)
	fs.Usage = func() { jobUsage(fs) }
	jobID, code := parseJobArgs(fs, args, stderr)
	if code >= 0 {
		return code
	}
	if err := resolve(fs, o); err != nil {
		printErr(stderr, err.Error())
		return exitUsage
	}
	eng, r, err := o.engine()
	if err != nil {
		printErr(stderr, err.Error())
		return exitUsage
	}
	if o.ranks {
		return ranksCmd(eng, jobID, r, o, stdout, stderr)
	}
	ctx := context.Background()
	rep, err := eng.Job(ctx, jobID, r)
	partial := err != nil
	if err != nil {
		msg := o.errorText(err)
		if rep, err = partialJob(ctx, eng, jobID, r, err, msg); err != nil || noData(rep) {
			// Without the failed backend, "no data" would be a guess.
			printErr(stderr, cmp.Or(o.errorText(err), msg))
			return exitFail
		}
		printErr(stderr, "partial report (exit status 4): "+rep.Warnings[0])
	}
	if noData(rep) {
		return printNoData(stdout, stderr, rep, o)
	}
	if o.asJSON {
		if err := writeJSON(stdout, jsonReport(rep)); err != nil {
			return exitFail
		}
	} else {
		printJob(stdout, rep)
	}
	if partial {
		return exitPartial
	}
	return exitOK
}

func jobUsage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `usage: slurmscope job <job id> [--pyroscope-url URL] [--prometheus-url URL] [--since 24h|7d|2026-11-28] [--ranks] [--json]

Prints the job's findings first (idle GPUs, unused cores, memory requested
far above its peak or close to its limit, OOM kills, GPU memory mostly
unused, GPUs waiting for saturated CPUs; the thresholds are the flags
below), then its nodes and what its cgroup on each said (CPU time, cores
used and allocated, memory peak and limit, OOM kills), per-GPU utilisation
and memory (mean and max over the range), GPUs allocated to it that stayed
idle, its top CPU functions, where its threads blocked (the call and its
caller in the program, where off-CPU profiles exist) and, where GPU kernel
profiles exist, its top GPU kernels. It asks the same engine the Grafana
datasource uses; a --since longer than Pyroscope's max_query_length is
asked for a chunk at a time.

With --ranks, it prints the job's ranks instead (from profiles, which
carry slurm.task.rank): each rank's CPU time, the function it spent the
most in and its share, its CPU time against the median rank's, and, where
off-CPU profiles exist, its blocked time; first the stragglers, ranks
that spent more than --straggler-above times the median rank's time in
one of the job's top functions, each named with that function. It reads
a flame graph per rank (within --max-calls), and needs only Pyroscope.

Every flag but --config, --json, --since and --to may also come from the
environment, SLURMSCOPE_<FLAG> (SLURMSCOPE_PYROSCOPE_URL), or from the
YAML file --config names ($SLURMSCOPE_CONFIG; by default `+defaultConfigPath+`
where it exists), as pyroscope.url, prometheus.bearer_token_file, tenant,
...; the file may also hold basic_auth_password and bearer_token inline.
A flag wins over the environment, which wins over the file; a backend's
credentials come whole from the first of them that gives any.

Exit status: 0 the report; 1 a backend failed; 2 bad usage; 3 no data:
the backends hold no profile, series or node of the job in the range
(a mistyped job id, a range that misses the job, or no agent on its
nodes; with --ranks, no profile of the job that names its rank). Then
the report is replaced by a note saying so on stderr, or, with --json, by
an object with "no_data": true on stdout. 4 partial: one backend failed,
and the report holds what the other gave, with a note (also on stderr)
saying which failed and why.

`)
	fs.PrintDefaults()
}

// parseJobArgs parses args, whose flags may come before or after the job
// id, and returns the job id, or the exit code (>= 0) to return now.
func parseJobArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (string, int) {
	pos, code := parseArgs(fs, args)
	if code >= 0 {
		return "", code
	}
	if len(pos) == 1 && isArrayTaskID(pos[0]) {
		id := printable.String(pos[0], "")
		fmt.Fprintf(stderr, "slurmscope job: %s is an array job's task: its profiles and metrics are under the task's own job id; "+
			"give that (JobIDRaw in 'sacct -j %s -o JobID,JobIDRaw')\n", id, id)
		return "", exitUsage
	}
	if len(pos) != 1 || !isJobID(pos[0]) {
		fmt.Fprintln(stderr, "slurmscope job: want exactly one job id (digits)")
		fs.Usage()
		return "", exitUsage
	}
	return pos[0], -1
}

// parseArgs parses args, whose flags may come before, between or after
// the positional arguments, and returns those, or the exit code (>= 0) to
// return now.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, int) {
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK
			}
			return nil, exitUsage
		}
		if fs.NArg() == 0 {
			return pos, -1
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

// engine checks o and builds the engine and the range it asks for.
func (o *jobOptions) engine() (*query.Engine, query.Range, error) {
	var r query.Range
	if o.pyro.url == "" && o.prom.url == "" {
		return nil, r, fmt.Errorf("give --pyroscope-url, --prometheus-url or both (or %s, %s, or pyroscope.url and prometheus.url in %s)",
			envName("pyroscope-url"), envName("prometheus-url"), o.src.path())
	}
	r, err := o.queryRange()
	if err != nil {
		return nil, r, err
	}
	if o.maxQuery < durationValue(time.Second) || o.parallel < 1 || o.maxCalls < 1 {
		return nil, r, errors.New("--max-query-length must be at least 1s, --parallel and --max-calls at least 1")
	}
	if err := o.th.Validate(); err != nil {
		return nil, r, fmt.Errorf("thresholds: %v", err)
	}
	eng := &query.Engine{MaxQueryLength: time.Duration(o.maxQuery), Parallel: o.parallel, MaxCalls: o.maxCalls, Thresholds: o.th}
	if o.pyro.url != "" {
		c, err := o.backendConfig(&o.pyro)
		if err == nil {
			eng.Profiles, err = backends.NewPyroscope(c)
		}
		if err != nil {
			return nil, r, err
		}
	}
	if o.prom.url != "" {
		c, err := o.backendConfig(&o.prom)
		if err == nil {
			eng.Metrics, err = backends.NewPrometheus(c)
		}
		if err != nil {
			return nil, r, err
		}
	}
	return eng, r, nil
}

// queryRange is [--since, --to], a minute a step.
func (o *jobOptions) queryRange() (query.Range, error) {
	to := time.Now()
	if o.to != "" {
		t, err := parseTime(o.to)
		if err != nil {
			return query.Range{}, fmt.Errorf("--to: %v", err)
		}
		to = t
	}
	from, err := o.since.start(to)
	return query.Range{From: from, To: to, Step: time.Minute}, err
}

// printErr writes msg on stderr, a line each, escaped: a backend's message
// may quote what a job named itself.
func printErr(stderr io.Writer, msg string) { printCmdErr(stderr, "job", msg) }

// printCmdErr is printErr for command cmd.
func printCmdErr(stderr io.Writer, cmd, msg string) {
	for _, line := range strings.Split(msg, "\n") {
		fmt.Fprintf(stderr, "slurmscope %s: %s\n", cmd, printable.String(line, ""))
	}
}

// printNoData replaces the report of a job the backends hold nothing of.
func printNoData(stdout, stderr io.Writer, rep *query.JobReport, o *jobOptions) int {
	since := o.since.String()
	nd := noDataReport{Error: fmt.Sprintf("no data for job %s from %s to %s", rep.JobID, rep.From, rep.To),
		NoData: true, JobID: rep.JobID, From: rep.From, To: rep.To, Since: since,
		Hints: noDataHints(rep.JobID, o.since), Warnings: rep.Warnings}
	if nd.Warnings == nil {
		nd.Warnings = []string{}
	}
	if o.asJSON {
		if err := writeJSON(stdout, nd); err != nil {
			return exitFail
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
		r.CPUTotal == 0 && len(r.TopCPU) == 0 && r.OffCPUBlocked == 0 && len(r.TopOffCPU) == 0 &&
		r.GPUProfile == "" && len(r.TopKernels) == 0
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

func noDataHints(jobID string, since sinceValue) []string {
	rng := fmt.Sprintf("the range is the %s before --to: a job that ran earlier needs a longer --since, or --to set near its end", since.back)
	if !since.from.IsZero() {
		rng = fmt.Sprintf("the range starts at --since %s: a job that ran earlier needs an earlier --since, or --to set near its end", since.String())
	}
	return []string{
		fmt.Sprintf("check the job id %s ('sacct -j %s' or 'squeue -j %s')", jobID, jobID, jobID),
		rng,
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
	printWaits(w, r)
	if r.GPUProfile != "" {
		printFuncs(w, "top GPU kernels", r.TopKernels)
	}
	if r.GPUUntraced > 0 {
		fmt.Fprintf(w, "\nGPU kernel tracing stood aside for %s (summed over processes) while the job's own CUPTI profiler held CUPTI: kernels run then are in no GPU profile\n", seconds(r.GPUUntraced))
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

// printWaits lists where the job's threads blocked, beside its CPU
// functions: the call that blocked and its caller in the program. A job
// without off-CPU profiles has no such section.
func printWaits(w io.Writer, r *query.JobReport) {
	if len(r.TopOffCPU) == 0 || r.OffCPUBlocked <= 0 {
		return
	}
	p := func(s string) string { return printable.String(s, `""`) }
	fmt.Fprintf(w, "\ntop off-CPU functions, blocked (of %s blocked time):\n", seconds(r.OffCPUBlocked))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  BLOCKED\tSHARE\tFUNCTION\tCALLER\t")
	for _, f := range r.TopOffCPU {
		caller := "-"
		if f.Caller != "" {
			caller = p(f.Caller)
		}
		fmt.Fprintf(tw, "  %s\t%.0f%%\t%s\t%s\t\n", seconds(f.Blocked), 100*float64(f.Blocked)/float64(r.OffCPUBlocked), p(f.Function), caller)
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
