package querytype

import (
	"context"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/schema"
)

// ProfileSeries is the profile totals over time, one series per group.
const ProfileSeries = "profileSeries"

func init() {
	Register[profileSeriesQuery](Info{Name: ProfileSeries, Key: "ProfileSeries", Order: 20,
		Label: "Profile series", Description: "Profile totals over time, per group"})
}

type profileSeriesQuery struct {
	// ProfileType "" is the settings' default.
	ProfileType string `json:"profileType"`
	// GroupBy are attribute names; without host.name, series merge
	// across nodes.
	GroupBy []string `json:"groupBy"`

	groupBy []schema.Attribute
}

func (q *profileSeriesQuery) Check() (err error) {
	q.groupBy, err = attributes(q.GroupBy...)
	return err
}

func (q *profileSeriesQuery) Needs() Backends { return Backends{Pyroscope: true} }

func (q *profileSeriesQuery) Shape() Shape {
	return Shape{Type: data.FrameTypeTimeSeriesMulti, Labels: q.GroupBy}
}

func (q *profileSeriesQuery) Run(ctx context.Context, env Env) (data.Frames, error) {
	pt := env.profileType(q.ProfileType)
	ss, err := env.Engine.ProfileSeries(ctx, env.Scope, pt, q.groupBy, env.Range)
	if err != nil {
		return nil, err
	}
	return seriesFrames("profile", profileUnit(pt), ss), nil
}
