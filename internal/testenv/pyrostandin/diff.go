package pyrostandin

import (
	"context"
	"sort"

	"connectrpc.com/connect"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"google.golang.org/protobuf/proto"
)

// Diff answers as the server's query frontend does: max_nodes is the
// larger of the two sides' (0: max_flamegraph_nodes_default), refused
// over max_flamegraph_nodes_max; each side is then a
// SelectMergeStacktraces with that max_nodes, its checks and messages
// included (a side's error is the call's, the left's first), and the two
// trees are laid over one another (diffFlamegraph).
func (q *querier) Diff(_ context.Context, req *connect.Request[querierv1.DiffRequest]) (*connect.Response[querierv1.DiffResponse], error) {
	maxNodes := max(req.Msg.Left.GetMaxNodes(), req.Msg.Right.GetMaxNodes())
	switch {
	case maxNodes == 0:
		maxNodes = defaultMaxNodes
	case maxNodes > maxMaxNodes:
		return nil, invalid("max flamegraph nodes limit %d is greater than allowed %d", maxNodes, maxMaxNodes)
	}
	var trees [2]*node
	for i, side := range []*querierv1.SelectMergeStacktracesRequest{req.Msg.Left, req.Msg.Right} {
		m := &querierv1.SelectMergeStacktracesRequest{}
		if side != nil {
			m = proto.Clone(side).(*querierv1.SelectMergeStacktracesRequest)
		}
		m.MaxNodes = &maxNodes
		t, err := q.selectTree(m)
		if err != nil {
			return nil, err
		}
		trees[i] = t
	}
	return connect.NewResponse(&querierv1.DiffResponse{Flamegraph: diffFlamegraph(trees[0], trees[1], maxNodes)}), nil
}

// pair is a node of both trees at once; a side that lacks it has a node
// of its name with nothing.
type pair struct {
	name string
	l, r *node
	kids []*pair
}

// combine aligns two trees: each node's children of either side, by name
// in byte order, as the server's trees keep them.
func combine(name string, l, r *node) *pair {
	p := &pair{name: name, l: l, r: r}
	ls, rs := byName(l.children), byName(r.children)
	for len(ls) > 0 || len(rs) > 0 {
		switch {
		case len(rs) == 0 || len(ls) > 0 && ls[0].name < rs[0].name:
			p.kids = append(p.kids, combine(ls[0].name, ls[0], &node{name: ls[0].name}))
			ls = ls[1:]
		case len(ls) == 0 || rs[0].name < ls[0].name:
			p.kids = append(p.kids, combine(rs[0].name, &node{name: rs[0].name}, rs[0]))
			rs = rs[1:]
		default:
			p.kids = append(p.kids, combine(ls[0].name, ls[0], rs[0]))
			ls, rs = ls[1:], rs[1:]
		}
	}
	return p
}

func byName(ns []*node) []*node {
	out := append([]*node(nil), ns...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// diffFlamegraph lays two trees over one another as the server's
// NewFlamegraphDiff does. Each tree's root becomes a root of no self
// holding its top frames. Where the combined tree has more than maxNodes
// nodes (the root counted), the cutoff is the maxNodes-th largest of each
// node's larger side: a parent's children under it on both sides fold
// into one "other" child (self = total on each side) after the children
// kept. Each box is [left x, left total, left self, right x, right total,
// right self, name], each x relative to the end of the previous box of
// its side on the level, and a node's children start after its self
// value. Names are numbered in the order the server meets them: depth
// first, a parent's "other" and then its last child first.
func diffFlamegraph(left, right *node, maxNodes int64) *querierv1.FlameGraphDiff {
	root := combine("", fakeRoot(left), fakeRoot(right))
	var min int64
	if n := countPairs(root); maxNodes > 0 && int64(n) > maxNodes {
		var larger []int64
		walkPairs(root, func(p *pair) { larger = append(larger, max(p.l.total, p.r.total)) })
		sort.Slice(larger, func(i, j int) bool { return larger[i] > larger[j] })
		min = larger[maxNodes-1]
	}
	// kept is a pair's children as laid out: those that reach min on either
	// side, then the folded rest.
	kept := func(p *pair) []*pair {
		var out []*pair
		other := &pair{name: "other", l: &node{name: "other"}, r: &node{name: "other"}}
		for _, k := range p.kids {
			if k.l.total >= min || k.r.total >= min {
				out = append(out, k)
				continue
			}
			other.l.total += k.l.total
			other.r.total += k.r.total
		}
		if other.l.total != 0 || other.r.total != 0 {
			other.l.self, other.r.self = other.l.total, other.r.total
			out = append(out, other)
		}
		return out
	}
	fd := &querierv1.FlameGraphDiff{LeftTicks: root.l.total, RightTicks: root.r.total, Total: root.l.total + root.r.total}
	idx := map[string]int64{}
	var number func(p *pair)
	number = func(p *pair) {
		if _, ok := idx[p.name]; !ok {
			idx[p.name] = int64(len(fd.Names))
			name := p.name
			if len(fd.Names) == 0 {
				name = "total"
			}
			fd.Names = append(fd.Names, name)
		}
		ks := kept(p)
		for i := len(ks) - 1; i >= 0; i-- {
			number(ks[i])
		}
	}
	number(root)
	var endL, endR []int64 // per level, end of each side's last box
	var layout func(p *pair, depth int, xl, xr int64)
	layout = func(p *pair, depth int, xl, xr int64) {
		if depth == len(fd.Levels) {
			fd.Levels = append(fd.Levels, &querierv1.Level{})
			endL, endR = append(endL, 0), append(endR, 0)
		}
		lv := fd.Levels[depth]
		lv.Values = append(lv.Values, xl-endL[depth], p.l.total, p.l.self, xr-endR[depth], p.r.total, p.r.self, idx[p.name])
		endL[depth], endR[depth] = xl+p.l.total, xr+p.r.total
		fd.MaxSelf = max(fd.MaxSelf, p.l.self, p.r.self)
		xl, xr = xl+p.l.self, xr+p.r.self
		for _, k := range kept(p) {
			layout(k, depth+1, xl, xr)
			xl, xr = xl+k.l.total, xr+k.r.total
		}
	}
	layout(root, 0, 0, 0)
	return fd
}

// fakeRoot is what the server diffs a tree as: a root of no self above
// its top frames, of their total.
func fakeRoot(t *node) *node {
	r := &node{children: t.children}
	for _, c := range t.children {
		r.total += c.total
	}
	return r
}

func countPairs(p *pair) (n int) {
	walkPairs(p, func(*pair) { n++ })
	return n
}

func walkPairs(p *pair, fn func(*pair)) {
	fn(p)
	for _, k := range p.kids {
		walkPairs(k, fn)
	}
}
