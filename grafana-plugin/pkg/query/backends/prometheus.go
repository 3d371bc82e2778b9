package backends

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Prometheus calls Prometheus' HTTP API (also served by Mimir and Thanos).
type Prometheus struct{ client }

// NewPrometheus returns a client for the server at cfg.URL.
func NewPrometheus(cfg Config) (*Prometheus, error) {
	c, err := cfg.client("prometheus")
	if err != nil {
		return nil, err
	}
	return &Prometheus{c}, nil
}

// Sample is one point of a series.
type Sample struct {
	T time.Time
	V float64
}

// PromSeries is one series of a query answer, by its labels.
type PromSeries struct {
	Labels  map[string]string
	Samples []Sample
}

type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

// call calls path with form values and decodes the API's data field into
// out. Queries are POSTed, so that long ones fit; the label API takes
// only GET.
func (p *Prometheus) call(ctx context.Context, method, path string, form url.Values, out any) error {
	target, body, header := path, "", http.Header{}
	if method == http.MethodGet {
		target += "?" + form.Encode()
	} else {
		body = form.Encode()
		header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	status, b, err := p.roundTrip(ctx, method, target, strings.NewReader(body), header)
	if err != nil {
		return err
	}
	var ar apiResponse
	jsonErr := json.Unmarshal(b, &ar)
	if status != http.StatusOK {
		msg := string(b)
		if jsonErr == nil && ar.Error != "" {
			msg = ar.Error
		}
		return statusError(p.name, status, msg)
	}
	if jsonErr != nil || ar.Status != "success" {
		return p.fail(status, fmt.Sprintf("unexpected answer from %s (is the URL a Prometheus API?): %.200s", path, b), nil)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(ar.Data, out); err != nil {
		return p.fail(0, fmt.Sprintf("undecodable %s answer: %v", path, err), err)
	}
	return nil
}

// QueryRange evaluates expr over [start, end] every step.
func (p *Prometheus) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]PromSeries, error) {
	form := url.Values{"query": {expr}, "start": {fmtTime(start)}, "end": {fmtTime(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	var d struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	}
	if err := p.call(ctx, http.MethodPost, "/api/v1/query_range", form, &d); err != nil {
		return nil, err
	}
	out := make([]PromSeries, 0, len(d.Result))
	for _, r := range d.Result {
		s := PromSeries{Labels: r.Metric, Samples: make([]Sample, 0, len(r.Values))}
		for _, v := range r.Values {
			smp, err := decodeSample(v)
			if err != nil {
				return nil, p.fail(0, err.Error(), nil)
			}
			s.Samples = append(s.Samples, smp)
		}
		out = append(out, s)
	}
	return out, nil
}

// Query evaluates expr at one instant; each series has one sample.
func (p *Prometheus) Query(ctx context.Context, expr string, at time.Time) ([]PromSeries, error) {
	form := url.Values{"query": {expr}, "time": {fmtTime(at)}}
	var d struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.call(ctx, http.MethodPost, "/api/v1/query", form, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, p.fail(0, fmt.Sprintf("query answered a %s, want a vector", d.ResultType), nil)
	}
	out := make([]PromSeries, 0, len(d.Result))
	for _, r := range d.Result {
		smp, err := decodeSample(r.Value)
		if err != nil {
			return nil, p.fail(0, err.Error(), nil)
		}
		out = append(out, PromSeries{Labels: r.Metric, Samples: []Sample{smp}})
	}
	return out, nil
}

// LabelValues returns the values of label on series matching any of the
// series selectors in [start, end].
func (p *Prometheus) LabelValues(ctx context.Context, label string, selectors []string, start, end time.Time) ([]string, error) {
	form := url.Values{"start": {fmtTime(start)}, "end": {fmtTime(end)}}
	for _, s := range selectors {
		form.Add("match[]", s)
	}
	var out []string
	// The label name is a schema label, but escape it all the same.
	if err := p.call(ctx, http.MethodGet, "/api/v1/label/"+url.PathEscape(label)+"/values", form, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Ping checks that the server answers the query API with these
// credentials.
func (p *Prometheus) Ping(ctx context.Context) error {
	_, err := p.Query(ctx, "vector(1)", time.Now())
	return err
}

func fmtTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', -1, 64)
}

func decodeSample(v [2]any) (Sample, error) {
	ts, ok := v[0].(float64)
	vs, ok2 := v[1].(string)
	if !ok || !ok2 {
		return Sample{}, fmt.Errorf("malformed sample %v", v)
	}
	f, err := strconv.ParseFloat(vs, 64)
	if err != nil {
		return Sample{}, fmt.Errorf("malformed sample value %q", vs)
	}
	sec, frac := math.Modf(ts)
	return Sample{T: time.Unix(int64(sec), int64(math.Round(frac*1000))*int64(time.Millisecond)), V: f}, nil
}
