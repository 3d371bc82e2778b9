package querytype

import (
	"context"
	"fmt"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/schema"
)

// TopEntities is a table of the values of one attribute (jobs, users,
// nodes) ranked by a measure over the range.
const TopEntities = "topEntities"

func init() {
	Register[topEntitiesQuery](Info{Name: TopEntities, Key: "TopEntities", Order: 40,
		Label: "Top", Description: "Jobs, users or nodes ranked by CPU time, GPU time or GPU utilisation",
		Enums: map[string][]string{"Rank": strs(query.Ranks)}})
}

// defaultLimit is how many a top table lists unless the query says.
const defaultLimit = 10

type topEntitiesQuery struct {
	// Entity is the attribute ranked; "" is slurm.job.id.
	Entity string `json:"entity"`
	// RankBy "" is CPU time.
	RankBy string `json:"rankBy" ts:"Rank"`
	// Limit 0 is defaultLimit.
	Limit int `json:"limit"`

	entity schema.Attribute
	rank   query.Rank
}

func (q *topEntitiesQuery) Check() error {
	if q.Limit < 0 {
		return fmt.Errorf("limit %d is negative", q.Limit)
	}
	if q.Limit == 0 {
		q.Limit = defaultLimit
	}
	ent := q.Entity
	if ent == "" {
		ent = schema.JobID.Name
	}
	as, err := attributes(ent)
	if err != nil {
		return err
	}
	q.entity = as[0]
	q.rank, err = query.ParseRank(q.RankBy)
	return err
}

func (q *topEntitiesQuery) Needs() Backends {
	return Backends{Pyroscope: !q.rank.FromMetrics(), Prometheus: q.rank.FromMetrics()}
}

func (q *topEntitiesQuery) Shape() Shape { return Shape{} }

func (q *topEntitiesQuery) Run(ctx context.Context, env Env) (data.Frames, error) {
	rs, err := env.Engine.TopEntities(ctx, env.Scope, q.entity, q.rank, env.Range, q.Limit)
	if err != nil {
		return nil, err
	}
	return data.Frames{rankedFrame("top", q.entity.Name, q.rank.Unit(), rs)}, nil
}

// rankedFrame is a table of entities and their values, largest first.
func rankedFrame(name, entity, unit string, rs []query.Ranked) *data.Frame {
	names := make([]string, len(rs))
	values := make([]float64, len(rs))
	for i, r := range rs {
		names[i], values[i] = r.Value, r.Total
	}
	v := data.NewField(data.TimeSeriesValueFieldName, nil, values)
	if unit != "" {
		v.Config = &data.FieldConfig{Unit: unit}
	}
	f := data.NewFrame(name, data.NewField(entity, nil, names), v)
	f.Meta = &data.FrameMeta{PreferredVisualization: data.VisTypeTable}
	return f
}
