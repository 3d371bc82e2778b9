package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/internal/printable"
)

// ranksCmd is `slurmscope job <id> --ranks`: the job's ranks, from
// profiles alone, with its stragglers first.
func ranksCmd(eng *query.Engine, jobID string, r query.Range, o *jobOptions, stdout, stderr io.Writer) int {
	if eng.Profiles == nil {
		printErr(stderr, fmt.Sprintf("--ranks reads profiles: give --pyroscope-url (or %s, or pyroscope.url in %s)",
			envName("pyroscope-url"), o.src.path()))
		return exitUsage
	}
	rep, err := eng.Ranks(context.Background(), jobID, r)
	if err != nil {
		printErr(stderr, o.errorText(err))
		return exitFail
	}
	if len(rep.Ranks) == 0 {
		return printNoRanks(stdout, stderr, rep, o)
	}
	if o.asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return exitFail
		}
		return exitOK
	}
	printRanks(stdout, rep)
	return exitOK
}

// printNoRanks replaces the table of a job none of whose profiles names
// its rank, saying whether the job has profiles at all.
func printNoRanks(stdout, stderr io.Writer, rep *query.RankReport, o *jobOptions) int {
	why := "the backends hold no profile of it"
	hints := noDataHints(rep.JobID, o.since)
	if rep.Unranked > 0 {
		why = fmt.Sprintf("its profiles (%s of CPU time) name no rank", seconds(rep.Unranked))
		hints = []string{"the agent labels a process with its rank from its launcher's environment (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, " +
			"PMIX_RANK, else SLURM_PROCID): a job run without srun or an MPI launcher has none",
			"without --ranks, slurmscope job reports the job whole"}
	}
	nd := noDataReport{Error: fmt.Sprintf("no ranks for job %s from %s to %s: %s", rep.JobID, rep.From, rep.To, why),
		NoData: true, JobID: rep.JobID, From: rep.From, To: rep.To, Since: o.since.String(), Hints: hints, Warnings: []string{}}
	if o.asJSON {
		if err := writeJSON(stdout, nd); err != nil {
			return exitFail
		}
		return exitNoData
	}
	fmt.Fprintf(stderr, "slurmscope job: %s (--since %s)\n", nd.Error, nd.Since)
	for _, h := range nd.Hints {
		fmt.Fprintf(stderr, "  - %s\n", h)
	}
	return exitNoData
}

// printRanks writes the per-rank table for a terminal, the stragglers
// first; function names come from jobs, so each is escaped.
func printRanks(w io.Writer, r *query.RankReport) {
	p := func(s string) string { return printable.String(s, `""`) }
	fmt.Fprintf(w, "job %s, %s to %s: %d ranks, %s of CPU time, the median rank %s\n", p(r.JobID), r.From, r.To,
		len(r.Ranks), seconds(r.CPUTotal), seconds(int64(r.MedianCPU)))
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "note: %s\n", printable.String(warn, ""))
	}
	if len(r.Findings) == 0 {
		fmt.Fprintln(w, "\nstragglers: none")
	} else {
		fmt.Fprintf(w, "\nstragglers (%d):\n", len(r.Findings))
		for _, f := range r.Findings {
			fmt.Fprintf(w, "  %-8s %s: %s\n", strings.ToUpper(string(f.Severity)), f.Kind, printable.String(f.Summary, `""`))
			fmt.Fprintf(w, "           %s\n", printable.String(f.Advice, ""))
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "  RANK\tCPU TIME\tVS MEDIAN\tTOP FUNCTION\tSHARE\t"
	if r.OffCPUProfile != "" {
		head += "BLOCKED\t"
	}
	fmt.Fprintln(tw, head)
	for _, s := range r.Ranks {
		top, share := "-", "-"
		if s.TopFunction != "" {
			top, share = p(s.TopFunction), fmt.Sprintf("%.0f%%", 100*s.TopShare)
		}
		line := fmt.Sprintf("  %s\t%s\t%+.0f%%\t%s\t%s\t", p(s.Rank), seconds(s.CPU), 100*s.Deviation, top, share)
		if r.OffCPUProfile != "" {
			line += seconds(s.Blocked) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if r.Unranked > 0 {
		fmt.Fprintf(w, "\nand %s of CPU time in processes that name no rank (a batch script, a launcher's own process)\n", seconds(r.Unranked))
	}
}
