package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/internal/printable"
	"github.com/slurmscope/slurmscope/schema"
)

func init() {
	register("diff", "compare two jobs, or two CEL selections: the functions whose share of the time grew or shrank most", diffCmd)
}

// diffOptions are diff's own flags, beside those it shares with job.
type diffOptions struct {
	left, right string // CEL
	top         int
	profileType string
}

// defaultTop is how many functions each list of diff prints.
const defaultTop = 10

func diffCmd(args []string, stdout, stderr io.Writer) int {
	fs, o := newQueryFlags("slurmscope diff", stderr)
	d := diffOptions{}
	fs.StringVar(&d.left, "left", "", "the left side (the baseline) as a CEL filter, instead of a job id: slurm.job.id == \"4242\" && slurm.task.rank != \"17\"")
	fs.StringVar(&d.right, "right", "", "the right side, compared with the left, as a CEL filter: slurm.job.id == \"4242\" && slurm.task.rank == \"17\"")
	fs.IntVar(&d.top, "top", defaultTop, "functions to list that grew, and that shrank")
	fs.StringVar(&d.profileType, "profile-type", query.CPUProfileType, "the profile type compared (`id`): CPU time, or "+schema.OffCPU.ID()+" for blocked time, ...")
	fs.Usage = func() { diffUsage(fs) }
	pos, code := parseArgs(fs, args)
	if code >= 0 {
		return code
	}
	left, right, msg := d.sides(pos)
	if msg != "" {
		printCmdErr(stderr, "diff", msg)
		if d.left == "" && d.right == "" {
			fs.Usage()
		}
		return exitUsage
	}
	if d.top < 1 {
		printCmdErr(stderr, "diff", "--top must be at least 1")
		return exitUsage
	}
	if err := resolve(fs, o); err != nil {
		printCmdErr(stderr, "diff", err.Error())
		return exitUsage
	}
	eng, r, err := o.engine()
	if err == nil && eng.Profiles == nil {
		err = fmt.Errorf("diff reads profiles: give --pyroscope-url (or %s, or pyroscope.url in %s)", envName("pyroscope-url"), o.src.path())
	}
	if err != nil {
		printCmdErr(stderr, "diff", err.Error())
		return exitUsage
	}
	res, err := eng.Diff(context.Background(), query.Scope{}, d.profileType, query.Side{Filter: left.filter, Range: r},
		query.Side{Filter: right.filter, Range: r}, 0)
	if err != nil {
		printCmdErr(stderr, "diff", o.errorText(err))
		return exitFail
	}
	rep := diffReport(left, right, d, r, res)
	if rep.LeftTotal == 0 || rep.RightTotal == 0 {
		return printNoDiff(stdout, stderr, rep, o)
	}
	if o.asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return exitFail
		}
		return exitOK
	}
	printDiff(stdout, rep)
	return exitOK
}

func diffUsage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `usage: slurmscope diff <job id> <job id> [--pyroscope-url URL] [--since 7d] [--json]
       slurmscope diff --left 'CEL' --right 'CEL' [...]

Compares the profiles of two selections over the range: two jobs (the
first the baseline, the second compared with it), or any two CEL
selections, such as one rank of a job against its other ranks. It lists
the functions whose share of their side's time grew the most, then those
whose share shrank the most: shares, not times, so that jobs of different
lengths or sizes compare where their time goes. A function only one side
calls shows with all of its time on that side. It asks the same engine as
the datasource's diff query; a --since longer than Pyroscope's
max_query_length is asked for a chunk at a time.

The flags and settings are slurmscope job's (see slurmscope job --help
for the environment and the config file); the finding thresholds do not
apply here.

Exit status: 0 the comparison; 1 a backend failed; 2 bad usage or an
invalid filter; 3 no data: one side, or both, has no profile in the
range (with --json, an object with "no_data": true on stdout).

`)
	fs.PrintDefaults()
}

// diffSide is one side as asked for and as compiled.
type diffSide struct {
	name   string // "job 4242", or the CEL filter
	filter *filter.Filter
}

// sides reads the two sides: two job ids, or --left and --right; msg
// says what is wrong with them.
func (d diffOptions) sides(pos []string) (left, right diffSide, msg string) {
	switch {
	case d.left == "" && d.right == "":
		if len(pos) != 2 || !isJobID(pos[0]) || !isJobID(pos[1]) {
			return left, right, "want two job ids (digits), or --left and --right"
		}
		left = diffSide{"job " + pos[0], filter.Equal(schema.JobID, pos[0])}
		right = diffSide{"job " + pos[1], filter.Equal(schema.JobID, pos[1])}
		return left, right, ""
	case d.left == "" || d.right == "" || len(pos) > 0:
		return left, right, "want --left and --right both, and no job id beside them"
	}
	for _, s := range []struct {
		flag, src string
		into      *diffSide
	}{{"--left", d.left, &left}, {"--right", d.right, &right}} {
		f, err := filter.Compile(s.src)
		if err != nil {
			var lines []string
			for _, l := range strings.Split(err.Error(), "\n") {
				lines = append(lines, s.flag+": "+l)
			}
			return left, right, strings.Join(lines, "\n")
		}
		*s.into = diffSide{s.src, f}
	}
	return left, right, ""
}

// diffResult is what `slurmscope diff` prints.
type diffResult struct {
	Left        string             `json:"left"`
	Right       string             `json:"right"`
	From        string             `json:"from"`
	To          string             `json:"to"`
	ProfileType string             `json:"profile_type"`
	LeftTotal   int64              `json:"left_total"`
	RightTotal  int64              `json:"right_total"`
	Grew        []query.FuncChange `json:"grew"`
	Shrank      []query.FuncChange `json:"shrank"`
}

func diffReport(left, right diffSide, d diffOptions, r query.Range, res flame.Diff) *diffResult {
	grew, shrank := query.Changes(res, d.top)
	rep := &diffResult{Left: left.name, Right: right.name, ProfileType: d.profileType,
		From: r.From.UTC().Format("2006-01-02T15:04:05Z"), To: r.To.UTC().Format("2006-01-02T15:04:05Z"),
		LeftTotal: res.Left[0], RightTotal: res.Right[0], Grew: grew, Shrank: shrank}
	// [], not null: compared, nothing changed.
	if rep.Grew == nil {
		rep.Grew = []query.FuncChange{}
	}
	if rep.Shrank == nil {
		rep.Shrank = []query.FuncChange{}
	}
	return rep
}

// printNoDiff replaces the comparison where a side has nothing.
func printNoDiff(stdout, stderr io.Writer, rep *diffResult, o *jobOptions) int {
	var empty []string
	for _, s := range []struct {
		name  string
		total int64
	}{{"the left, " + rep.Left, rep.LeftTotal}, {"the right, " + rep.Right, rep.RightTotal}} {
		if s.total == 0 {
			empty = append(empty, s.name)
		}
	}
	nd := struct {
		Error  string   `json:"error"`
		NoData bool     `json:"no_data"`
		Empty  []string `json:"empty"`
		From   string   `json:"from"`
		To     string   `json:"to"`
		Since  string   `json:"since"`
	}{fmt.Sprintf("no profiles of %s from %s to %s", strings.Join(empty, " and "), rep.From, rep.To), true, empty, rep.From, rep.To, o.since.String()}
	if o.asJSON {
		if err := writeJSON(stdout, nd); err != nil {
			return exitFail
		}
		return exitNoData
	}
	printCmdErr(stderr, "diff", nd.Error+" (--since "+nd.Since+"): nothing to compare")
	return exitNoData
}

// printDiff writes the comparison for a terminal; function names and the
// selections come from users and jobs, so each is escaped.
func printDiff(w io.Writer, r *diffResult) {
	p := func(s string) string { return printable.String(s, `""`) }
	unit := func(v int64) string { return strconv.FormatInt(v, 10) }
	what := p(r.ProfileType)
	if pt, ok := schema.ProfileTypeOf(r.ProfileType); ok {
		what = pt.Title
		if pt.Main().Unit == "nanoseconds" {
			unit = seconds
		}
	}
	fmt.Fprintf(w, "%s (left) against %s (right), %s to %s\n", p(r.Left), p(r.Right), r.From, r.To)
	fmt.Fprintf(w, "%s: left %s, right %s\n", what, unit(r.LeftTotal), unit(r.RightTotal))
	list := func(title string, fs []query.FuncChange) {
		if len(fs) == 0 {
			fmt.Fprintf(w, "\n%s: none\n", title)
			return
		}
		fmt.Fprintf(w, "\n%s (share of each side's time):\n", title)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  LEFT\tRIGHT\tPOINTS\tLEFT SELF\tRIGHT SELF\tFUNCTION\t")
		for _, f := range fs {
			fmt.Fprintf(tw, "  %.1f%%\t%.1f%%\t%+.1f\t%s\t%s\t%s\t\n", 100*f.LeftShare, 100*f.RightShare, 100*f.Change,
				unit(f.LeftSelf), unit(f.RightSelf), p(f.Name))
		}
		tw.Flush()
	}
	list("grew", r.Grew)
	list("shrank", r.Shrank)
}
