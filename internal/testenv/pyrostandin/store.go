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
	tsMillis    int64
	period      int64
	stacks      []stackSample
}

func (p *profile) total() (t int64) {
	for _, s := range p.stacks {
		t += s.value
	}
	return t
}

type store struct {
	mu       sync.Mutex
	profiles []*profile
}

// validateLabels applies Pyroscope's ingest rules (and messages) to one
// series' labels, sorting them as the server does.
func validateLabels(in []*typesv1.LabelPair) (labelSet, error) {
	if len(in) == 0 {
		return nil, errors.New("error at least one label pair is required per profile")
	}
	ls := make(labelSet, len(in))
	for i, l := range in {
		ls[i] = label{l.GetName(), l.GetValue()}
	}
	sort.SliceStable(ls, func(i, j int) bool {
		if ls[i].name != ls[j].name {
			return ls[i].name < ls[j].name
		}
		return ls[i].value < ls[j].value
	})
	if len(ls) > maxLabelNamesPerSeries {
		return nil, fmt.Errorf("profile series '%s' has %d label names; limit %d", ls, len(ls), maxLabelNamesPerSeries)
	}
	if !validName(ls.get(lblName), true) {
		return nil, fmt.Errorf("invalid labels '%s' with error: invalid metric name", ls)
	}
	if ls.get(schema.ServiceName) == "" {
		return nil, fmt.Errorf("invalid labels '%s' with error: service name is not provided", ls)
	}
	last := ""
	for _, l := range ls {
		switch {
		case len(l.name) > maxLabelNameLength:
			return nil, fmt.Errorf("profile with labels '%s' has label name too long: '%s'", ls, l.name)
		case len(l.value) > maxLabelValueLength:
			return nil, fmt.Errorf("profile with labels '%s' has label value too long: '%s'", ls, l.value)
		case !validName(l.name, false):
			return nil, fmt.Errorf("invalid labels '%s' with error: invalid label name '%s'", ls, l.name)
		case !utf8.ValidString(l.value):
			return nil, fmt.Errorf("invalid labels '%s' with error: invalid label value '%s'", ls, l.value)
		case l.name == last:
			return nil, fmt.Errorf("profile with labels '%s' has duplicate label name: '%s'", ls, l.name)
		}
		last = l.name
	}
	return ls, nil
}

func validName(n string, metric bool) bool {
	if n == "" {
		return false
	}
	for i, c := range n {
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' || metric && c == ':'
		if !ok {
			return false
		}
	}
	return true
}

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

// ingest validates and decodes a whole push request before storing any of
// it, so that a rejected request leaves nothing behind, as on the server.
func ingest(req *pushv1.PushRequest) ([]*profile, error) {
	var out []*profile
	for _, s := range req.GetSeries() {
		ls, err := validateLabels(s.GetLabels())
		if err != nil {
			return nil, err
		}
		for _, raw := range s.GetSamples() {
			p, err := decodePprof(raw.GetRawProfile())
			if err != nil {
				return nil, fmt.Errorf("failed to parse profile with labels '%s': %v", ls, err)
			}
			ps, err := split(ls, p)
			if err != nil {
				return nil, err
			}
			out = append(out, ps...)
		}
	}
	return out, nil
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
	if ts == 0 {
		ts = time.Now().UnixNano()
	}
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
			pr := &profile{labels: full, profileType: id, tsMillis: ts / 1e6, period: p.Period}
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
	s.profiles = append(s.profiles, ps...)
}

// selectProfiles returns the profiles in [start, end] (ms; end 0 = no
// bound) of profile type pt ("" = any) that match any of sels (none = all).
func (s *store) selectProfiles(start, end int64, pt string, sels ...selector) []*profile {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*profile
	for _, p := range s.profiles {
		if p.tsMillis < start || end > 0 && p.tsMillis > end {
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
