package pyrostandin

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	googlev1 "github.com/grafana/pyroscope/api/gen/proto/go/google/v1"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/schema"
)

// Labels that Pyroscope adds to every series at ingest; they show up in
// LabelNames and Series answers.
const (
	lblName        = "__name__"
	lblPeriodType  = "__period_type__"
	lblPeriodUnit  = "__period_unit__"
	lblProfileType = "__profile_type__"
	lblServiceName = "__service_name__"
	lblType        = "__type__"
	lblUnit        = "__unit__"
)

// Pyroscope's default ingest limits.
const (
	maxLabelNamesPerSeries = 30
	maxLabelNameLength     = 1024
	maxLabelValueLength    = 2048
)

type label struct{ name, value string }

// labelSet is sorted by name.
type labelSet []label

func (ls labelSet) get(name string) string {
	for _, l := range ls {
		if l.name == name {
			return l.value
		}
	}
	return ""
}

func (ls labelSet) key() string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.name)
		b.WriteByte(0)
		b.WriteString(l.value)
		b.WriteByte(0)
	}
	return b.String()
}

func (ls labelSet) pairs() []*typesv1.LabelPair {
	if len(ls) == 0 {
		return nil
	}
	out := make([]*typesv1.LabelPair, len(ls))
	for i, l := range ls {
		out[i] = &typesv1.LabelPair{Name: l.name, Value: l.value}
	}
	return out
}

// less orders label sets pairwise by name, then value; a prefix first.
func (ls labelSet) less(o labelSet) bool {
	for i := 0; i < len(ls) && i < len(o); i++ {
		if ls[i].name != o[i].name {
			return ls[i].name < o[i].name
		}
		if ls[i].value != o[i].value {
			return ls[i].value < o[i].value
		}
	}
	return len(ls) < len(o)
}

func (ls labelSet) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range ls {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", l.name, l.value)
	}
	b.WriteByte('}')
	return b.String()
}

type frame struct {
	name, file string
	line       int64
	addr       uint64
}

type stackSample struct {
	frames []frame // root first
	value  int64
}

// profile is one sample type of one pushed pprof.
type profile struct {
	labels      labelSet // user labels plus the server's __*__ labels
	profileType string   // name:sample-type:sample-unit:period-type:period-unit
	tsNanos     int64
	segment     int // the push that brought it: the server's unit of truncation
	period      int64
	stacks      []stackSample
}

func (p *profile) tsMillis() int64 { return p.tsNanos / 1e6 }

func (p *profile) total() (t int64) {
	for _, s := range p.stacks {
		t += s.value
	}
	return t
}

type store struct {
	mu       sync.Mutex
	profiles []*profile
	segments int
}

// unknownService is what the server names a series pushed without a
// service_name.
const unknownService = "unknown_service"

// validateLabels applies Pyroscope's ingest rules (and messages) to one
// series' labels, sorted as the server sorts them. Label names are checked
// as UTF-8 (the server's default, -validation.disable-label-sanitization),
// so dotted or dashed names pass.
func validateLabels(ls labelSet) error {
	if len(ls) == 0 {
		return errors.New("error at least one label pair is required per profile")
	}
	if len(ls) > maxLabelNamesPerSeries {
		return fmt.Errorf("profile series '%s' has %d label names; limit %d", ls, len(ls), maxLabelNamesPerSeries)
	}
	if !model.UTF8Validation.IsValidMetricName(ls.get(lblName)) {
		return fmt.Errorf("invalid labels '%s' with error: invalid metric name", ls)
	}
	if ls.get(schema.ServiceName) == "" {
		return fmt.Errorf("invalid labels '%s' with error: service name is not provided", ls)
	}
	last := ""
	for _, l := range ls {
		switch {
		case len(l.name) > maxLabelNameLength:
			return fmt.Errorf("profile with labels '%s' has label name too long: '%s'", ls, l.name)
		case len(l.value) > maxLabelValueLength:
			return fmt.Errorf("profile with labels '%s' has label value too long: '%s'", ls, l.value)
		case !model.UTF8Validation.IsValidLabelName(l.name):
			return fmt.Errorf("invalid labels '%s' with error: invalid label name '%s'", ls, l.name)
		case !utf8.ValidString(l.value):
			return fmt.Errorf("invalid labels '%s' with error: invalid label value '%s'", ls, l.value)
		case l.name == last:
			return fmt.Errorf("profile with labels '%s' has duplicate label name: '%s'", ls, l.name)
		}
		last = l.name
	}
	return nil
}

// seriesLabels are a pushed series' labels as the server first sees them:
// a missing (or empty) service_name becomes unknown_service, and the set
// is sorted.
func seriesLabels(in []*typesv1.LabelPair) labelSet {
	ls := make(labelSet, 0, len(in)+1)
	for _, l := range in {
		ls = append(ls, label{l.GetName(), l.GetValue()})
	}
	if ls.get(schema.ServiceName) == "" {
		ls = append(ls, label{schema.ServiceName, unknownService})
	}
	sort.SliceStable(ls, func(i, j int) bool {
		if ls[i].name != ls[j].name {
			return ls[i].name < ls[j].name
		}
		return ls[i].value < ls[j].value
	})
	return ls
}

// withoutEmpty drops labels with an empty value: the server stores a
// series without them.
func withoutEmpty(ls labelSet) labelSet {
	out := ls[:0:0]
	for _, l := range ls {
		if l.value != "" {
			out = append(out, l)
		}
	}
	return out
}

// listed reports whether a label name shows up in LabelNames and Series
// answers: names outside the classic Prometheus alphabet (dots, dashes)
// are stored and matched but not listed.
func listed(name string) bool { return model.LabelName(name).IsValidLegacy() }

// decodePprof accepts a gzipped or plain pprof protobuf.
func decodePprof(raw []byte) (*googlev1.Profile, error) {
	if len(raw) >= 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(io.LimitReader(zr, 256<<20))
		if err != nil {
			return nil, err
		}
		raw = b
	}
	p := &googlev1.Profile{}
	if err := proto.Unmarshal(raw, p); err != nil {
		return nil, err
	}
	return p, nil
}

// ingest validates and decodes each (series, profile) of a push on its
// own, as the server does: it returns what is valid, and the first error
// of the rest. The order of the checks is the server's: the profile must
// decode, then lie in the ingestion window, then carry valid labels.
func ingest(req *pushv1.PushRequest, w window, now time.Time) ([]*profile, error) {
	var out []*profile
	var first error
	fail := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, s := range req.GetSeries() {
		ls := seriesLabels(s.GetLabels())
		for _, raw := range s.GetSamples() {
			p, err := decodePprof(raw.GetRawProfile())
			if err != nil {
				fail(fmt.Errorf("failed to parse profile with labels '%s': %v", ls, err))
				continue
			}
			if p.TimeNanos > 0 {
				if err := w.check(p.TimeNanos, ls); err != nil {
					fail(err)
					continue
				}
			} else {
				p.TimeNanos = now.UnixNano()
			}
			if err := validateLabels(ls); err != nil {
				fail(err)
				continue
			}
			ps, err := split(withoutEmpty(ls), p)
			if err != nil {
				fail(err)
				continue
			}
			out = append(out, ps...)
		}
	}
	return out, first
}

// split turns a pprof into one profile per sample type, as Pyroscope stores
// one series per profile type.
func split(ls labelSet, p *googlev1.Profile) ([]*profile, error) {
	str := func(i int64) (string, error) {
		if i < 0 || i >= int64(len(p.StringTable)) {
			return "", fmt.Errorf("malformed profile: string index %d out of range", i)
		}
		return p.StringTable[i], nil
	}
	locs := map[uint64]*googlev1.Location{}
	for _, l := range p.Location {
		if l.Id == 0 {
			return nil, errors.New("malformed profile: location id is 0")
		}
		locs[l.Id] = l
	}
	funcs := map[uint64]*googlev1.Function{}
	for _, f := range p.Function {
		if f.Id == 0 {
			return nil, errors.New("malformed profile: function id is 0")
		}
		funcs[f.Id] = f
	}
	var periodType, periodUnit string
	if p.PeriodType != nil {
		var err error
		if periodType, err = str(p.PeriodType.Type); err != nil {
			return nil, err
		}
		if periodUnit, err = str(p.PeriodType.Unit); err != nil {
			return nil, err
		}
	}
	ts := p.TimeNanos
	// Stacks once, shared by every sample type.
	stacks := make([][]frame, len(p.Sample))
	for i, s := range p.Sample {
		var fr []frame
		for j := len(s.LocationId) - 1; j >= 0; j-- {
			l, ok := locs[s.LocationId[j]]
			if !ok {
				return nil, fmt.Errorf("malformed profile: unknown location %d", s.LocationId[j])
			}
			// Line[0] is the innermost inlined call; the last is the caller.
			for k := len(l.Line) - 1; k >= 0; k-- {
				f, ok := funcs[l.Line[k].FunctionId]
				if !ok {
					return nil, fmt.Errorf("malformed profile: unknown function %d", l.Line[k].FunctionId)
				}
				name, err := str(f.Name)
				if err != nil {
					return nil, err
				}
				file, err := str(f.Filename)
				if err != nil {
					return nil, err
				}
				fr = append(fr, frame{name: name, file: file, line: l.Line[k].Line, addr: l.Address})
			}
		}
		stacks[i] = fr
	}
	// Pyroscope turns pprof sample labels into series labels: one series
	// per distinct sample label set (a series label of the same name wins).
	groupOf := make([]string, len(p.Sample))
	groupLabels := map[string]labelSet{}
	var groups []string
	for i, smp := range p.Sample {
		extra := labelSet{}
		for _, l := range smp.Label {
			if l.Str == 0 {
				continue // numeric labels stay in the profile
			}
			k, err := str(l.Key)
			if err != nil {
				return nil, err
			}
			v, err := str(l.Str)
			if err != nil {
				return nil, err
			}
			if ls.get(k) == "" && v != "" {
				extra = append(extra, label{k, v})
			}
		}
		sort.Slice(extra, func(a, b int) bool { return extra[a].name < extra[b].name })
		key := extra.key()
		if _, ok := groupLabels[key]; !ok {
			groupLabels[key] = extra
			groups = append(groups, key)
		}
		groupOf[i] = key
	}
	name := ls.get(lblName)
	var out []*profile
	for _, g := range groups {
		for ti, st := range p.SampleType {
			typ, err := str(st.Type)
			if err != nil {
				return nil, err
			}
			unit, err := str(st.Unit)
			if err != nil {
				return nil, err
			}
			id := strings.Join([]string{name, typ, unit, periodType, periodUnit}, ":")
			full := append(labelSet{}, ls...)
			full = append(full, groupLabels[g]...)
			full = append(full,
				label{lblPeriodType, periodType}, label{lblPeriodUnit, periodUnit},
				label{lblProfileType, id}, label{lblServiceName, ls.get(schema.ServiceName)},
				label{lblType, typ}, label{lblUnit, unit})
			sort.Slice(full, func(i, j int) bool { return full[i].name < full[j].name })
			pr := &profile{labels: full, profileType: id, tsNanos: ts, period: p.Period}
			for i, smp := range p.Sample {
				if groupOf[i] == g && ti < len(smp.Value) && smp.Value[ti] != 0 {
					pr.stacks = append(pr.stacks, stackSample{frames: stacks[i], value: smp.Value[ti]})
				}
			}
			out = append(out, pr)
		}
	}
	return out, nil
}

func (s *store) add(ps []*profile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.segments++
	for _, p := range ps {
		p.segment = s.segments
	}
	s.profiles = append(s.profiles, ps...)
}

// selectProfiles returns the profiles of profile type pt ("" = any) that
// match any of sels (none = all) and whose timestamp lies in [start, end]
// (ms, both inclusive, compared in nanoseconds as the server does).
func (s *store) selectProfiles(start, end int64, pt string, sels ...selector) []*profile {
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi := start*1e6, end*1e6
	var out []*profile
	for _, p := range s.profiles {
		if p.tsNanos < lo || p.tsNanos > hi {
			continue
		}
		if pt != "" && p.profileType != pt {
			continue
		}
		if len(sels) > 0 {
			ok := false
			for _, sel := range sels {
				if sel.matches(p.labels) {
					ok = true
					break
				}
			}
			if !ok {
				continue
			}
		}
		out = append(out, p)
	}
	return out
}
