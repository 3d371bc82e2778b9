package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/promql"
	"github.com/slurmscope/slurmscope/schema"
)

// Attribute is one entry of /attributes: an attribute of the schema.
type Attribute struct {
	Name        string `json:"name"`
	Type        string `json:"type"`  // string or int
	Scope       string `json:"scope"` // job, process, host or gpu
	Description string `json:"description"`
}

// Metric is one entry of /metrics: a metric a gpuMetric query may name.
type Metric struct {
	Name        string `json:"name"`
	Help        string `json:"help"`
	Type        string `json:"type"`  // gauge or counter
	Level       string `json:"level"` // job: it carries job labels; gpu: a filter on job attributes reaches it through the allocation
	Unit        string `json:"unit"`  // Grafana unit id
	Aggregation string `json:"aggregation"`
}

// ProfileType is one entry of /profile-types: the schema's profile types,
// then any other type Pyroscope holds in the range.
type ProfileType struct {
	ID          string `json:"id"` // as Pyroscope has it, where it has data
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Default marks the schema's default, which a query without a profile
	// type reads unless the datasource's settings name another.
	Default bool `json:"default,omitempty"`
	// HasData says Pyroscope holds profiles of the type in the range.
	HasData bool `json:"hasData"`
}

// FilterIssue is one problem /validate reports, with its position.
type FilterIssue struct {
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Offset  int    `json:"offset"`
	Message string `json:"message"`
}

// CallResource serves the query editor:
//
//	GET /attributes                          the schema
//	GET /values?attribute=&filter=&from=&to= values of one attribute (ms epoch)
//	GET /profile-types?from=&to=             the schema's profile types (the default marked), and Pyroscope's
//	GET /metrics                             the GPU metrics a gpuMetric query may name
//	GET|POST /validate?filter=               {"ok":true} or {"ok":false,"issues":[...]}
func (d *Datasource) CallResource(ctx context.Context, req *backend.CallResourceRequest, sender backend.CallResourceResponseSender) error {
	status, body := d.resource(ctx, req)
	b, err := json.Marshal(body)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed"}`)
	}
	return sender.Send(&backend.CallResourceResponse{Status: status,
		Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: b})
}

type errorBody struct {
	Error string `json:"error"`
}

func (d *Datasource) resource(ctx context.Context, req *backend.CallResourceRequest) (status int, body any) {
	defer func() {
		if p := recover(); p != nil {
			status, body = http.StatusInternalServerError, errorBody{fmt.Sprintf("internal error: %v", p)}
		}
	}()
	u, err := url.Parse(req.URL)
	if err != nil {
		return http.StatusBadRequest, errorBody{"malformed URL"}
	}
	params := u.Query()
	if req.Method == http.MethodPost && len(req.Body) > 0 {
		// /validate takes its filter in a JSON body too, for long filters.
		var in struct {
			Filter string `json:"filter"`
		}
		if json.Unmarshal(req.Body, &in) == nil && in.Filter != "" {
			params.Set("filter", in.Filter)
		}
	}
	switch strings.Trim(req.Path, "/") {
	case "attributes":
		out := make([]Attribute, len(schema.All))
		for i, a := range schema.All {
			out[i] = Attribute{a.Name, a.Type.String(), a.Scope.String(), a.Description}
		}
		return http.StatusOK, out
	case "metrics":
		out := make([]Metric, len(promql.Metrics))
		for i, m := range promql.Metrics {
			def, _ := schema.MetricByName(m.Name)
			out[i] = Metric{m.Name, def.Help, def.Type.String(), m.Level.String(), m.Unit, string(m.Agg)}
		}
		return http.StatusOK, out
	case "validate":
		if _, err := filter.Compile(params.Get("filter")); err != nil {
			return http.StatusOK, map[string]any{"ok": false, "issues": issues(err)}
		}
		return http.StatusOK, map[string]any{"ok": true}
	case "values":
		a, ok := schema.ByName(params.Get("attribute"))
		if !ok {
			return http.StatusBadRequest, errorBody{fmt.Sprintf("unknown attribute %q", params.Get("attribute"))}
		}
		f, err := filter.Compile(params.Get("filter"))
		if err != nil {
			return http.StatusBadRequest, map[string]any{"error": "filter: " + err.Error(), "issues": issues(err)}
		}
		r, err := resourceRange(params)
		if err != nil {
			return http.StatusBadRequest, errorBody{err.Error()}
		}
		vs, err := d.engine.AttributeValues(ctx, d.scope(req.PluginContext, f), a, r)
		if err != nil {
			return statusFor(err), errorBody{err.Error()}
		}
		return http.StatusOK, map[string]any{"values": vs}
	case "profile-types":
		r, err := resourceRange(params)
		if err != nil {
			return http.StatusBadRequest, errorBody{err.Error()}
		}
		pts, err := d.engine.ProfileTypes(ctx, r)
		if err != nil && !errors.Is(err, query.ErrNoPyroscope) {
			return statusFor(err), errorBody{err.Error()}
		}
		return http.StatusOK, profileTypes(pts)
	}
	return http.StatusNotFound, errorBody{fmt.Sprintf("no resource %q", req.Path)}
}

// profileTypes lists the schema's profile types, each under the id
// Pyroscope holds it by where it has data, then the other types Pyroscope
// has (other agents' profiles). Types are told apart by their whole id:
// the off-CPU types share a name.
func profileTypes(held []*typesv1.ProfileType) []ProfileType {
	out := make([]ProfileType, 0, len(schema.ProfileTypes)+len(held))
	used := map[string]bool{}
	for _, st := range schema.ProfileTypes {
		pt := ProfileType{ID: st.ID(), Name: st.Title, Description: st.Description, Default: st.ID() == schema.DefaultProfileType.ID()}
		for _, h := range held {
			if !used[h.ID] && st.Matches(h.ID) {
				pt.ID, pt.HasData, used[h.ID] = h.ID, true, true
				break
			}
		}
		out = append(out, pt)
	}
	for _, h := range held {
		if !used[h.ID] {
			out = append(out, ProfileType{ID: h.ID, Name: h.Name + " / " + h.SampleType, HasData: true})
		}
	}
	return out
}

func issues(err error) []FilterIssue {
	var fe *filter.Error
	if !errors.As(err, &fe) {
		return []FilterIssue{{Line: 1, Column: 1, Message: err.Error()}}
	}
	out := make([]FilterIssue, len(fe.Issues))
	for i, is := range fe.Issues {
		out[i] = FilterIssue{is.Line, is.Column, is.Offset, is.Message}
	}
	return out
}

// resourceRange reads from/to (ms since the epoch); the default is the
// last hour.
func resourceRange(p url.Values) (query.Range, error) {
	now := time.Now()
	r := query.Range{From: now.Add(-time.Hour), To: now}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"from", &r.From}, {"to", &r.To}} {
		if v := p.Get(f.name); v != "" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return r, fmt.Errorf("%s %q: want milliseconds since the epoch", f.name, v)
			}
			*f.dst = time.UnixMilli(ms)
		}
	}
	if !r.From.Before(r.To) {
		return r, errors.New("from must be before to")
	}
	return r, nil
}
