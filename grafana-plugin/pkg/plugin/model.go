package plugin

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/querytype"
)

// Model is what every query's JSON model holds; the rest of it is its
// type's fields (package querytype).
type Model struct {
	QueryType string `json:"queryType"`
	// Filter is a CEL expression over the attribute schema; "" is everything.
	Filter string `json:"filter"`
}

// parseModel reads q's JSON: the model every type has, then its type's
// fields, checked. Grafana also passes queryType outside the JSON; that
// one wins.
func parseModel(q backend.DataQuery) (Model, querytype.Query, error) {
	var m Model
	if len(q.JSON) > 0 {
		if err := json.Unmarshal(q.JSON, &m); err != nil {
			return Model{}, nil, fmt.Errorf("query model is not valid JSON: %w", err)
		}
	}
	if q.QueryType != "" {
		m.QueryType = q.QueryType
	}
	if m.QueryType == "" {
		m.QueryType = querytype.Default
	}
	t, err := querytype.Parse(m.QueryType, q.JSON)
	if err != nil {
		return Model{}, nil, err
	}
	return m, t, nil
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
