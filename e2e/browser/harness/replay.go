package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The replay Pyroscope answers Connect unary calls
// (POST /querier.v1.QuerierService/<Method>, protobuf or JSON bodies) with
// responses recorded from a real Pyroscope (shared/fixtures/pyroscope; see
// e2e/browser/README.md). A call it has no recording for fails loudly:
// an unknown method with 501 unimplemented, SelectMergeStacktraces with
// arguments nobody recorded with 404 not_found, each naming what was
// asked. LabelValues of a label without a recording answers no values, and
// so does SelectSeries of everything grouped by one label without a
// recording (the datasource's /values reads values that way).
//
// Time ranges are not compared: the recordings are replayed for any range.

const service = "/querier.v1.QuerierService/"

// recording is one recorded call.
type recording struct {
	name   string
	method string
	req    proto.Message // the recorded request, as sent
	resp   proto.Message
}

// recorded names the replayed calls: request and response files, and where
// each lies ("testdata" or "fixtures", the --testdata and --fixtures dirs).
var recorded = []struct {
	method            string
	request, response string
	responseIn        string
}{
	{"ProfileTypes", "01-profile-types.request.json", "01-profile-types.response.json", "testdata"},
	{"LabelValues", "03a-label-values-slurm_job_id.request.json", "03a-label-values-slurm_job_id.response.json", "testdata"},
	{"LabelValues", "03b-label-values-slurm_job_user.request.json", "03b-label-values-slurm_job_user.response.json", "testdata"},
	{"LabelValues", "03c-label-values-host_name.request.json", "03c-label-values-host_name.response.json", "testdata"},
	{"SelectSeries", "05a-select-series-by-job-id.request.json", "05a-select-series-by-job-id.response.json", "testdata"},
	{"SelectSeries", "05b-select-series-by-host-name.request.json", "05b-select-series-by-host-name.response.json", "testdata"},
	{"SelectMergeStacktraces", "04a-merge-stacktraces-job4242.request.json", "04a-merge-stacktraces-job4242.response.json", "fixtures"},
	{"SelectMergeStacktraces", "04b-merge-stacktraces-job4242-node-a.request.json", "04b-merge-stacktraces-job4242-node-a.response.json", "fixtures"},
	{"SelectMergeStacktraces", "04c-merge-stacktraces-job4242-max-nodes-3.request.json", "04c-merge-stacktraces-job4242-max-nodes-3.response.json", "fixtures"},
}

// newMessages returns empty request and response messages of a method.
func newMessages(method string) (req, resp proto.Message, ok bool) {
	switch method {
	case "ProfileTypes":
		return &querierv1.ProfileTypesRequest{}, &querierv1.ProfileTypesResponse{}, true
	case "LabelValues":
		return &typesv1.LabelValuesRequest{}, &typesv1.LabelValuesResponse{}, true
	case "SelectSeries":
		return &querierv1.SelectSeriesRequest{}, &querierv1.SelectSeriesResponse{}, true
	case "SelectMergeStacktraces":
		return &querierv1.SelectMergeStacktracesRequest{}, &querierv1.SelectMergeStacktracesResponse{}, true
	}
	return nil, nil, false
}

// Replay is the replay Pyroscope's handler.
type Replay struct {
	recs []recording
}

// LoadReplay reads the recordings.
func LoadReplay(testdata, fixtures string) (*Replay, error) {
	dirs := map[string]string{"testdata": testdata, "fixtures": fixtures}
	r := &Replay{}
	for _, f := range recorded {
		req, resp, _ := newMessages(f.method)
		if err := readProtoJSON(filepath.Join(testdata, f.request), req); err != nil {
			return nil, err
		}
		if err := readProtoJSON(filepath.Join(dirs[f.responseIn], f.response), resp); err != nil {
			return nil, err
		}
		r.recs = append(r.recs, recording{name: strings.TrimSuffix(f.response, ".response.json"), method: f.method, req: req, resp: resp})
	}
	return r, nil
}

func readProtoJSON(path string, m proto.Message) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return fmt.Errorf("replay: %s: %w", path, err)
	}
	return nil
}

// connectError writes a Connect unary error: JSON {code, message}.
func connectError(w http.ResponseWriter, status int, code, msg string) {
	log.Printf("replay Pyroscope: %d %s: %s", status, code, msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": "replay Pyroscope: " + msg})
}

func (rp *Replay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method, ok := strings.CutPrefix(r.URL.Path, service)
	if !ok || r.Method != http.MethodPost {
		connectError(w, http.StatusNotImplemented, "unimplemented",
			fmt.Sprintf("%s %s: not a Connect unary call of %s (the replay knows ProfileTypes, LabelValues, SelectSeries and SelectMergeStacktraces)", r.Method, r.URL.Path, strings.Trim(service, "/")))
		return
	}
	req, _, known := newMessages(method)
	if !known {
		connectError(w, http.StatusNotImplemented, "unimplemented",
			fmt.Sprintf("method %s%s is not replayed (the replay knows ProfileTypes, LabelValues, SelectSeries and SelectMergeStacktraces)", service, method))
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "application/proto" && ct != "application/json" {
		connectError(w, http.StatusUnsupportedMediaType, "unknown", fmt.Sprintf("%s: content type %q: want application/proto or application/json", method, ct))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err == nil {
		if ct == "application/proto" {
			err = proto.Unmarshal(body, req)
		} else {
			err = protojson.Unmarshal(body, req)
		}
	}
	if err != nil {
		connectError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("%s: undecodable request: %v", method, err))
		return
	}
	rec, why := rp.find(method, req)
	if rec == nil && method == "LabelValues" {
		// The recording has the values of three labels. The filter field
		// asks for the values of whatever attribute is being compared, so
		// another label is no mistake: it gets what Pyroscope answers for
		// a label without data, no values.
		rec = &recording{name: "no recording: no values", resp: &typesv1.LabelValuesResponse{}}
	}
	if q, ok := req.(*querierv1.SelectSeriesRequest); ok && rec == nil && sameSelector(q.LabelSelector, "{}") && len(q.GroupBy) == 1 {
		// Likewise the values of a label nobody recorded (what /values
		// asks: everything, grouped by one label): no series. Any other
		// SelectSeries without a recording fails loudly below.
		rec = &recording{name: "no recording: no series", resp: &querierv1.SelectSeriesResponse{}}
	}
	if rec == nil {
		connectError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s: no recording for %s", method, why))
		return
	}
	var out []byte
	if ct == "application/proto" {
		out, err = proto.Marshal(rec.resp)
	} else {
		out, err = protojson.Marshal(rec.resp)
	}
	if err != nil {
		connectError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	log.Printf("replay Pyroscope: %s %s -> %s", method, why, rec.name)
	w.Header().Set("Content-Type", ct)
	_, _ = w.Write(out)
}

// find picks the recording that answers req; why describes req's
// arguments that matter.
func (rp *Replay) find(method string, req proto.Message) (rec *recording, why string) {
	switch q := req.(type) {
	case *querierv1.ProfileTypesRequest:
		why = "any range"
	case *typesv1.LabelValuesRequest:
		// Matched on the label only: the recordings used the matcher {}, so
		// the values are not narrowed by a filter.
		why = fmt.Sprintf("label %q (matchers %q)", q.Name, q.Matchers)
	case *querierv1.SelectSeriesRequest:
		// Matched on the group-by labels and the selector: the recordings
		// are of the selector {}.
		why = fmt.Sprintf("profile type %q, selector %s, group by %q", q.ProfileTypeID, q.LabelSelector, q.GroupBy)
	case *querierv1.SelectMergeStacktracesRequest:
		why = fmt.Sprintf("profile type %q, selector %s, max_nodes %d", q.ProfileTypeID, q.LabelSelector, q.GetMaxNodes())
	}
	for i := range rp.recs {
		r := &rp.recs[i]
		if r.method != method {
			continue
		}
		switch q := req.(type) {
		case *querierv1.ProfileTypesRequest:
			return r, why
		case *typesv1.LabelValuesRequest:
			if r.req.(*typesv1.LabelValuesRequest).Name == q.Name {
				return r, why
			}
		case *querierv1.SelectSeriesRequest:
			rq := r.req.(*querierv1.SelectSeriesRequest)
			if rq.ProfileTypeID == q.ProfileTypeID && sameSelector(rq.LabelSelector, q.LabelSelector) && slices.Equal(rq.GroupBy, q.GroupBy) {
				return r, why
			}
		case *querierv1.SelectMergeStacktracesRequest:
			rq := r.req.(*querierv1.SelectMergeStacktracesRequest)
			if rq.ProfileTypeID != q.ProfileTypeID || !sameSelector(rq.LabelSelector, q.LabelSelector) {
				continue
			}
			// A recording without max_nodes answers any budget that would
			// not cut its 10 nodes; one with max_nodes only that budget.
			if rq.MaxNodes != nil && q.GetMaxNodes() == rq.GetMaxNodes() ||
				rq.MaxNodes == nil && (q.MaxNodes == nil || q.GetMaxNodes() <= 0 || q.GetMaxNodes() >= 16) {
				return r, why
			}
		}
	}
	return nil, why
}

// sameSelector compares two label selectors ({a="x", b="y"}) up to the
// order of the matchers and the spaces between them.
func sameSelector(a, b string) bool {
	return slices.Equal(matchers(a), matchers(b))
}

func matchers(sel string) []string {
	sel = strings.TrimSpace(sel)
	sel = strings.TrimSuffix(strings.TrimPrefix(sel, "{"), "}")
	var out []string
	var cur strings.Builder
	inQuote, esc := false, false
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for _, c := range sel {
		switch {
		case esc:
			esc = false
		case inQuote && c == '\\':
			esc = true
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == ',':
			flush()
			continue
		case !inQuote && c == ' ':
			continue
		}
		cur.WriteRune(c)
	}
	flush()
	slices.Sort(out)
	return out
}
