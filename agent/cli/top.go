package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/slurmscope/slurmscope/agent/sink"
	"github.com/slurmscope/slurmscope/internal/printable"
	"github.com/slurmscope/slurmscope/schema"
)

func init() {
	extraCommands["top"] = topCmd
	summaries["top"] = "summarise the profiles an agent wrote to --output-dir: top functions per job"
}

func topCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	dir := fs.String("dir", "", "output directory of 'slurmscope-agent run --output-dir' (one subdirectory per job)")
	job := fs.String("job", "", "only this job (its subdirectory name, e.g. 12 or "+sink.NoJobDir+")")
	n := fs.Int("n", 15, "functions to list per job")
	asJSON := fs.Bool("json", false, "print one JSON object per job")
	cum := fs.Bool("cum", false, "order by cumulative time (anywhere on the stack), listing callers such as main too")
	kind := fs.String("type", "cpu", "which profiles: cpu, offcpu (time blocked), offcpu-runnable (time waiting for a CPU) or gpu (GPU kernel time)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: slurmscope-agent top --dir DIR [--job ID] [--type cpu] [-n 15] [--cum] [--json]")
		fmt.Fprintln(fs.Output(), "\nMerges the profiles of one type the agent wrote per job and lists the functions with the most self time (--cum: the most time anywhere on the stack).")
		fs.PrintDefaults()
	}
	if rc, done := parseArgs(fs, args, stderr); done {
		return rc
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "top: --dir is required")
		return 2
	}
	if *n < 0 {
		fmt.Fprintln(stderr, "top: -n must not be negative")
		return 2
	}
	tk, ok := topKinds[*kind]
	if !ok {
		fmt.Fprintf(stderr, "top: --type %s: want cpu, offcpu, offcpu-runnable or gpu\n", printable.String(*kind, `""`))
		return 2
	}
	if *job != "" && (strings.ContainsAny(*job, `/\`) || *job == "." || *job == "..") {
		fmt.Fprintf(stderr, "top: --job %s is not a job directory name\n", printable.String(*job, `""`))
		return 2
	}
	jobs, err := sink.ReadDirOf(*dir, *job, tk.typ, func(path string, err error) {
		fmt.Fprintf(stderr, "top: skipping %s: %s\n", printable.String(path, `""`), printable.String(err.Error(), ""))
	})
	if err != nil {
		fmt.Fprintf(stderr, "top: %s\n", printable.String(err.Error(), ""))
		return 1
	}
	if len(jobs) == 0 {
		fmt.Fprintf(stderr, "top: no readable %s profiles under %s\n", tk.typ.Name, printable.String(*dir, `""`))
		return 1
	}
	if *asJSON {
		err = writeTopJSON(stdout, jobs, *n, *cum)
	} else {
		err = writeTopText(stdout, jobs, *n, *cum, tk)
	}
	if err != nil {
		fmt.Fprintf(stderr, "top: %v\n", err)
		return 1
	}
	return 0
}

// topKind is a profile type top reads, and how it words its totals.
type topKind struct {
	typ          schema.ProfileType
	value, count string
}

var topKinds = map[string]topKind{
	"cpu":               {schema.ProcessCPU, "CPU", "samples"},
	"offcpu":            {schema.OffCPU, "blocked", "switches"},
	"offcpu-runnable":   {schema.OffCPURunnable, "waiting for a CPU", ""},
	schema.GPUTime.Name: {schema.GPUTime, "GPU", "kernel launches"},
}

func pct(part, total int64) float64 {
	if total <= 0 {
		return 0
	}
	return 100 * float64(part) / float64(total)
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

// topRows is a job's n top functions, by self or by cumulative time.
func topRows(j *sink.Job, n int, cum bool) []sink.Func {
	if cum {
		return j.TopCum(n)
	}
	return j.Top(n)
}

func writeTopText(w io.Writer, jobs []*sink.Job, n int, cum bool, tk topKind) error {
	for i, j := range jobs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		title := "job " + printable.String(j.Dir, `""`)
		if j.Dir == sink.NoJobDir {
			title = "processes in no job"
		}
		var attrs []string
		add := func(what, label string) {
			if v := j.Values(label); len(v) > 0 {
				for k := range v {
					v[k] = printable.String(v[k], `""`)
				}
				attrs = append(attrs, what+" "+strings.Join(v, ","))
			}
		}
		if j.Dir == sink.NoJobDir {
			add("services", schema.ServiceName)
		} else {
			add("name", schema.JobName.Label)
			add("user", schema.JobUser.Label)
		}
		add("host", schema.HostName.Label)
		fmt.Fprintf(w, "%s  %s\n", title, strings.Join(attrs, "  "))
		fmt.Fprintf(w, "  %.2f s %s, ", seconds(j.CPU), tk.value)
		if tk.count != "" {
			fmt.Fprintf(w, "%d %s, ", j.Samples, tk.count)
		}
		fmt.Fprintf(w, "%d file(s)", j.Files)
		if id := j.Value(schema.JobID.Label); id != "" && id != j.Dir {
			// The directory decides; a differing label means files were moved.
			fmt.Fprintf(w, " (labelled %s %s)", schema.JobID.Label, printable.String(id, ""))
		}
		fmt.Fprintln(w)
		rows := topRows(j, n, cum)
		if len(rows) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "SELF\tSELF%\tSUM%\tCUM\tCUM%\t  FUNCTION")
		var sum int64
		for _, r := range rows {
			sum += r.Self
			fmt.Fprintf(tw, "%.2fs\t%.1f%%\t%.1f%%\t%.2fs\t%.1f%%\t%s\n",
				seconds(r.Self), pct(r.Self, j.CPU), pct(sum, j.CPU), seconds(r.Cum), pct(r.Cum, j.CPU), "  "+printable.String(r.Name, `""`))
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

func writeTopJSON(w io.Writer, jobs []*sink.Job, n int, cum bool) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, j := range jobs {
		out := topJSON{Dir: j.Dir, Attributes: map[string]any{}, CPUSeconds: seconds(j.CPU), Samples: j.Samples, Files: j.Files, Functions: []topFnJSON{}}
		for _, a := range schema.All {
			switch v := j.Values(a.Label); len(v) {
			case 0:
			case 1:
				out.Attributes[a.Name] = v[0]
			default:
				out.Attributes[a.Name] = v // a job on several hosts
			}
		}
		if v := j.Values(schema.ServiceName); len(v) > 0 {
			out.Attributes[schema.ServiceName] = strings.Join(v, ",")
		}
		var sum int64
		for _, r := range topRows(j, n, cum) {
			sum += r.Self
			out.Functions = append(out.Functions, topFnJSON{
				Name: r.Name, SelfSeconds: seconds(r.Self), SelfPercent: pct(r.Self, j.CPU),
				SumPercent: pct(sum, j.CPU), CumSeconds: seconds(r.Cum), CumPercent: pct(r.Cum, j.CPU),
			})
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return nil
}
