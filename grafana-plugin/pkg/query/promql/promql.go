// Package promql builds the PromQL of slurmscope's GPU queries from the
// selectors of a filter. It is pure string building, tested with literals.
//
// A filter becomes several disjoint selectors; their series are disjoint
// too, so "a or b" is their exact union and one aggregation over it merges
// across nodes without counting anything twice.
package promql

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/schema"
)

// Level says which labels a metric carries.
type Level int

const (
	// GPU metrics carry host and GPU labels only; a filter on job
	// attributes reaches them through the job's GPU allocation.
	GPU Level = iota
	// Job metrics carry the job labels and the GPU's.
	Job
)

// String is the level's scope in the schema's terms: "gpu" or "job".
func (l Level) String() string {
	if l == Job {
		return schema.ScopeJob.String()
	}
	return schema.ScopeGPU.String()
}

// Metric is one metric the agent exports.
type Metric struct {
	Name  string
	Level Level
	// Unit is the Grafana unit id of what a query shows: for a counter,
	// its per-second rate (bytes/s; CPU seconds per second are cores).
	Unit string
	// Agg is the aggregation that merges it across GPUs sensibly.
	Agg Agg
	// Counter metrics are shown as per-second rates.
	Counter bool
}

// Metrics the query editor offers: the schema's metrics that have a merge
// aggregation, in the schema's order.
var Metrics = func() []Metric {
	var out []Metric
	for _, m := range schema.Metrics {
		if m.Merge != "" {
			out = append(out, Of(m))
		}
	}
	return out
}()

// Of is the schema's metric m, as the engine queries it (also those the
// editor does not offer).
func Of(m schema.Metric) Metric {
	lv := GPU
	if slices.Contains(m.Scopes(), schema.ScopeJob) {
		lv = Job
	}
	unit := grafanaUnit(m.Unit)
	if m.Type == schema.Counter {
		unit = "short" // cores, kills per second
		if m.Unit == "bytes" {
			unit = "Bps"
		}
	}
	return Metric{Name: m.Name, Level: lv, Unit: unit, Agg: Agg(m.Merge), Counter: m.Type == schema.Counter}
}

// grafanaUnit maps a Prometheus base unit to Grafana's unit id.
func grafanaUnit(u string) string {
	switch u {
	case "ratio":
		return "percentunit"
	case "bytes":
		return "bytes"
	case "seconds":
		return "s"
	case "watts":
		return "watt"
	case "celsius":
		return "celsius"
	case "hertz":
		return "hertz"
	}
	return "short"
}

// Lookup finds a metric by name. Only these names are ever put in a query.
func Lookup(name string) (Metric, bool) {
	for _, m := range Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// Allocation is the series that ties a GPU to the job it is allocated to.
var Allocation = schema.JobGPUAllocated.Name

// Agg is a PromQL aggregation operator.
type Agg string

const (
	Avg Agg = "avg"
	Sum Agg = "sum"
	Max Agg = "max"
	Min Agg = "min"
)

// Aggs lists the operators a query may ask for.
var Aggs = []Agg{Avg, Sum, Max, Min}

// ParseAgg accepts the operators above; "" gives def.
func ParseAgg(s string, def Agg) (Agg, error) {
	if s == "" {
		return def, nil
	}
	if slices.Contains(Aggs, Agg(s)) {
		return Agg(s), nil
	}
	return "", fmt.Errorf("aggregation %q: want avg, sum, max or min", s)
}

// overTime is the function that reduces one series over a window in the
// spirit of a: the average for sums and averages, else the same extreme.
func (a Agg) overTime() string {
	switch a {
	case Max:
		return "max_over_time"
	case Min:
		return "min_over_time"
	}
	return "avg_over_time"
}

// Query is what to build.
type Query struct {
	Metric    Metric
	Selectors []filter.Selector // disjoint; empty means nothing matches
	Agg       Agg
	GroupBy   []string // wire labels; host_name not among them merges nodes
	// Window, when set, reduces each series over the trailing window at
	// every step (the average GPU utilisation over 30 minutes).
	Window time.Duration
	// Rate, when set, takes a counter's per-second rate over that window
	// instead (Window is then not applied): CPU seconds become cores.
	Rate time.Duration
}

// gpuJoin are the labels a GPU metric and the allocation share.
var gpuJoin = []string{schema.HostName.Label, schema.GPUUUID.Label, schema.GPUMIGInstance.Label}

// jobLabels are the labels the allocation lends a GPU metric in a join.
var jobLabels = func() []string {
	var out []string
	for _, a := range schema.JobKey {
		out = append(out, a.Label)
	}
	return out
}()

// Build returns the PromQL, or "" when the selectors match nothing.
func Build(q Query) string {
	if len(q.Selectors) == 0 {
		return ""
	}
	parts := make([]string, len(q.Selectors))
	for i, s := range q.Selectors {
		parts[i] = q.one(s)
	}
	inner := strings.Join(parts, " or ")
	return fmt.Sprintf("%s by (%s) (%s)", q.Agg, strings.Join(q.GroupBy, ", "), inner)
}

// one is the expression of one selector: the metric's series it selects.
func (q Query) one(s filter.Selector) string {
	if q.Metric.Level == Job {
		return q.window(Series(q.Metric.Name, s))
	}
	// A GPU metric has no job labels: split the selector into its GPU
	// part and its job part, and let the job part pick GPUs through the
	// allocation, whose job labels the result then carries.
	var own, viaJob filter.Selector
	for _, m := range s {
		if isJobLabel(m.Label) {
			viaJob = append(viaJob, m)
		} else {
			own = append(own, m)
		}
	}
	expr := q.window(Series(q.Metric.Name, own))
	if len(viaJob) == 0 && !groupsByJob(q.GroupBy) {
		return expr
	}
	// max by(...) makes the right side unique per GPU and job; a GPU that
	// two jobs share appears once per job.
	join := fmt.Sprintf("max by (%s) (%s == 1)",
		strings.Join(append(append([]string{schema.GPUIndex.Label}, gpuJoin...), jobLabels...), ", "),
		Series(Allocation, append(viaJob, own...)))
	return fmt.Sprintf("(%s * on (%s) group_right () %s)", expr, strings.Join(gpuJoin, ", "), join)
}

func (q Query) window(expr string) string {
	if q.Rate > 0 {
		return fmt.Sprintf("rate(%s[%s])", expr, Duration(q.Rate))
	}
	if q.Window <= 0 {
		return expr
	}
	return fmt.Sprintf("%s(%s[%s])", q.Agg.overTime(), expr, Duration(q.Window))
}

// isJobLabel reports whether l is a label of a job or of its processes,
// which GPU metrics do not carry.
func isJobLabel(l string) bool {
	a, ok := schema.ByLabel(l)
	return ok && (a.Scope == schema.ScopeJob || a.Scope == schema.ScopeProcess)
}

func groupsByJob(labels []string) bool {
	for _, l := range labels {
		if isJobLabel(l) {
			return true
		}
	}
	return false
}

// Series renders metric{matchers}. Values are quoted by the filter package
// with Go escaping, which PromQL reads back verbatim.
func Series(metric string, s filter.Selector) string {
	if len(s) == 0 {
		return metric
	}
	return metric + s.String()
}

// Matchers renders a series selector for the label-values API, restricted
// to slurmscope's metrics (the API refuses a selector without a matcher
// that needs a value).
func Matchers(s filter.Selector) string {
	parts := []string{`__name__=~"` + schema.MetricPrefix + `.+"`}
	for _, m := range s {
		parts = append(parts, m.String())
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Duration renders d in PromQL's duration syntax, in whole seconds or
// milliseconds.
func Duration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}
