package querytype

import (
	"context"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/schema"
)

// AttributeValues lists the values of one attribute under the filter, for
// dashboard variables.
const AttributeValues = "attributeValues"

func init() {
	Register[attributeValuesQuery](Info{Name: AttributeValues, Key: "AttributeValues", Order: 50,
		Label: "Attribute values", Description: "The values of one attribute (for variables)"})
}

type attributeValuesQuery struct {
	// Attribute is the attribute whose values are listed.
	Attribute string `json:"attribute"`

	attr schema.Attribute
}

func (q *attributeValuesQuery) Check() error {
	as, err := attributes(q.Attribute)
	if err != nil {
		return err
	}
	q.attr = as[0]
	return nil
}

// Needs both: GPU attributes live only in Prometheus, profiles' only in
// Pyroscope.
func (q *attributeValuesQuery) Needs() Backends { return Backends{Pyroscope: true, Prometheus: true} }

func (q *attributeValuesQuery) Shape() Shape { return Shape{} }

func (q *attributeValuesQuery) Run(ctx context.Context, env Env) (data.Frames, error) {
	vs, err := env.Engine.AttributeValues(ctx, env.Scope, q.attr, env.Range)
	if err != nil {
		return nil, err
	}
	return data.Frames{valuesFrame(q.attr.Name, vs)}, nil
}

// valuesFrame lists attribute values, as template variables read them
// (one string field; text and value are the same).
func valuesFrame(name string, values []string) *data.Frame {
	if values == nil {
		values = []string{}
	}
	return data.NewFrame(name, data.NewField("value", nil, values))
}
