// Package plugin is the slurmscope Grafana datasource backend: settings,
// queries (each run by its type from package querytype), resources,
// health and job ownership on top of the query engine.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/backend/instancemgmt"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/querytype"
	"github.com/slurmscope/slurmscope/schema"
)

// ID is the plugin id (src/plugin.json).
const ID = "slurmscope-slurm-datasource"

var (
	_ backend.QueryDataHandler      = (*Datasource)(nil)
	_ backend.CheckHealthHandler    = (*Datasource)(nil)
	_ backend.CallResourceHandler   = (*Datasource)(nil)
	_ instancemgmt.InstanceDisposer = (*Datasource)(nil)
)

// pinger is a backend that can say whether it answers.
type pinger interface{ Ping(context.Context) error }

// Datasource is one configured slurmscope datasource.
type Datasource struct {
	settings Settings
	engine   *query.Engine
	// Health checks; nil where the backend is not configured.
	pyroscope, prometheus pinger
	// Configuration errors, reported by CheckHealth and every query.
	pyroscopeErr, prometheusErr error
	closers                     []func()
}

// NewDatasource is the instance factory datasource.Manage calls.
func NewDatasource(_ context.Context, s backend.DataSourceInstanceSettings) (instancemgmt.Instance, error) {
	set, err := ParseSettings(s)
	if err != nil {
		return nil, err
	}
	return New(set, s.DecryptedSecureJSONData), nil
}

// New builds a datasource from parsed settings and decrypted secrets. A
// misconfigured backend does not fail the instance: CheckHealth and each
// query then say what is wrong.
func New(set Settings, secrets map[string]string) *Datasource {
	if set.DefaultProfileType == "" {
		set.DefaultProfileType = schema.DefaultProfileType.ID()
	}
	d := &Datasource{settings: set, engine: set.engine()}
	if p, err := openBackend(set, "pyroscope", set.Pyroscope, secrets, backends.NewPyroscope); p != nil {
		d.engine.Profiles, d.pyroscope = p, p
	} else {
		d.pyroscopeErr = err
	}
	if p, err := openBackend(set, "prometheus", set.Prometheus, secrets, backends.NewPrometheus); p != nil {
		d.engine.Metrics, d.prometheus = p, p
	} else {
		d.prometheusErr = err
	}
	return d
}

// openBackend builds the client of one backend (name is also the prefix of
// its secrets) with open: nil and no error where its URL is not set, nil
// and the reason where its settings are wrong.
func openBackend[C pinger](set Settings, name string, b BackendSettings, secrets map[string]string, open func(backends.Config) (C, error)) (C, error) {
	var none C
	if b.URL == "" {
		return none, nil
	}
	cfg, err := set.backendConfig(name, b, secrets)
	if err != nil {
		return none, err
	}
	c, err := open(cfg)
	if err != nil {
		return none, err
	}
	return c, nil
}

// NewWith builds a datasource on given backends; tests fake them by hand.
func NewWith(set Settings, profiles query.Profiles, metrics query.Metrics) *Datasource {
	if set.DefaultProfileType == "" {
		set.DefaultProfileType = schema.DefaultProfileType.ID()
	}
	e := set.engine()
	e.Profiles, e.Metrics = profiles, metrics
	return &Datasource{settings: set, engine: e}
}

// Dispose is called when the settings change; nothing holds resources
// beyond idle connections, which the clients' transports drop.
func (d *Datasource) Dispose() {}

// scope decides what the request's user may see.
func (d *Datasource) scope(pc backend.PluginContext, f *filter.Filter) query.Scope {
	s := query.Scope{Filter: f}
	o := d.settings.Ownership
	if !o.Enabled {
		return s
	}
	u := pc.User
	if u != nil && (u.Role == "Admin" || u.Login != "" && slices.Contains(o.AllowUsers, u.Login)) {
		return s
	}
	s.Restricted = true
	s.Owner = o.owner(u)
	return s
}

// errAlertQuery refuses an alert rule's query while ownership is on.
var errAlertQuery = errors.New("alert queries are refused while job ownership is on: Grafana evaluates alert rules as an org admin, " +
	"so ownership cannot narrow them and every user's jobs would be visible to whoever writes the rule; " +
	"an admin can allow them (allowAlertQueries in the datasource settings)")

// fromAlert reports whether Grafana's alerting engine sent the request: it
// sets the FromAlert header, which a browser's request cannot carry.
func fromAlert(headers map[string]string) bool {
	return headers[backend.FromAlertHeaderName] == "true"
}

// QueryData answers each query on its own: a failing query puts its error
// in its own response and the others still answer.
func (d *Datasource) QueryData(ctx context.Context, req *backend.QueryDataRequest) (*backend.QueryDataResponse, error) {
	resp := backend.NewQueryDataResponse()
	if o := d.settings.Ownership; o.Enabled && !o.AllowAlertQueries && fromAlert(req.Headers) {
		for _, q := range req.Queries {
			resp.Responses[q.RefID] = backend.ErrDataResponseWithSource(backend.StatusForbidden, backend.ErrorSourcePlugin, errAlertQuery.Error())
		}
		return resp, nil
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, q := range req.Queries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := d.query(ctx, req.PluginContext, q)
			mu.Lock()
			resp.Responses[q.RefID] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return resp, nil
}

func (d *Datasource) query(ctx context.Context, pc backend.PluginContext, q backend.DataQuery) (resp backend.DataResponse) {
	// Nothing a query carries may take the plugin down.
	defer func() {
		if p := recover(); p != nil {
			resp = backend.ErrDataResponse(backend.StatusInternal, fmt.Sprintf("internal error: %v", p))
		}
	}()
	m, t, err := parseModel(q)
	if err != nil {
		return errorResponse(badRequest{err})
	}
	f, err := filter.Compile(m.Filter)
	if err != nil {
		return backend.ErrDataResponse(backend.StatusBadRequest, "filter: "+err.Error())
	}
	n := t.Needs()
	if err := d.configErr(n.Pyroscope, n.Prometheus); err != nil {
		return errorResponse(err)
	}
	env := querytype.Env{Engine: d.engine, Scope: d.scope(pc, f), Range: queryRange(q), ProfileType: d.settings.DefaultProfileType}
	frames, err := t.Run(ctx, env)
	if err != nil {
		return errorResponse(err)
	}
	for _, fr := range frames {
		fr.RefID = q.RefID
	}
	return backend.DataResponse{Frames: frames}
}

// badRequest marks an error in the query itself (not in a backend).
type badRequest struct{ error }

func errorResponse(err error) backend.DataResponse {
	var br badRequest
	var be *backends.Error
	switch {
	case errors.As(err, &br), errors.Is(err, query.ErrNoLogin), errors.Is(err, query.ErrTooManyCalls):
		return backend.ErrDataResponseWithSource(backend.StatusBadRequest, backend.ErrorSourceDownstream, err.Error())
	case errors.As(err, &be) && be.Status >= 400 && be.Status < 500:
		return backend.ErrDataResponseWithSource(backend.StatusBadRequest, backend.ErrorSourceDownstream, err.Error())
	case errors.As(err, &be) && strings.Contains(be.Msg, "timed out"):
		return backend.ErrDataResponseWithSource(backend.StatusTimeout, backend.ErrorSourceDownstream, err.Error())
	case errors.As(err, &be):
		return backend.ErrDataResponseWithSource(backend.StatusBadGateway, backend.ErrorSourceDownstream, err.Error())
	case errors.Is(err, query.ErrNoPyroscope), errors.Is(err, query.ErrNoPrometheus):
		return backend.ErrDataResponseWithSource(backend.StatusBadRequest, backend.ErrorSourcePlugin, err.Error())
	}
	return backend.ErrDataResponse(backend.StatusInternal, err.Error())
}

func (d *Datasource) configErr(needPyroscope, needPrometheus bool) error {
	if needPyroscope && d.pyroscopeErr != nil {
		return badRequest{d.pyroscopeErr}
	}
	if needPrometheus && d.prometheusErr != nil {
		return badRequest{d.prometheusErr}
	}
	return nil
}

// CheckHealth checks each configured backend and says which one failed.
func (d *Datasource) CheckHealth(ctx context.Context, _ *backend.CheckHealthRequest) (*backend.CheckHealthResult, error) {
	type result struct {
		name, url string
		cfgErr    error
		p         pinger
		err       error
	}
	rs := []*result{
		{name: "Pyroscope", url: d.settings.Pyroscope.URL, cfgErr: d.pyroscopeErr, p: d.pyroscope},
		{name: "Prometheus", url: d.settings.Prometheus.URL, cfgErr: d.prometheusErr, p: d.prometheus},
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range rs {
		if r.cfgErr != nil || r.p == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); r.err = r.p.Ping(ctx) }()
	}
	wg.Wait()
	var msgs []string
	status, configured := backend.HealthStatusOk, 0
	for _, r := range rs {
		switch {
		case r.url == "":
			msgs = append(msgs, r.name+": not configured")
			continue
		case r.cfgErr != nil:
			msgs = append(msgs, fmt.Sprintf("%s settings are invalid: %v", r.name, r.cfgErr))
			status = backend.HealthStatusError
		case r.err != nil:
			msgs = append(msgs, fmt.Sprintf("%s at %s failed: %v", r.name, r.url, r.err))
			status = backend.HealthStatusError
		default:
			msgs = append(msgs, fmt.Sprintf("%s at %s: OK", r.name, r.url))
		}
		configured++
	}
	if configured == 0 {
		return &backend.CheckHealthResult{Status: backend.HealthStatusError,
			Message: "Neither a Pyroscope URL nor a Prometheus URL is configured"}, nil
	}
	if o := d.settings.Ownership; o.Enabled {
		if len(o.AllowTeams) > 0 {
			msgs = append(msgs, "Note: team allow-lists are not enforced (Grafana does not tell plugins a user's teams); list users instead")
		}
		if o.AllowAlertQueries {
			msgs = append(msgs, "Note: alert rules may query this datasource, and see every user's jobs: Grafana evaluates them as an org admin")
		} else {
			msgs = append(msgs, "Note: alert rules cannot query this datasource while job ownership is on")
		}
	}
	return &backend.CheckHealthResult{Status: status, Message: strings.Join(msgs, "; ")}, nil
}

// statusFor maps an engine error to an HTTP status for resource calls.
func statusFor(err error) int {
	var br badRequest
	var be *backends.Error
	switch {
	case errors.As(err, &br), errors.Is(err, query.ErrNoLogin), errors.Is(err, query.ErrTooManyCalls):
		return http.StatusBadRequest
	case errors.As(err, &be) && strings.Contains(be.Msg, "timed out"):
		return http.StatusGatewayTimeout
	case errors.As(err, &be):
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}
