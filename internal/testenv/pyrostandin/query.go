package pyrostandin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	googlev1 "github.com/grafana/pyroscope/api/gen/proto/go/google/v1"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/querier/v1/querierv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/schema"
)

// defaultMaxNodes is Pyroscope's max_flamegraph_nodes_default.
const defaultMaxNodes = 8192

// maxMaxNodes is Pyroscope's max_flamegraph_nodes_max.
const maxMaxNodes = 1 << 20

type querier struct {
	querierv1connect.UnimplementedQuerierServiceHandler
	st  *store
	lim *limits
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

// parseSelection validates the time range, profile type and label
// selector every Select* call carries, in the server's order and with its
// messages.
func (q *querier) parseSelection(start, end int64, profileType, labelSelector string) (string, selector, error) {
	if err := q.lim.checkRange(start, end); err != nil {
		return "", nil, err
	}
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

// querySelector parses the label_selector of the Select* calls.
func querySelector(in string) (selector, error) {
	sel, err := parseSelector(in)
	if err != nil {
		return nil, invalid("parsing label selector %q: %v", in, err)
	}
	return sel, nil
}

// labelQuery validates the range and matchers of LabelNames, LabelValues
// and Series, and returns the range those calls really see: whole blocks.
func (q *querier) labelQuery(start, end int64, ms []string) (int64, int64, []selector, error) {
	if err := q.lim.checkRange(start, end); err != nil {
		return 0, 0, nil, err
	}
	var out []selector
	for _, m := range ms {
		sel, err := parseSelector(m)
		if err != nil {
			return 0, 0, nil, invalid("parsing label selector: failed to parse label selector %q: %v", m, err)
		}
		out = append(out, sel)
	}
	lo, hi := q.lim.blockSpan(start, end)
	return lo, hi, out, nil
}

func (q *querier) ProfileTypes(_ context.Context, req *connect.Request[querierv1.ProfileTypesRequest]) (*connect.Response[querierv1.ProfileTypesResponse], error) {
	lo, hi, _, err := q.labelQuery(req.Msg.Start, req.Msg.End, nil)
	if err != nil {
		return nil, err
	}
	seen := map[string]*typesv1.ProfileType{}
	for _, p := range q.st.selectProfiles(lo, hi, "") {
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
	lo, hi, sels, err := q.labelQuery(req.Msg.Start, req.Msg.End, req.Msg.Matchers)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, p := range q.st.selectProfiles(lo, hi, "", sels...) {
		for _, l := range p.labels {
			if listed(l.name) {
				names[l.name] = true
			}
		}
	}
	return connect.NewResponse(&typesv1.LabelNamesResponse{Names: sortedKeys(names)}), nil
}

func (q *querier) LabelValues(_ context.Context, req *connect.Request[typesv1.LabelValuesRequest]) (*connect.Response[typesv1.LabelValuesResponse], error) {
	lo, hi, sels, err := q.labelQuery(req.Msg.Start, req.Msg.End, req.Msg.Matchers)
	if err != nil {
		return nil, err
	}
	values := map[string]bool{}
	for _, p := range q.st.selectProfiles(lo, hi, "", sels...) {
		if v := p.labels.get(req.Msg.Name); v != "" {
			values[v] = true
		}
	}
	return connect.NewResponse(&typesv1.LabelValuesResponse{Names: sortedKeys(values)}), nil
}

func (q *querier) Series(_ context.Context, req *connect.Request[querierv1.SeriesRequest]) (*connect.Response[querierv1.SeriesResponse], error) {
	lo, hi, sels, err := q.labelQuery(req.Msg.Start, req.Msg.End, req.Msg.Matchers)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range req.Msg.LabelNames {
		want[n] = true
	}
	sets := map[string]labelSet{}
	for _, p := range q.st.selectProfiles(lo, hi, "", sels...) {
		var ls labelSet
		for _, l := range p.labels {
			if listed(l.name) && (len(want) == 0 || want[l.name]) {
				ls = append(ls, l)
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

// SelectMergeStacktraces merges the call trees of the selected profiles.
// The server truncates each block's tree to max_nodes, then the merged
// tree, then (when the request names max_nodes) the answer once more; the
// stand-in's blocks are its pushes. Truncation keeps every node whose
// total reaches the max_nodes-th largest, ties included, and the folded
// "other" nodes count towards that cutoff, so a merged "other" can outgrow
// every real node.
func (q *querier) SelectMergeStacktraces(_ context.Context, req *connect.Request[querierv1.SelectMergeStacktracesRequest]) (*connect.Response[querierv1.SelectMergeStacktracesResponse], error) {
	root, err := q.selectTree(req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&querierv1.SelectMergeStacktracesResponse{Flamegraph: root.flamegraph()}), nil
}

// selectTree is SelectMergeStacktraces' tree, checked and truncated as
// the server does, before it is laid out.
func (q *querier) selectTree(m *querierv1.SelectMergeStacktracesRequest) (*node, error) {
	if err := q.lim.checkRange(m.Start, m.End); err != nil {
		return nil, err
	}
	maxNodes := int64(defaultMaxNodes)
	switch n := m.GetMaxNodes(); {
	case n > maxMaxNodes:
		return nil, invalid("max flamegraph nodes limit %d is greater than allowed %d", n, maxMaxNodes)
	case n < 0:
		return nil, invalid("max flamegraph nodes limit must be set (max allowed %d)", maxMaxNodes)
	case n > 0:
		maxNodes = n
	}
	pt, sel, err := q.parseSelection(m.Start, m.End, m.ProfileTypeID, m.LabelSelector)
	if err != nil {
		return nil, err
	}
	if m.Format == querierv1.ProfileFormat_PROFILE_FORMAT_TREE {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("the stand-in answers only in the flamegraph format"))
	}
	blocks := map[int]*node{}
	var order []int
	for _, p := range q.st.selectProfiles(m.Start, m.End, pt, sel) {
		b := blocks[p.segment]
		if b == nil {
			b = &node{name: "total"}
			blocks[p.segment] = b
			order = append(order, p.segment)
		}
		for _, s := range p.stacks {
			b.add(s.frames, s.value)
		}
	}
	root := &node{name: "total"}
	for _, seg := range order {
		b := blocks[seg]
		b.truncate(maxNodes)
		root.merge(b)
	}
	root.truncate(maxNodes)
	if n := m.GetMaxNodes(); n > 0 {
		root.truncate(n)
	}
	return root, nil
}

// SelectSeries answers as the server does: it reads the profiles in
// [start - step, end], and puts a point at start + k*step (k >= 0, up to
// end) that sums the profiles in (t - step, t] (the first point also takes
// those at start - step itself; profiles after the last point are left
// out). Empty steps have no point. Series carry the group-by labels in
// group-by order, and come largest total first (ties by labels). The
// server sums whatever aggregation is asked for.
func (q *querier) SelectSeries(_ context.Context, req *connect.Request[querierv1.SelectSeriesRequest]) (*connect.Response[querierv1.SelectSeriesResponse], error) {
	m := req.Msg
	if err := q.lim.checkRange(m.Start, m.End); err != nil {
		return nil, err
	}
	pt, err := parseProfileType(m.ProfileTypeID)
	if err != nil {
		return nil, err
	}
	if m.Step < 0.001 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errStep)
	}
	sel, err := querySelector(m.LabelSelector)
	if err != nil {
		return nil, err
	}
	stepMs := time.Duration(m.Step * float64(time.Second)).Milliseconds()
	type series struct {
		labels labelSet
		points map[int64]float64
		total  float64
	}
	groups := map[string]*series{}
	for _, p := range q.st.selectProfiles(m.Start-stepMs, m.End, pt, sel) {
		t := m.Start
		if ts := p.tsMillis(); ts > m.Start {
			t += (ts - m.Start + stepMs - 1) / stepMs * stepMs
		}
		if t > m.End {
			continue
		}
		var g labelSet
		for _, n := range m.GroupBy {
			if v := p.labels.get(n); v != "" && g.get(n) == "" {
				g = append(g, label{n, v})
			}
		}
		k := g.key()
		s := groups[k]
		if s == nil {
			s = &series{labels: g, points: map[int64]float64{}}
			groups[k] = s
		}
		v := float64(p.total())
		s.points[t] += v
		s.total += v
	}
	out := make([]*series, 0, len(groups))
	for _, s := range groups {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].total != out[j].total {
			return out[i].total > out[j].total
		}
		return out[i].labels.less(out[j].labels)
	})
	if m.Limit != nil && *m.Limit > 0 && int64(len(out)) > *m.Limit {
		out = out[:*m.Limit]
	}
	resp := &querierv1.SelectSeriesResponse{}
	for _, s := range out {
		ts := make([]int64, 0, len(s.points))
		for t := range s.points {
			ts = append(ts, t)
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		rs := &typesv1.Series{Labels: s.labels.pairs()}
		for _, t := range ts {
			rs.Points = append(rs.Points, &typesv1.Point{Timestamp: t, Value: s.points[t]})
		}
		resp.Series = append(resp.Series, rs)
	}
	return connect.NewResponse(resp), nil
}

func (q *querier) SelectMergeProfile(_ context.Context, req *connect.Request[querierv1.SelectMergeProfileRequest]) (*connect.Response[googlev1.Profile], error) {
	m := req.Msg
	pt, sel, err := q.parseSelection(m.Start, m.End, m.ProfileTypeID, m.LabelSelector)
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
		fid = uint64(len(b.p.Function) + 1) // #nosec G115 -- a length plus one, never negative
		b.p.Function = append(b.p.Function, &googlev1.Function{Id: fid, Name: name, SystemName: name, Filename: b.str(f.file)})
		b.funcs[fk] = fid
	}
	id := uint64(len(b.p.Location) + 1) // #nosec G115 -- a length plus one, never negative
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
	other       bool // named "other": the folded remainder of a parent's small children
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
		c = &node{name: frames[0].name, other: frames[0].name == "other"}
		n.children = append(n.children, c)
	}
	c.add(frames[1:], v)
}

// merge adds o's tree into n, node by name.
func (n *node) merge(o *node) {
	n.total += o.total
	n.self += o.self
	for _, oc := range o.children {
		var c *node
		for _, ch := range n.children {
			if ch.name == oc.name {
				c = ch
				break
			}
		}
		if c == nil {
			c = &node{name: oc.name, other: oc.other}
			n.children = append(n.children, c)
		}
		c.merge(oc)
	}
}

// truncate applies max_nodes as the server does: the cutoff is the
// maxNodes-th largest total among all nodes but the root ("other" nodes
// included); every node at or above it is kept, ties and all, and so is
// every "other"; each parent's remaining children are folded into its
// "other" child (which takes self = total).
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
		var other *node
		var rest int64
		for _, c := range x.children {
			switch {
			case c.other:
				other = c
			case c.total >= min:
				kept = append(kept, c)
				fold(c)
			default:
				rest += c.total
			}
		}
		if rest > 0 && other == nil {
			other = &node{name: "other", other: true}
		}
		if other != nil {
			other.total += rest
			other.self, other.children = other.total, nil
			kept = append(kept, other)
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
