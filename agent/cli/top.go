package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/google/pprof/profile"

	"github.com/slurmscope/slurmscope/schema"
)

func init() {
	extraCommands["top"] = topCmd
	summaries["top"] = "summarise the profiles an agent wrote to --output-dir: top functions per job"
}

// noJobDir is where `run --all-processes` puts processes that are in no job.
const noJobDir = "_nojob"

// topMaxFileBytes bounds what top reads of one file: a spool file is a few
// hundred kilobytes, and a stray multi-gigabyte file must not exhaust memory.
const topMaxFileBytes = 256 << 20

func topCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "output directory of 'slurmscope-agent run --output-dir' (one subdirectory per job)")
	job := fs.String("job", "", "only this job (its subdirectory name, e.g. 12 or "+noJobDir+")")
	n := fs.Int("n", 15, "functions to list per job")
	asJSON := fs.Bool("json", false, "print one JSON object per job")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: slurmscope-agent top --dir DIR [--job ID] [-n 15] [--json]")
		fmt.Fprintln(stderr, "\nMerges the CPU profiles the agent wrote per job and lists the functions with the most self CPU time.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "top: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "top: --dir is required")
		return 2
	}
	if *n < 0 {
		fmt.Fprintln(stderr, "top: -n must not be negative")
		return 2
	}
	if *job != "" && (strings.ContainsAny(*job, `/\`) || *job == "." || *job == "..") {
		fmt.Fprintf(stderr, "top: --job %s is not a job directory name\n", Printable(*job, `""`))
		return 2
	}
	jobs, err := loadJobs(*dir, *job, func(path string, err error) {
		fmt.Fprintf(stderr, "top: skipping %s: %s\n", Printable(path, `""`), Printable(err.Error(), ""))
	})
	if err != nil {
		fmt.Fprintf(stderr, "top: %s\n", Printable(err.Error(), ""))
		return 1
	}
	if len(jobs) == 0 {
		fmt.Fprintf(stderr, "top: no readable profiles under %s\n", Printable(*dir, `""`))
		return 1
	}
	if *asJSON {
		err = writeTopJSON(stdout, jobs, *n)
	} else {
		err = writeTopText(stdout, jobs, *n)
	}
	if err != nil {
		fmt.Fprintf(stderr, "top: %v\n", err)
		return 1
	}
	return 0
}

// jobTop is one job's profiles merged: the labels found in the files'
// comments and CPU time per function.
type jobTop struct {
	dir     string
	labels  map[string]map[string]bool // wire label -> values seen
	files   int
	cpu     int64 // nanoseconds
	samples int64
	self    map[string]int64 // function -> nanoseconds with it as the leaf
	cum     map[string]int64 // function -> nanoseconds with it anywhere on the stack
}

func (j *jobTop) values(label string) []string {
	var vs []string
	for v := range j.labels[label] {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	return vs
}

func (j *jobTop) value(label string) string { return strings.Join(j.values(label), ",") }

// loadJobs reads DIR/<job>/*.pb.gz (only DIR/only/ when only is set). A file
// that cannot be read or parsed, or has no CPU time in it, goes to skip and
// is left out: one bad file must not hide every other job.
func loadJobs(dir, only string, skip func(string, error)) ([]*jobTop, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var jobs []*jobTop
	found := false
	for _, e := range entries {
		if !e.IsDir() || (only != "" && e.Name() != only) {
			continue
		}
		found = true
		j := &jobTop{dir: e.Name(), labels: map[string]map[string]bool{}, self: map[string]int64{}, cum: map[string]int64{}}
		files, err := filepath.Glob(filepath.Join(dir, e.Name(), "*.pb.gz"))
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		for _, f := range files {
			if err := j.add(f); err != nil {
				skip(f, err)
				continue
			}
			j.files++
		}
		if j.files > 0 {
			jobs = append(jobs, j)
		}
	}
	if only != "" && !found {
		return nil, fmt.Errorf("no directory for job %s under %s", only, dir)
	}
	// Busiest job first; ties (and empty profiles) by job id, numerically
	// where both are numbers, so the order is stable.
	sort.Slice(jobs, func(a, b int) bool {
		if jobs[a].cpu != jobs[b].cpu {
			return jobs[a].cpu > jobs[b].cpu
		}
		return lessJobID(jobs[a].dir, jobs[b].dir)
	})
	return jobs, nil
}

func lessJobID(a, b string) bool {
	na, ea := strconv.ParseUint(a, 10, 64)
	nb, eb := strconv.ParseUint(b, 10, 64)
	if ea == nil && eb == nil {
		return na < nb
	}
	if (ea == nil) != (eb == nil) {
		return ea == nil // numbered jobs before _nojob and the like
	}
	return a < b
}

// add folds one file into the job. It reads the whole file before changing
// anything, so a file that fails half way leaves no trace.
func (j *jobTop) add(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, topMaxFileBytes+1))
	if err != nil {
		return err
	}
	if len(data) > topMaxFileBytes {
		return fmt.Errorf("larger than %d MiB", topMaxFileBytes>>20)
	}
	p, err := profile.ParseData(data)
	if err != nil {
		return err
	}
	cpuIdx, countIdx := -1, -1
	for i, st := range p.SampleType {
		switch {
		case st.Type == "cpu" && st.Unit == "nanoseconds":
			cpuIdx = i
		case st.Type == "samples" && st.Unit == "count":
			countIdx = i
		}
	}
	// A profile with only sample counts still says how much CPU they stand
	// for when its period is CPU time.
	perSample := int64(0)
	if cpuIdx < 0 {
		if countIdx < 0 || p.PeriodType == nil || p.PeriodType.Type != "cpu" || p.PeriodType.Unit != "nanoseconds" || p.Period <= 0 {
			return errors.New("no cpu/nanoseconds sample type: not a CPU profile")
		}
		perSample = p.Period
	}
	var cpu, count int64
	self := map[string]int64{}
	cum := map[string]int64{}
	seen := map[string]bool{}
	for _, s := range p.Sample {
		var ns, n int64
		if countIdx >= 0 {
			n = s.Value[countIdx]
		}
		if cpuIdx >= 0 {
			ns = s.Value[cpuIdx]
		} else {
			ns = n * perSample
		}
		if ns < 0 || n < 0 || ns > math.MaxInt64-cpu || n > math.MaxInt64-count {
			return errors.New("negative or overflowing sample values")
		}
		cpu += ns
		count += n
		if len(s.Location) == 0 {
			self["[no stack]"] += ns
			cum["[no stack]"] += ns
			continue
		}
		self[leafName(s.Location[0])] += ns
		clear(seen)
		for _, loc := range s.Location {
			for _, name := range frameNames(loc) {
				// Recursion must not count a sample twice.
				if !seen[name] {
					seen[name] = true
					cum[name] += ns
				}
			}
		}
	}
	if cpu > math.MaxInt64-j.cpu || count > math.MaxInt64-j.samples {
		return errors.New("sample values overflow the job's total")
	}
	j.cpu += cpu
	j.samples += count
	for k, v := range self {
		j.self[k] += v
	}
	for k, v := range cum {
		j.cum[k] += v
	}
	for _, c := range p.Comments {
		name, value, ok := strings.Cut(c, "=")
		if !ok || name == "" {
			continue // a comment that is not a label
		}
		if j.labels[name] == nil {
			j.labels[name] = map[string]bool{}
		}
		j.labels[name][value] = true
	}
	return nil
}

// leafName is the innermost function of a location: pprof lists inlined
// frames innermost first.
func leafName(loc *profile.Location) string {
	if names := frameNames(loc); len(names) > 0 {
		return names[0]
	}
	return "[unknown]"
}

func frameNames(loc *profile.Location) []string {
	var names []string
	for _, l := range loc.Line {
		if l.Function != nil && l.Function.Name != "" {
			names = append(names, l.Function.Name)
		}
	}
	if len(names) == 0 {
		// Unsymbolised: keep the module visible, as pprof does.
		m := "?"
		if loc.Mapping != nil && loc.Mapping.File != "" {
			m = filepath.Base(loc.Mapping.File)
		}
		names = append(names, fmt.Sprintf("%s+%#x", m, loc.Address))
	}
	return names
}

// fnRow is one line of a job's top list.
type fnRow struct {
	name      string
	self, cum int64
}

func (j *jobTop) top(n int) []fnRow {
	rows := make([]fnRow, 0, len(j.self))
	for name, v := range j.self {
		rows = append(rows, fnRow{name, v, j.cum[name]})
	}
	sort.Slice(rows, func(a, b int) bool {
		if rows[a].self != rows[b].self {
			return rows[a].self > rows[b].self
		}
		return rows[a].name < rows[b].name
	})
	if len(rows) > n {
		rows = rows[:n]
	}
	return rows
}

func pct(part, total int64) float64 {
	if total <= 0 {
		return 0
	}
	return 100 * float64(part) / float64(total)
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

func writeTopText(w io.Writer, jobs []*jobTop, n int) error {
	for i, j := range jobs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		title := "job " + Printable(j.dir, `""`)
		if j.dir == noJobDir {
			title = "processes in no job"
		}
		var attrs []string
		add := func(what, label string) {
			if v := j.values(label); len(v) > 0 {
				for k := range v {
					v[k] = Printable(v[k], `""`)
				}
				attrs = append(attrs, what+" "+strings.Join(v, ","))
			}
		}
		if j.dir == noJobDir {
			add("services", schema.ServiceName)
		} else {
			add("name", schema.JobName.Label)
			add("user", schema.JobUser.Label)
		}
		add("host", schema.HostName.Label)
		fmt.Fprintf(w, "%s  %s\n", title, strings.Join(attrs, "  "))
		fmt.Fprintf(w, "  %.2f s CPU, %d samples, %d file(s)", seconds(j.cpu), j.samples, j.files)
		if id := j.value(schema.JobID.Label); id != "" && id != j.dir {
			// The directory decides; a differing label means files were moved.
			fmt.Fprintf(w, " (labelled %s %s)", schema.JobID.Label, Printable(id, ""))
		}
		fmt.Fprintln(w)
		rows := j.top(n)
		if len(rows) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "SELF\tSELF%\tSUM%\tCUM\tCUM%\t  FUNCTION")
		var sum int64
		for _, r := range rows {
			sum += r.self
			fmt.Fprintf(tw, "%.2fs\t%.1f%%\t%.1f%%\t%.2fs\t%.1f%%\t%s\n",
				seconds(r.self), pct(r.self, j.cpu), pct(sum, j.cpu), seconds(r.cum), pct(r.cum, j.cpu), "  "+Printable(r.name, `""`))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// topJSON is the --json form of one job. Job attributes use the schema's
// dotted names, as `jobs --json` does.
type topJSON struct {
	Dir        string         `json:"dir"`
	Attributes map[string]any `json:"attributes"`
	CPUSeconds float64        `json:"cpu_seconds"`
	Samples    int64          `json:"samples"`
	Files      int            `json:"files"`
	Functions  []topFnJSON    `json:"functions"`
}

type topFnJSON struct {
	Name        string  `json:"name"`
	SelfSeconds float64 `json:"self_seconds"`
	SelfPercent float64 `json:"self_percent"`
	SumPercent  float64 `json:"sum_percent"`
	CumSeconds  float64 `json:"cum_seconds"`
	CumPercent  float64 `json:"cum_percent"`
}

func writeTopJSON(w io.Writer, jobs []*jobTop, n int) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, j := range jobs {
		out := topJSON{Dir: j.dir, Attributes: map[string]any{}, CPUSeconds: seconds(j.cpu), Samples: j.samples, Files: j.files, Functions: []topFnJSON{}}
		for _, a := range schema.All {
			switch v := j.values(a.Label); len(v) {
			case 0:
			case 1:
				out.Attributes[a.Name] = v[0]
			default:
				out.Attributes[a.Name] = v // a job on several hosts
			}
		}
		if v := j.values(schema.ServiceName); len(v) > 0 {
			out.Attributes[schema.ServiceName] = strings.Join(v, ",")
		}
		var sum int64
		for _, r := range j.top(n) {
			sum += r.self
			out.Functions = append(out.Functions, topFnJSON{
				Name: r.name, SelfSeconds: seconds(r.self), SelfPercent: pct(r.self, j.cpu),
				SumPercent: pct(sum, j.cpu), CumSeconds: seconds(r.cum), CumPercent: pct(r.cum, j.cpu),
			})
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return nil
}
