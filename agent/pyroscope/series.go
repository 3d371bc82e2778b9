package pyroscope

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/schema"
)

// MetricNameLabel is the Prometheus metric-name label. Pyroscope takes the
// profile's name (process_cpu, gpu_time, ...) from it and rejects a push
// without it ("invalid metric name").
const MetricNameLabel = "__name__"

// Server-side limits that Pyroscope applies by default (its
// validation.max_label_names_per_series, max_label_name_length and
// max_label_value_length). Checking them here turns a rejected push, which
// would be dropped after the fact, into an error at the producer.
const (
	MaxLabelNamesPerSeries = 30
	MaxLabelNameLength     = 1024
	MaxLabelValueLength    = 2048
)

// Series is one profile series to push: what identifies it plus one or more
// pprof profiles (gzipped or not; Pyroscope accepts both).
type Series struct {
	// Name is the profile name, sent as __name__: process_cpu, gpu_time.
	Name string
	// ServiceName is sent as service_name: the job name, or the executable
	// for processes in no job.
	ServiceName string
	// Labels are the other wire labels, keyed by schema label
	// (schema.JobID.Label, ...). Empty values are left out, as Pyroscope
	// treats an empty label as an absent one.
	Labels map[string]string
	// Profiles are the raw pprof profiles of this series.
	Profiles [][]byte
}

// LabelPairs returns the series' labels as sent: __name__, service_name and
// Labels, sorted by name, with values made valid UTF-8.
func (s Series) LabelPairs() []*typesv1.LabelPair {
	ls := make([]*typesv1.LabelPair, 0, len(s.Labels)+2)
	ls = append(ls,
		&typesv1.LabelPair{Name: MetricNameLabel, Value: SanitizeValue(s.Name)},
		&typesv1.LabelPair{Name: schema.ServiceName, Value: SanitizeValue(s.ServiceName)})
	for k, v := range s.Labels {
		if v == "" {
			continue
		}
		ls = append(ls, &typesv1.LabelPair{Name: k, Value: SanitizeValue(v)})
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].Name < ls[j].Name })
	return ls
}

// NewPushRequest builds a push request from series, validating every label
// set as Pyroscope would. An invalid series makes the whole request an error,
// since the server would reject the whole request too.
func NewPushRequest(series ...Series) (*pushv1.PushRequest, error) {
	req := &pushv1.PushRequest{Series: make([]*pushv1.RawProfileSeries, 0, len(series))}
	for _, s := range series {
		if _, dup := s.Labels[MetricNameLabel]; dup {
			return nil, fmt.Errorf("series %q: set the profile name with Series.Name, not a %s label", s.Name, MetricNameLabel)
		}
		if _, dup := s.Labels[schema.ServiceName]; dup {
			return nil, fmt.Errorf("series %q: set the service name with Series.ServiceName, not a label", s.Name)
		}
		if len(s.Profiles) == 0 {
			return nil, fmt.Errorf("series %q: no profile", s.Name)
		}
		ls := s.LabelPairs()
		if err := ValidateLabels(ls); err != nil {
			return nil, err
		}
		rs := &pushv1.RawProfileSeries{Labels: ls}
		for _, p := range s.Profiles {
			if len(p) == 0 {
				return nil, fmt.Errorf("series %s: empty profile", LabelsString(ls))
			}
			rs.Samples = append(rs.Samples, &pushv1.RawSample{RawProfile: p})
		}
		req.Series = append(req.Series, rs)
	}
	if len(req.Series) == 0 {
		return nil, errors.New("push request without series")
	}
	return req, nil
}

// SanitizeValue makes v valid UTF-8, replacing each invalid byte sequence
// with U+FFFD. Job names and users come from outside the agent; Pyroscope
// rejects the whole request for one invalid value.
func SanitizeValue(v string) string {
	if utf8.ValidString(v) {
		return v
	}
	return strings.ToValidUTF8(v, "\uFFFD")
}

// ValidationError is a label set that Pyroscope would reject. Reason follows
// Pyroscope's discard reasons.
type ValidationError struct {
	Reason string // invalid_labels, missing_labels, duplicate_label_names, ...
	Msg    string
}

func (e *ValidationError) Error() string { return e.Msg }

// ValidateLabels checks a label set with the rules (and messages) of
// Pyroscope's ingest validation: at least one label, at most 30, a valid
// __name__, a non-empty service_name, valid names and values within the
// length limits, and no duplicate names. It sorts ls by name as the server
// does.
func ValidateLabels(ls []*typesv1.LabelPair) error {
	if len(ls) == 0 {
		return &ValidationError{"missing_labels", "error at least one label pair is required per profile"}
	}
	sort.SliceStable(ls, func(i, j int) bool {
		if ls[i].Name != ls[j].Name {
			return ls[i].Name < ls[j].Name
		}
		return ls[i].Value < ls[j].Value
	})
	str := LabelsString(ls)
	if len(ls) > MaxLabelNamesPerSeries {
		return &ValidationError{"max_label_names_per_series",
			fmt.Sprintf("profile series '%s' has %d label names; limit %d", str, len(ls), MaxLabelNamesPerSeries)}
	}
	if !IsValidMetricName(get(ls, MetricNameLabel)) {
		return &ValidationError{"invalid_labels", fmt.Sprintf("invalid labels '%s' with error: invalid metric name", str)}
	}
	if get(ls, schema.ServiceName) == "" {
		return &ValidationError{"missing_labels", fmt.Sprintf("invalid labels '%s' with error: service name is not provided", str)}
	}
	last := ""
	for _, l := range ls {
		switch {
		case len(l.Name) > MaxLabelNameLength:
			return &ValidationError{"label_name_too_long", fmt.Sprintf("profile with labels '%s' has label name too long: '%s'", str, l.Name)}
		case len(l.Value) > MaxLabelValueLength:
			return &ValidationError{"label_value_too_long", fmt.Sprintf("profile with labels '%s' has label value too long: '%s'", str, l.Value)}
		case !IsValidLabelName(l.Name):
			return &ValidationError{"invalid_labels", fmt.Sprintf("invalid labels '%s' with error: invalid label name '%s'", str, l.Name)}
		case !utf8.ValidString(l.Value):
			return &ValidationError{"invalid_labels", fmt.Sprintf("invalid labels '%s' with error: invalid label value '%s'", str, l.Value)}
		case l.Name == last:
			return &ValidationError{"duplicate_label_names", fmt.Sprintf("profile with labels '%s' has duplicate label name: '%s'", str, l.Name)}
		}
		last = l.Name
	}
	return nil
}

func get(ls []*typesv1.LabelPair, name string) string {
	for _, l := range ls {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// LabelsString formats labels as Pyroscope does in its messages:
// {a="1", b="2"}.
func LabelsString(ls []*typesv1.LabelPair) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range ls {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", l.Name, l.Value)
	}
	b.WriteByte('}')
	return b.String()
}

// IsValidLabelName reports whether n is a label name every Pyroscope and
// Prometheus version accepts unquoted: [a-zA-Z_][a-zA-Z0-9_]*.
func IsValidLabelName(n string) bool {
	if n == "" {
		return false
	}
	for i, c := range n {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// IsValidMetricName reports whether n is a classic Prometheus metric name:
// [a-zA-Z_:][a-zA-Z0-9_:]*.
func IsValidMetricName(n string) bool {
	if n == "" {
		return false
	}
	for i, c := range n {
		if !(c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
