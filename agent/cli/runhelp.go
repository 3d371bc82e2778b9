package cli

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/slurmscope/slurmscope/internal/units"
)

// runHelpGroups orders run --help: the flags most sites set first, then
// one group per concern. A flag goes in the first group that names it or
// a prefix of it (a name ending in "*"); what no group names is advanced.
var runHelpGroups = []struct {
	title string
	names []string
}{
	{"Common", []string{"node-name", "pyroscope-url", "output-dir", "prometheus-remote-write-url", "metrics-addr", "upload-interval", "log-level"}},
	{"Output directory (profiles as files)", []string{"output-*"}},
	{"Pyroscope", []string{"pyroscope-*", "spool-*"}},
	{"/metrics and remote write", []string{"prometheus-remote-write-*", "remote-write-*", "web.config.file"}},
	{"Sampling and stacks", []string{"cpu-profiling", "sample-rate", "unwind", "unwind-table-bytes", "python-frames", "all-processes", "rank-labels", "rescan-interval", "label-stack-setup"}},
	{"GPU", []string{"gpu-*", "nvml-library", "nvidia-mig-minors"}},
	{"Host metrics", []string{"host-metrics*"}},
	{"Limits on what jobs make the agent do", []string{"memory-budget-*", "job-read-*"}},
	{"Slurm", []string{"slurm-*", "slurmctld", "passwd"}},
}

// runHelpGroup is the title of the group a flag belongs in, and its rank
// there (the index of the name that matched: the group's order).
func runHelpGroup(name string) (string, int) {
	for _, g := range runHelpGroups {
		for i, n := range g.names {
			if p, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(name, p) || n == name {
				return g.title, i
			}
		}
	}
	return "Advanced (roots for containers and tests, debugging)", 0
}

// printRunHelp writes fs's flags grouped, each in flag.PrintDefaults's
// form ("  -name type\n    \tusage (default x)").
func printRunHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: slurmscope-agent run [flags]\n")
	byGroup := map[string][]*flag.Flag{}
	var order []string
	for _, g := range runHelpGroups {
		order = append(order, g.title)
	}
	advanced, _ := runHelpGroup("")
	order = append(order, advanced)
	fs.VisitAll(func(fl *flag.Flag) {
		g, _ := runHelpGroup(fl.Name)
		byGroup[g] = append(byGroup[g], fl)
	})
	for _, fls := range byGroup {
		slices.SortStableFunc(fls, func(a, b *flag.Flag) int {
			_, i := runHelpGroup(a.Name)
			_, j := runHelpGroup(b.Name)
			return cmp.Compare(i, j)
		})
	}
	for _, g := range order {
		if len(byGroup[g]) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", g)
		for _, fl := range byGroup[g] {
			kind, usage := flag.UnquoteUsage(fl)
			switch fl.Value.(type) {
			case *units.Bytes:
				kind = "size"
			case *units.Duration:
				kind = "duration"
			}
			line := "  -" + fl.Name
			if kind != "" {
				line += " " + kind
			}
			line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
			if !zeroDefault(fl) {
				if kind == "string" {
					line += fmt.Sprintf(" (default %q)", fl.DefValue)
				} else {
					line += fmt.Sprintf(" (default %v)", fl.DefValue)
				}
			}
			fmt.Fprintln(w, line)
		}
	}
}

// zeroDefault reports whether fl's default is its type's zero value,
// which flag.PrintDefaults leaves unsaid too.
func zeroDefault(fl *flag.Flag) bool {
	switch fl.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}
