package pyrostandin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"connectrpc.com/connect"
	googlev1 "github.com/grafana/pyroscope/api/gen/proto/go/google/v1"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/querier/v1/querierv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/schema"
)

// defaultMaxNodes is Pyroscope's max_flamegraph_nodes_default.
const defaultMaxNodes = 8192

type querier struct {
	querierv1connect.UnimplementedQuerierServiceHandler
	st *store
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// parseProfileType checks name:sample-type:sample-unit:period-type:period-unit[:delta].
func parseProfileType(id string) (string, error) {
	parts := strings.Split(id, ":")
	if len(parts) != 5 && len(parts) != 6 {
		return "", invalid("profile-type selection must be of the form <name>:<sample-type>:<sample-unit>:<period-type>:<period-unit>(:delta), got(%d): %q", len(parts), id)
	}
	return strings.Join(parts[:5], ":"), nil
}

// querySelector parses the label_selector of the Select* calls.
// parseSelection validates the profile type and label selector every
// Select* call carries, with the server's messages.
func parseSelection(profileType, labelSelector string) (string, selector, error) {
	pt, err := parseProfileType(profileType)
	if err != nil {
		return "", nil, err
	}
	sel, err := querySelector(labelSelector)
	if err != nil {
		return "", nil, err
	}
	return pt, sel, nil
}

func querySelector(in string) (selector, error) {
	sel, err := parseSelector(in)
	if err != nil {
		return nil, invalid("parsing label selector %q: %v", in, err)
	}
	return sel, nil
}

// matcherSelectors parses the matchers of LabelNames, LabelValues, Series.
func matcherSelectors(ms []string) ([]selector, error) {
	var out []selector
	for _, m := range ms {
		sel, err := parseSelector(m)
		if err != nil {
			return nil, invalid("parsing label selector: failed to parse label selector %q: %v", m, err)
		}
		out = append(out, sel)
	}
	return out, nil
}

func (q *querier) ProfileTypes(_ context.Context, req *connect.Request[querierv1.ProfileTypesRequest]) (*connect.Response[querierv1.ProfileTypesResponse], error) {
	seen := map[string]*typesv1.ProfileType{}
	for _, p := range q.st.selectProfiles(req.Msg.Start, req.Msg.End, "") {
		if _, ok := seen[p.profileType]; ok {
			continue
		}
		parts := strings.Split(p.profileType, ":")
		seen[p.profileType] = &typesv1.ProfileType{
			ID: p.profileType, Name: parts[0], SampleType: parts[1], SampleUnit: parts[2],
			PeriodType: parts[3], PeriodUnit: parts[4],
		}
	}
	resp := &querierv1.ProfileTypesResponse{}
	for _, pt := range seen {
		resp.ProfileTypes = append(resp.ProfileTypes, pt)
	}
	sort.Slice(resp.ProfileTypes, func(i, j int) bool { return resp.ProfileTypes[i].ID < resp.ProfileTypes[j].ID })
	return connect.NewResponse(resp), nil
}

func (q *querier) LabelNames(_ context.Context, req *connect.Request[typesv1.LabelNamesRequest]) (*connect.Response[typesv1.LabelNamesResponse], error) {
	sels, err := matcherSelectors(req.Msg.Matchers)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, p := range q.st.selectProfiles(req.Msg.Start, req.Msg.End, "", sels...) {
		for _, l := range p.labels {
			names[l.name] = true
		}
	}
	return connect.NewResponse(&typesv1.LabelNamesResponse{Names: sortedKeys(names)}), nil
}

func (q *querier) LabelValues(_ context.Context, req *connect.Request[typesv1.LabelValuesRequest]) (*connect.Response[typesv1.LabelValuesResponse], error) {
	sels, err := matcherSelectors(req.Msg.Matchers)
	if err != nil {
		return nil, err
	}
	values := map[string]bool{}
	for _, p := range q.st.selectProfiles(req.Msg.Start, req.Msg.End, "", sels...) {
		if v := p.labels.get(req.Msg.Name); v != "" {
			values[v] = true
		}
	}
	return connect.NewResponse(&typesv1.LabelValuesResponse{Names: sortedKeys(values)}), nil
}

func (q *querier) Series(_ context.Context, req *connect.Request[querierv1.SeriesRequest]) (*connect.Response[querierv1.SeriesResponse], error) {
	sels, err := matcherSelectors(req.Msg.Matchers)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range req.Msg.LabelNames {
		want[n] = true
	}
	sets := map[string]labelSet{}
	for _, p := range q.st.selectProfiles(req.Msg.Start, req.Msg.End, "", sels...) {
		ls := p.labels
		if len(want) > 0 {
			ls = nil
			for _, l := range p.labels {
				if want[l.name] {
					ls = append(ls, l)
				}
			}
		}
		sets[ls.key()] = ls
	}
	resp := &querierv1.SeriesResponse{}
	for _, ls := range sortedSets(sets) {
		resp.LabelsSet = append(resp.LabelsSet, &typesv1.Labels{Labels: ls.pairs()})
	}
	return connect.NewResponse(resp), nil
}

func (q *querier) SelectMergeStacktraces(_ context.Context, req *connect.Request[querierv1.SelectMergeStacktracesRequest]) (*connect.Response[querierv1.SelectMergeStacktracesResponse], error) {
	m := req.Msg
	pt, sel, err := parseSelection(m.ProfileTypeID, m.LabelSelector)
	if err != nil {
		return nil, err
	}
	if m.Format == querierv1.ProfileFormat_PROFILE_FORMAT_TREE {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("the stand-in answers only in the flamegraph format"))
	}
	maxNodes := int64(defaultMaxNodes)
	if m.MaxNodes != nil && *m.MaxNodes > 0 {
		maxNodes = *m.MaxNodes
	}
	root := &node{name: "total"}
	for _, p := range q.st.selectProfiles(m.Start, m.End, pt, sel) {
		for _, s := range p.stacks {
			root.add(s.frames, s.value)
		}
	}
	root.truncate(maxNodes)
	return connect.NewResponse(&querierv1.SelectMergeStacktracesResponse{Flamegraph: root.flamegraph()}), nil
}

func (q *querier) SelectSeries(_ context.Context, req *connect.Request[querierv1.SelectSeriesRequest]) (*connect.Response[querierv1.SelectSeriesResponse], error) {
	m := req.Msg
	pt, sel, err := parseSelection(m.ProfileTypeID, m.LabelSelector)
	if err != nil {
		return nil, err
	}
	if m.Step <= 0 {
		return nil, invalid("step must be positive")
	}
	stepMs := int64(math.Round(m.Step * 1000))
	avg := m.Aggregation != nil && *m.Aggregation == typesv1.TimeSeriesAggregationType_TIME_SERIES_AGGREGATION_TYPE_AVERAGE
	type bucket struct {
		sum float64
		n   int
	}
	groups := map[string]labelSet{}
	points := map[string]map[int64]*bucket{}
	for _, p := range q.st.selectProfiles(m.Start, m.End, pt, sel) {
		var g labelSet
		for _, n := range m.GroupBy {
			if v := p.labels.get(n); v != "" {
				g = append(g, label{n, v})
			}
		}
		sort.Slice(g, func(i, j int) bool { return g[i].name < g[j].name })
		k := g.key()
		groups[k] = g
		if points[k] == nil {
			points[k] = map[int64]*bucket{}
		}
		// A point at t sums the profiles with a timestamp in (t-step, t].
		steps := (p.tsMillis - m.Start + stepMs - 1) / stepMs
		t := m.Start + steps*stepMs
		b := points[k][t]
		if b == nil {
			b = &bucket{}
			points[k][t] = b
		}
		b.sum += float64(p.total())
		b.n++
	}
	keys := make([]string, 0, len(groups))
	totals := map[string]float64{}
	for k := range groups {
		keys = append(keys, k)
		for _, b := range points[k] {
			totals[k] += b.sum
		}
	}
	if m.Limit != nil && *m.Limit > 0 && int64(len(keys)) > *m.Limit {
		sort.Slice(keys, func(i, j int) bool { return totals[keys[i]] > totals[keys[j]] })
		keys = keys[:*m.Limit]
	}
	// By labels; the group of series without any group-by label last.
	sort.Slice(keys, func(i, j int) bool {
		a, b := groups[keys[i]], groups[keys[j]]
		if len(a) == 0 || len(b) == 0 {
			return len(b) == 0 && len(a) != 0
		}
		return a.less(b)
	})
	resp := &querierv1.SelectSeriesResponse{}
	for _, k := range keys {
		s := &typesv1.Series{Labels: groups[k].pairs()}
		ts := make([]int64, 0, len(points[k]))
		for t := range points[k] {
			ts = append(ts, t)
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		for _, t := range ts {
			b := points[k][t]
			v := b.sum
			if avg {
				v /= float64(b.n)
			}
			s.Points = append(s.Points, &typesv1.Point{Timestamp: t, Value: v})
		}
		resp.Series = append(resp.Series, s)
	}
	return connect.NewResponse(resp), nil
}

func (q *querier) SelectMergeProfile(_ context.Context, req *connect.Request[querierv1.SelectMergeProfileRequest]) (*connect.Response[googlev1.Profile], error) {
	m := req.Msg
	pt, sel, err := parseSelection(m.ProfileTypeID, m.LabelSelector)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(pt, ":")
	b := newPprofBuilder()
	out := b.p
	out.SampleType = []*googlev1.ValueType{{Type: b.str(parts[1]), Unit: b.str(parts[2])}}
	out.PeriodType = &googlev1.ValueType{Type: b.str(parts[3]), Unit: b.str(parts[4])}
	out.TimeNanos = m.End * 1e6
	out.Mapping = []*googlev1.Mapping{{Id: 1}}
	samples := map[string]*googlev1.Sample{}
	for _, p := range q.st.selectProfiles(m.Start, m.End, pt, sel) {
		if p.period > out.Period {
			out.Period = p.period
		}
		for _, s := range p.stacks {
			ids := make([]uint64, len(s.frames))
			for i, f := range s.frames {
				ids[len(s.frames)-1-i] = b.location(f)
			}
			k := fmt.Sprint(ids)
			if sm, ok := samples[k]; ok {
				sm.Value[0] += s.value
				continue
			}
			sm := &googlev1.Sample{LocationId: ids, Value: []int64{s.value}}
			samples[k] = sm
			out.Sample = append(out.Sample, sm)
		}
	}
	// The real server reports CPU time profiles with a period of one second.
	if parts[0] == schema.ProcessCPU.Name && parts[2] == "nanoseconds" {
		out.Period = 1e9
	}
	out.DefaultSampleType = out.SampleType[0].Type
	return connect.NewResponse(out), nil
}

type pprofBuilder struct {
	p     *googlev1.Profile
	strs  map[string]int64
	funcs map[[2]string]uint64
	locs  map[frame]uint64
}

func newPprofBuilder() *pprofBuilder {
	return &pprofBuilder{p: &googlev1.Profile{StringTable: []string{""}},
		strs: map[string]int64{"": 0}, funcs: map[[2]string]uint64{}, locs: map[frame]uint64{}}
}

func (b *pprofBuilder) str(s string) int64 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	b.p.StringTable = append(b.p.StringTable, s)
	b.strs[s] = int64(len(b.p.StringTable) - 1)
	return b.strs[s]
}

func (b *pprofBuilder) location(f frame) uint64 {
	if id, ok := b.locs[f]; ok {
		return id
	}
	fk := [2]string{f.name, f.file}
	fid, ok := b.funcs[fk]
	if !ok {
		name := b.str(f.name)
		fid = uint64(len(b.p.Function) + 1)
		b.p.Function = append(b.p.Function, &googlev1.Function{Id: fid, Name: name, SystemName: name, Filename: b.str(f.file)})
		b.funcs[fk] = fid
	}
	id := uint64(len(b.p.Location) + 1)
	b.p.Location = append(b.p.Location, &googlev1.Location{Id: id, MappingId: 1, Address: f.addr,
		Line: []*googlev1.Line{{FunctionId: fid, Line: f.line}}})
	b.locs[f] = id
	return id
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedSets(m map[string]labelSet) []labelSet {
	out := make([]labelSet, 0, len(m))
	for _, ls := range m {
		out = append(out, ls)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].less(out[j]) })
	return out
}

// node is a call tree node merged by function name, as flame graphs are.
type node struct {
	name        string
	self, total int64
	children    []*node
	other       bool // the folded remainder of a parent's small children
}

func (n *node) add(frames []frame, v int64) {
	n.total += v
	if len(frames) == 0 {
		n.self += v
		return
	}
	var c *node
	for _, ch := range n.children {
		if ch.name == frames[0].name {
			c = ch
			break
		}
	}
	if c == nil {
		c = &node{name: frames[0].name}
		n.children = append(n.children, c)
	}
	c.add(frames[1:], v)
}

// truncate keeps the maxNodes largest nodes (the root not counted, ties
// kept) and folds, per parent, the children below them into one "other".
func (n *node) truncate(maxNodes int64) {
	var totals []int64
	var walk func(*node)
	walk = func(x *node) {
		for _, c := range x.children {
			totals = append(totals, c.total)
			walk(c)
		}
	}
	walk(n)
	if int64(len(totals)) <= maxNodes {
		return
	}
	sort.Slice(totals, func(i, j int) bool { return totals[i] > totals[j] })
	min := totals[maxNodes-1]
	var fold func(*node)
	fold = func(x *node) {
		var kept []*node
		var rest int64
		for _, c := range x.children {
			if c.total >= min {
				kept = append(kept, c)
				fold(c)
			} else {
				rest += c.total
			}
		}
		if rest > 0 {
			kept = append(kept, &node{name: "other", self: rest, total: rest, other: true})
		}
		x.children = kept
	}
	fold(n)
}

// flamegraph lays the tree out as Pyroscope's level format: per depth, a
// flat list of [x offset, total, self, name index] boxes, left to right,
// where the offset is relative to the end of the previous box on the level.
// Within a box the node's self time comes first, then its children by name,
// the folded "other" last.
func (n *node) flamegraph() *querierv1.FlameGraph {
	fg := &querierv1.FlameGraph{Total: n.total}
	idx := map[string]int64{}
	// Names in depth-first order, heaviest child first.
	var name func(*node)
	name = func(x *node) {
		if _, ok := idx[x.name]; !ok {
			idx[x.name] = int64(len(fg.Names))
			fg.Names = append(fg.Names, x.name)
		}
		cs := append([]*node(nil), x.children...)
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].total > cs[j].total })
		for _, c := range cs {
			name(c)
		}
	}
	name(n)
	var ends []int64 // per level, end of the last box
	var layout func(x *node, depth int, start int64)
	layout = func(x *node, depth int, start int64) {
		if depth == len(fg.Levels) {
			fg.Levels = append(fg.Levels, &querierv1.Level{})
			ends = append(ends, 0)
		}
		lv := fg.Levels[depth]
		lv.Values = append(lv.Values, start-ends[depth], x.total, x.self, idx[x.name])
		ends[depth] = start + x.total
		if x.self > fg.MaxSelf {
			fg.MaxSelf = x.self
		}
		cs := append([]*node(nil), x.children...)
		sort.SliceStable(cs, func(i, j int) bool {
			if cs[i].other != cs[j].other {
				return cs[j].other
			}
			return cs[i].name < cs[j].name
		})
		pos := start + x.self
		for _, c := range cs {
			layout(c, depth+1, pos)
			pos += c.total
		}
	}
	layout(n, 0, 0)
	return fg
}
