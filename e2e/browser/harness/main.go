// Command harness serves the browser test's page and stands in for the
// pieces of Grafana the slurmscope front end talks to, in front of the REAL
// Go datasource (grafana-plugin/pkg/plugin):
//
//	GET|POST /api/datasources/uid/{uid}/resources/{path...}  -> Datasource.CallResource
//	GET      /api/datasources/uid/{uid}/health                -> Datasource.CheckHealth
//	POST     /api/ds/query                                     -> Datasource.QueryData
//	anything else under /api/                                  -> 404, logged (a call the harness does not know is loud)
//	everything else                                            -> the built page (--static)
//
// The datasource's Pyroscope is a replay server in the same process: it
// answers the Connect unary calls the datasource makes with responses
// recorded from a real Pyroscope (see replay.go). There is no Prometheus.
//
// Once it listens, it prints exactly one line on stdout,
// "listening on http://ADDR"; it logs to stderr and exits on SIGINT or
// SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/plugin"
)

// DatasourceUID is the uid the page gives its datasource instance.
const DatasourceUID = "slurmscope"

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	static := flag.String("static", "e2e/browser/dist", "the built harness page (index.html, harness.js)")
	fixtures := flag.String("fixtures", "grafana-plugin/pkg/query/flame/testdata", "recorded SelectMergeStacktraces responses (NN-*.response.json)")
	testdata := flag.String("testdata", "e2e/browser/testdata", "the other recorded Pyroscope calls, and the requests of the SelectMergeStacktraces ones")
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("harness: ")
	if err := run(*listen, *static, *fixtures, *testdata); err != nil {
		log.Fatal(err)
	}
}

func run(listen, static, fixtures, testdata string) error {
	rep, err := LoadReplay(testdata, fixtures)
	if err != nil {
		return err
	}
	pyro := httptest.NewServer(rep)
	defer pyro.Close()
	log.Printf("replay Pyroscope at %s (%d recordings)", pyro.URL, len(rep.recs))

	if st, err := os.Stat(static); err != nil || !st.IsDir() {
		return fmt.Errorf("--static %s: not a directory (run npm run build:harness first)", static)
	}
	ds, err := NewDatasource(pyro.URL)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: logRequests(NewHandler(ds, static)), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Printf("listening on http://%s\n", ln.Addr())
	_ = os.Stdout.Sync()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Print("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// Settings are the datasource's settings: only Pyroscope is configured.
// They go through plugin.ParseSettings, as Grafana's jsonData does.
func Settings(pyroscopeURL string) (plugin.Settings, error) {
	jd, err := json.Marshal(plugin.Settings{Pyroscope: plugin.BackendSettings{URL: pyroscopeURL}})
	if err != nil {
		return plugin.Settings{}, err
	}
	return plugin.ParseSettings(backend.DataSourceInstanceSettings{UID: DatasourceUID, JSONData: jd})
}

// NewDatasource builds the real datasource on the replay Pyroscope.
func NewDatasource(pyroscopeURL string) (*plugin.Datasource, error) {
	set, err := Settings(pyroscopeURL)
	if err != nil {
		return nil, err
	}
	return plugin.New(set, nil), nil
}

// Datasource is what the handler needs of the plugin.
type Datasource interface {
	backend.QueryDataHandler
	backend.CallResourceHandler
	backend.CheckHealthHandler
}

// NewHandler serves the Grafana API subset on ds, and the page from static
// ("" serves no page).
func NewHandler(ds Datasource, static string) http.Handler {
	h := &handler{ds: ds}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/datasources/uid/{uid}/resources/{path...}", h.resource)
	mux.HandleFunc("GET /api/datasources/uid/{uid}/health", h.health)
	mux.HandleFunc("POST /api/ds/query", h.query)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		log.Printf("NOT HANDLED: %s %s (the harness stands in for this much of Grafana's API only)", r.Method, r.URL)
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "harness: no such API: " + r.Method + " " + r.URL.Path})
	})
	if static != "" {
		mux.Handle("/", noCache(http.FileServer(http.Dir(static))))
	}
	return mux
}

type handler struct{ ds Datasource }

// pluginContext is what Grafana would pass: an admin in org 1, on the
// datasource instance the page uses.
func pluginContext() backend.PluginContext {
	return backend.PluginContext{
		OrgID:    1,
		PluginID: plugin.ID,
		User:     &backend.User{Login: "admin", Name: "admin", Role: "Admin"},
		DataSourceInstanceSettings: &backend.DataSourceInstanceSettings{
			ID: 1, UID: DatasourceUID, Name: DatasourceUID, Type: plugin.ID,
		},
	}
}

func (h *handler) checkUID(w http.ResponseWriter, uid string) bool {
	if uid != DatasourceUID {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": fmt.Sprintf("harness: unknown datasource uid %q (want %q)", uid, DatasourceUID)})
		return false
	}
	return true
}

// resource relays a resource call as Grafana does: Path is the part after
// /resources/, URL that path with the query string.
func (h *handler) resource(w http.ResponseWriter, r *http.Request) {
	if !h.checkUID(w, r.PathValue("uid")) {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
		return
	}
	path := r.PathValue("path")
	u := path
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	req := &backend.CallResourceRequest{
		PluginContext: pluginContext(),
		Path:          path,
		Method:        r.Method,
		URL:           u,
		Headers:       r.Header,
		Body:          body,
	}
	var got *backend.CallResourceResponse
	sender := backend.CallResourceResponseSenderFunc(func(res *backend.CallResourceResponse) error {
		if got == nil {
			got = res
		} else {
			// Chunked answers: Grafana concatenates the bodies.
			got.Body = append(got.Body, res.Body...)
		}
		return nil
	})
	if err := h.ds.CallResource(r.Context(), req, sender); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "CallResource: " + err.Error()})
		return
	}
	if got == nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "CallResource sent no response"})
		return
	}
	for k, vs := range got.Headers {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	status := got.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(got.Body)
}

// health answers as Grafana's /health does: 200 when OK, 400 otherwise,
// with {status, message}.
func (h *handler) health(w http.ResponseWriter, r *http.Request) {
	if !h.checkUID(w, r.PathValue("uid")) {
		return
	}
	res, err := h.ds.CheckHealth(r.Context(), &backend.CheckHealthRequest{PluginContext: pluginContext()})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"message": err.Error()})
		return
	}
	status := http.StatusOK
	if res.Status != backend.HealthStatusOk {
		status = http.StatusBadRequest
	}
	writeJSON(w, status, map[string]string{"status": res.Status.String(), "message": res.Message})
}

// dsQueryRequest is the body DataSourceWithBackend posts to /api/ds/query.
type dsQueryRequest struct {
	Queries []json.RawMessage `json:"queries"`
	From    string            `json:"from"`
	To      string            `json:"to"`
}

// queryHead is the part of a query Grafana itself reads; the rest is the
// plugin's model and travels as the query's JSON.
type queryHead struct {
	RefID         string `json:"refId"`
	QueryType     string `json:"queryType"`
	MaxDataPoints int64  `json:"maxDataPoints"`
	IntervalMs    int64  `json:"intervalMs"`
	Datasource    *struct {
		UID  string `json:"uid"`
		Type string `json:"type"`
	} `json:"datasource"`
}

// ParseQueryRequest turns Grafana's /api/ds/query body into the
// QueryDataRequest the plugin gets.
func ParseQueryRequest(body []byte) (*backend.QueryDataRequest, error) {
	var in dsQueryRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("request body: %w", err)
	}
	if len(in.Queries) == 0 {
		return nil, errors.New("no queries")
	}
	tr, err := timeRange(in.From, in.To)
	if err != nil {
		return nil, err
	}
	req := &backend.QueryDataRequest{PluginContext: pluginContext(), Headers: map[string]string{}}
	for i, raw := range in.Queries {
		var q queryHead
		if err := json.Unmarshal(raw, &q); err != nil {
			return nil, fmt.Errorf("query %d: %w", i, err)
		}
		if q.Datasource != nil && q.Datasource.UID != "" && q.Datasource.UID != DatasourceUID {
			return nil, fmt.Errorf("query %s: datasource uid %q is not the harness's %q", q.RefID, q.Datasource.UID, DatasourceUID)
		}
		if q.RefID == "" {
			q.RefID = "A"
		}
		dq := backend.DataQuery{RefID: q.RefID, QueryType: q.QueryType, TimeRange: tr, JSON: raw,
			MaxDataPoints: q.MaxDataPoints, Interval: time.Duration(q.IntervalMs) * time.Millisecond}
		if dq.MaxDataPoints == 0 {
			dq.MaxDataPoints = 100 // Grafana's default
		}
		if dq.Interval == 0 {
			dq.Interval = time.Second
		}
		req.Queries = append(req.Queries, dq)
	}
	return req, nil
}

// timeRange reads from/to as ms since the epoch, or "now" and "now-<dur>"
// (Grafana accepts those too); the default is the last hour.
func timeRange(from, to string) (backend.TimeRange, error) {
	now := time.Now()
	parse := func(name, s string, def time.Time) (time.Time, error) {
		switch {
		case s == "":
			return def, nil
		case s == "now":
			return now, nil
		case strings.HasPrefix(s, "now-"):
			d, err := time.ParseDuration(s[len("now-"):])
			if err != nil {
				return time.Time{}, fmt.Errorf("%s %q: %w", name, s, err)
			}
			return now.Add(-d), nil
		}
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s %q: want milliseconds since the epoch", name, s)
		}
		return time.UnixMilli(ms), nil
	}
	f, err := parse("from", from, now.Add(-time.Hour))
	if err != nil {
		return backend.TimeRange{}, err
	}
	t, err := parse("to", to, now)
	if err != nil {
		return backend.TimeRange{}, err
	}
	return backend.TimeRange{From: f, To: t}, nil
}

// query answers /api/ds/query as Grafana does: the QueryDataResponse's
// JSON ({"results":{"A":{"status":200,"frames":[...]}}}), with HTTP 400
// when any query failed (Grafana's status without the multi-status toggle).
func (h *handler) query(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
		return
	}
	req, err := ParseQueryRequest(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "harness: " + err.Error()})
		return
	}
	resp, err := h.ds.QueryData(r.Context(), req)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "QueryData: " + err.Error()})
		return
	}
	status := http.StatusOK
	for ref, res := range resp.Responses {
		if res.Error != nil {
			log.Printf("query %s failed: %v", ref, res.Error)
			status = http.StatusBadRequest
		}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "encoding the response: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// noCache keeps a rebuilt bundle from being served stale.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// logRequests logs API calls (not static files) with their status.
func logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/api/") {
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sr := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sr, r)
		log.Printf("%s %s -> %d (%s)", r.Method, r.URL, sr.status, time.Since(start).Round(time.Millisecond))
	})
}
