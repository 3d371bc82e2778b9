package plugin

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/schema"
)

// Query types (the JSON model's queryType).
const (
	TypeFlamegraph      = "flamegraph"
	TypeProfileSeries   = "profileSeries"
	TypeGPUMetric       = "gpuMetric"
	TypeTopEntities     = "topEntities"
	TypeAttributeValues = "attributeValues"
	TypeFindings        = "findings"
)

// Formats of a findings query.
const (
	// FormatTable is one row per finding, for dashboards.
	FormatTable = "table"
	// FormatNumeric is one number per finding, labelled by its job, for
	// alert rules: the finding's value (see findings.Finding.Value).
	FormatNumeric = "numeric"
)

// Model is a query's JSON model. Fields apply to the query types noted.
type Model struct {
	QueryType string `json:"queryType"`
	// Filter is a CEL expression over the attribute schema; "" is everything.
	Filter string `json:"filter"`
	// flamegraph, profileSeries: the profile type (default: the settings').
	ProfileType string `json:"profileType"`
	// flamegraph: at most this many nodes (default 8192, Pyroscope's).
	MaxNodes int `json:"maxNodes"`
	// profileSeries, gpuMetric: attribute names to group by. Without
	// host.name, series merge across nodes.
	GroupBy []string `json:"groupBy"`
	// gpuMetric: the metric name, the aggregation (avg, sum, max, min) and
	// an optional trailing window ("30m") each series is averaged over.
	Metric      string `json:"metric"`
	Aggregation string `json:"aggregation"`
	Window      string `json:"window"`
	// topEntities: the attribute ranked, by what, how many.
	Entity string `json:"entity"`
	RankBy string `json:"rankBy"`
	Limit  int    `json:"limit"`
	// attributeValues: the attribute whose values are listed.
	Attribute string `json:"attribute"`
	// findings: one kind ("" is every kind), as a table or numbers.
	Finding string `json:"finding"`
	Format  string `json:"format"`
}

// DefaultMaxNodes is Pyroscope's default max_flamegraph_nodes.
const DefaultMaxNodes = 8192

// maxMaxNodes keeps a query from asking for an unbounded frame.
const maxMaxNodes = 65536

// parseModel reads q's JSON. Grafana also passes queryType outside the
// JSON; that one wins.
func parseModel(q backend.DataQuery) (Model, error) {
	var m Model
	if len(q.JSON) > 0 {
		if err := json.Unmarshal(q.JSON, &m); err != nil {
			return Model{}, fmt.Errorf("query model is not valid JSON: %w", err)
		}
	}
	if q.QueryType != "" {
		m.QueryType = q.QueryType
	}
	if m.QueryType == "" {
		m.QueryType = TypeFlamegraph
	}
	if m.MaxNodes < 0 || m.MaxNodes > maxMaxNodes {
		return Model{}, fmt.Errorf("maxNodes %d: want 1 to %d", m.MaxNodes, maxMaxNodes)
	}
	if m.MaxNodes == 0 {
		m.MaxNodes = DefaultMaxNodes
	}
	if m.Limit < 0 {
		return Model{}, fmt.Errorf("limit %d is negative", m.Limit)
	}
	return m, nil
}

// attributes resolves attribute names (dotted) from the schema.
func attributes(names []string) ([]schema.Attribute, error) {
	out := make([]schema.Attribute, 0, len(names))
	for _, n := range names {
		a, ok := schema.ByName(n)
		if !ok {
			return nil, fmt.Errorf("unknown attribute %q", n)
		}
		out = append(out, a)
	}
	return out, nil
}

// minStep keeps a range query from asking for millions of points.
const minStep = time.Second

// queryRange derives the step from the panel's interval and width.
func queryRange(q backend.DataQuery) query.Range {
	r := query.Range{From: q.TimeRange.From, To: q.TimeRange.To, Step: q.Interval}
	if q.MaxDataPoints > 0 {
		if s := r.To.Sub(r.From) / time.Duration(q.MaxDataPoints); s > r.Step {
			r.Step = s
		}
	}
	r.Step = max(r.Step.Truncate(time.Second), minStep)
	return r
}
