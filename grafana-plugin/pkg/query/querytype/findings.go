package querytype

import (
	"context"
	"fmt"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/schema"
)

// Findings are what the matching jobs should change (package findings),
// as a table or as numbers for alert rules.
const Findings = "findings"

// Formats of a findings query.
const (
	// FormatTable is one row per finding, for dashboards.
	FormatTable = "table"
	// FormatNumeric is one number per finding, labelled by its job, for
	// alert rules: the finding's value (see findings.Finding.Value).
	FormatNumeric = "numeric"
)

func init() {
	Register[findingsQuery](Info{Name: Findings, Key: "Findings", Order: 60,
		Label: "Findings", Description: "What jobs should change: idle GPUs, unused cores, memory over-requested or near its limit, OOM kills, straggling ranks, ...",
		Enums: map[string][]string{"FindingKind": strs(findings.Kinds), "FindingsFormat": {FormatTable, FormatNumeric}}})
}

type findingsQuery struct {
	// Finding is one kind; "" is every kind.
	Finding string `json:"finding" ts:"FindingKind"`
	// Format "" is FormatTable.
	Format string `json:"format" ts:"FindingsFormat"`

	kind findings.Kind
}

func (q *findingsQuery) Check() (err error) {
	if q.kind, err = findings.ParseKind(q.Finding); err != nil {
		return err
	}
	if q.Format != "" && q.Format != FormatTable && q.Format != FormatNumeric {
		return fmt.Errorf("format %q: want %s or %s", q.Format, FormatTable, FormatNumeric)
	}
	if q.kind == findings.Straggler && q.Format == FormatNumeric {
		return fmt.Errorf("finding %s: a table only (format %s): judging ranks takes a flame graph per rank, too many calls for alert rules", q.kind, FormatTable)
	}
	return nil
}

// Needs names Prometheus, but for stragglers, which come from profiles
// alone: a table's waits and stragglers come from Pyroscope where it is
// configured, and are left out where it is not.
func (q *findingsQuery) Needs() Backends {
	if q.kind == findings.Straggler {
		return Backends{Pyroscope: true}
	}
	return Backends{Prometheus: true}
}

func (q *findingsQuery) Shape() Shape {
	if q.Format == FormatNumeric {
		return Shape{Type: data.FrameTypeNumericMulti, Labels: FindingLabels}
	}
	return Shape{}
}

// Run gives a table's findings the waits of jobs with idle cores and the
// stragglers of multi-rank jobs, from Pyroscope where it is configured;
// numbers, which alert rules read every minute, go without: waits do not
// change a finding's value, and stragglers take a call per rank.
func (q *findingsQuery) Run(ctx context.Context, env Env) (data.Frames, error) {
	if q.Format == FormatNumeric {
		fs, err := env.Engine.Findings(ctx, env.Scope, env.Range, q.kind)
		if err != nil {
			return nil, err
		}
		return findingNumbers(fs), nil
	}
	fs, err := env.Engine.FindingsWithWaits(ctx, env.Scope, env.Range, q.kind)
	if err != nil {
		return nil, err
	}
	return data.Frames{findingsFrame(fs)}, nil
}

// Findings table columns: the job's attributes by their dotted names, then
// the finding.
var findingColumns = []string{"severity", "finding", schema.JobID.Name, schema.JobUser.Name, schema.JobName.Name,
	"summary", "advice", "value", "threshold"}

// findingsFrame is one row per finding, the most severe first.
func findingsFrame(fs []findings.Finding) *data.Frame {
	str := func(get func(f findings.Finding) string) []string {
		out := make([]string, len(fs))
		for i, f := range fs {
			out[i] = get(f)
		}
		return out
	}
	num := func(get func(f findings.Finding) float64) []float64 {
		out := make([]float64, len(fs))
		for i, f := range fs {
			out[i] = get(f)
		}
		return out
	}
	c := findingColumns
	f := data.NewFrame("findings",
		data.NewField(c[0], nil, str(func(f findings.Finding) string { return string(f.Severity) })),
		data.NewField(c[1], nil, str(func(f findings.Finding) string { return string(f.Kind) })),
		data.NewField(c[2], nil, str(func(f findings.Finding) string { return f.JobID })),
		data.NewField(c[3], nil, str(func(f findings.Finding) string { return f.User })),
		data.NewField(c[4], nil, str(func(f findings.Finding) string { return f.Name })),
		data.NewField(c[5], nil, str(func(f findings.Finding) string { return f.Summary })),
		data.NewField(c[6], nil, str(func(f findings.Finding) string { return f.Advice })),
		data.NewField(c[7], nil, num(func(f findings.Finding) float64 { return f.Value })),
		data.NewField(c[8], nil, num(func(f findings.Finding) float64 { return f.Threshold })),
	)
	f.Meta = &data.FrameMeta{PreferredVisualization: data.VisTypeTable}
	return f
}

// FindingLabels are the labels of a finding's number: alert rules name
// them in their summaries ({{ index $labels "slurm.job.id" }}).
var FindingLabels = []string{schema.JobID.Name, schema.JobUser.Name, schema.JobName.Name, "finding", "severity"}

// findingNumbers are Grafana's "numeric-multi" frames, which alert rules
// evaluate: one per finding, its value labelled by its job. No finding
// gives one empty frame of the same type ("no data", not an error).
func findingNumbers(fs []findings.Finding) data.Frames {
	meta := func() *data.FrameMeta {
		return &data.FrameMeta{Type: data.FrameTypeNumericMulti, TypeVersion: data.FrameTypeVersion{0, 1}}
	}
	if len(fs) == 0 {
		f := data.NewFrame("findings", data.NewField("value", nil, []float64{}))
		f.Meta = meta()
		return data.Frames{f}
	}
	out := make(data.Frames, 0, len(fs))
	for _, x := range fs {
		l := data.Labels{FindingLabels[0]: x.JobID, FindingLabels[1]: x.User, FindingLabels[2]: x.Name,
			FindingLabels[3]: string(x.Kind), FindingLabels[4]: string(x.Severity)}
		f := data.NewFrame("findings", data.NewField("value", l, []float64{x.Value}))
		f.Meta = meta()
		out = append(out, f)
	}
	return out
}
