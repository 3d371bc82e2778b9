package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"
	"google.golang.org/protobuf/proto"
)

// Pyroscope calls the querier.v1 API as Connect unary calls with protobuf
// bodies. The calls are made by hand, not through a generated client, so
// that an HTTP status and a gateway's plain-text body reach the error.
type Pyroscope struct{ client }

// NewPyroscope returns a client for the server at cfg.URL.
func NewPyroscope(cfg Config) (*Pyroscope, error) {
	c, err := cfg.client("pyroscope")
	if err != nil {
		return nil, err
	}
	return &Pyroscope{c}, nil
}

const querierService = "/querier.v1.QuerierService/"

func (p *Pyroscope) call(ctx context.Context, method string, req, resp proto.Message) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return p.fail(0, err.Error(), err)
	}
	header := http.Header{"Content-Type": {"application/proto"}, "Connect-Protocol-Version": {"1"}}
	status, b, err := p.roundTrip(ctx, http.MethodPost, querierService+method, bytes.NewReader(body), header)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		// Connect errors are JSON {code, message}; a gateway's are text.
		var ce struct{ Code, Message string }
		msg := string(b)
		if json.Unmarshal(b, &ce) == nil && ce.Message != "" {
			msg = ce.Message
		}
		return statusError(p.name, status, method+": "+msg)
	}
	if err := proto.Unmarshal(b, resp); err != nil {
		return p.fail(status, fmt.Sprintf("%s: undecodable answer (is the URL a Pyroscope server?): %v", method, err), err)
	}
	return nil
}

// MergeStacktraces returns the flame graph of the profiles of profileType
// matching selector in [start, end]; maxNodes <= 0 leaves the server's
// default.
func (p *Pyroscope) MergeStacktraces(ctx context.Context, profileType, selector string, start, end time.Time, maxNodes int64) (*querierv1.FlameGraph, error) {
	req := &querierv1.SelectMergeStacktracesRequest{ProfileTypeID: profileType, LabelSelector: selector,
		Start: start.UnixMilli(), End: end.UnixMilli()}
	if maxNodes > 0 {
		req.MaxNodes = &maxNodes
	}
	var resp querierv1.SelectMergeStacktracesResponse
	if err := p.call(ctx, "SelectMergeStacktraces", req, &resp); err != nil {
		return nil, err
	}
	return resp.Flamegraph, nil
}

// Selection is one side of a Diff: the profiles matching Selector in
// [Start, End], both inclusive.
type Selection struct {
	Selector   string
	Start, End time.Time
}

// Diff returns the flame graphs of profileType under left and right laid
// over one another, as the server lays them; maxNodes <= 0 leaves the
// server's default.
func (p *Pyroscope) Diff(ctx context.Context, profileType string, left, right Selection, maxNodes int64) (*querierv1.FlameGraphDiff, error) {
	side := func(s Selection) *querierv1.SelectMergeStacktracesRequest {
		r := &querierv1.SelectMergeStacktracesRequest{ProfileTypeID: profileType, LabelSelector: s.Selector,
			Start: s.Start.UnixMilli(), End: s.End.UnixMilli()}
		if maxNodes > 0 {
			r.MaxNodes = &maxNodes
		}
		return r
	}
	var resp querierv1.DiffResponse
	if err := p.call(ctx, "Diff", &querierv1.DiffRequest{Left: side(left), Right: side(right)}, &resp); err != nil {
		return nil, err
	}
	return resp.Flamegraph, nil
}

// SelectSeries returns the series of profile totals per step, grouped by
// the wire labels groupBy.
func (p *Pyroscope) SelectSeries(ctx context.Context, profileType, selector string, groupBy []string, start, end time.Time, step time.Duration) ([]*typesv1.Series, error) {
	req := &querierv1.SelectSeriesRequest{ProfileTypeID: profileType, LabelSelector: selector, GroupBy: groupBy,
		Start: start.UnixMilli(), End: end.UnixMilli(), Step: stepSeconds(step)}
	var resp querierv1.SelectSeriesResponse
	if err := p.call(ctx, "SelectSeries", req, &resp); err != nil {
		return nil, err
	}
	return resp.Series, nil
}

// stepSeconds is step as the API's seconds, chosen so that the server,
// which turns them back into whole milliseconds by truncating
// seconds × 1e9 nanoseconds, gets step's milliseconds exactly (6047.999
// would come back as 6047998 ms).
func stepSeconds(step time.Duration) float64 {
	ms := step.Milliseconds()
	s := float64(ms) / 1000
	for time.Duration(s*float64(time.Second)).Milliseconds() < ms {
		s = math.Nextafter(s, math.Inf(1))
	}
	return s
}

// LabelValues returns the values of label on series matching any of the
// selectors.
func (p *Pyroscope) LabelValues(ctx context.Context, label string, selectors []string, start, end time.Time) ([]string, error) {
	req := &typesv1.LabelValuesRequest{Name: label, Matchers: selectors, Start: start.UnixMilli(), End: end.UnixMilli()}
	var resp typesv1.LabelValuesResponse
	if err := p.call(ctx, "LabelValues", req, &resp); err != nil {
		return nil, err
	}
	return resp.Names, nil
}

// ProfileTypes lists the profile types with data in [start, end].
func (p *Pyroscope) ProfileTypes(ctx context.Context, start, end time.Time) ([]*typesv1.ProfileType, error) {
	req := &querierv1.ProfileTypesRequest{Start: start.UnixMilli(), End: end.UnixMilli()}
	var resp querierv1.ProfileTypesResponse
	if err := p.call(ctx, "ProfileTypes", req, &resp); err != nil {
		return nil, err
	}
	return resp.ProfileTypes, nil
}

// Ping checks that the server answers the querier API with these
// credentials: a ProfileTypes call over the last minute.
func (p *Pyroscope) Ping(ctx context.Context) error {
	now := time.Now()
	_, err := p.ProfileTypes(ctx, now.Add(-time.Minute), now)
	return err
}
