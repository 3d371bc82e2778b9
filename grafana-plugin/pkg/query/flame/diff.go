package flame

import (
	"errors"
	"fmt"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
)

// Diff is two call trees laid over one another, node by node, as
// Pyroscope's Diff call lays them (querier.v1 FlameGraphDiff) and
// Grafana's flame graph panel draws them: every node of either tree has
// its row, with zeros on the side that lacks it. Rows are in nested-set
// order, children by name, a parent's folded "other" after them.
type Diff struct {
	Levels           []int64
	Labels           []string
	Left, LeftSelf   []int64
	Right, RightSelf []int64
}

// dnode is a node of both trees at once.
type dnode struct {
	name         string
	l, ls, r, rs int64
	kids         []int32
}

// NewDiff lays left over right as Pyroscope does: children aligned by
// name, then, when the combined tree has more than maxNodes nodes (the
// root counted), every node whose larger side stays under the
// maxNodes-th largest such value is folded, on both sides, into an
// "other" child of its parent (self = total). maxNodes <= 0 keeps every
// node.
func NewDiff(left, right *Tree, maxNodes int) Diff {
	nodes := []dnode{{name: RootName}}
	lo, lk := left.children()
	ro, rk := right.children()
	side := func(t *Tree, id int32) (total, self int64) {
		if id < 0 {
			return 0, 0
		}
		return t.nodes[id].total, t.nodes[id].self
	}
	var align func(at, l, r int32)
	align = func(at, l, r int32) {
		n := &nodes[at]
		n.l, n.ls = side(left, l)
		n.r, n.rs = side(right, r)
		var ls, rs []int32
		if l >= 0 {
			ls = lk[lo[l]:lo[l+1]]
		}
		if r >= 0 {
			rs = rk[ro[r]:ro[r+1]]
		}
		// Both lists are sorted by name: merge them.
		for len(ls) > 0 || len(rs) > 0 {
			a, b := int32(-1), int32(-1)
			var name string
			switch {
			case len(rs) == 0 || len(ls) > 0 && left.names[left.nodes[ls[0]].name] < right.names[right.nodes[rs[0]].name]:
				a, name, ls = ls[0], left.names[left.nodes[ls[0]].name], ls[1:]
			case len(ls) == 0 || right.names[right.nodes[rs[0]].name] < left.names[left.nodes[ls[0]].name]:
				b, name, rs = rs[0], right.names[right.nodes[rs[0]].name], rs[1:]
			default:
				a, b, name, ls, rs = ls[0], rs[0], left.names[left.nodes[ls[0]].name], ls[1:], rs[1:]
			}
			id := int32(len(nodes)) // #nosec G115 -- at most the two trees' nodes, each under maxIDs
			nodes = append(nodes, dnode{name: name})
			nodes[at].kids = append(nodes[at].kids, id)
			align(id, a, b)
		}
	}
	align(0, 0, 0)
	var min int64
	if maxNodes > 0 && len(nodes) > maxNodes {
		larger := make([]int64, len(nodes))
		for i, n := range nodes {
			larger[i] = max(n.l, n.r)
		}
		min = kthLargest(larger, maxNodes)
	}
	return diffRows(nodes, min)
}

// diffRows lays the nodes out depth first from nodes[0], keeping the
// children that reach min on either side and folding the others into an
// "other" child.
func diffRows(nodes []dnode, min int64) Diff {
	var d Diff
	row := func(level int, n dnode) {
		d.Levels = append(d.Levels, int64(level))
		d.Labels = append(d.Labels, n.name)
		d.Left, d.LeftSelf = append(d.Left, n.l), append(d.LeftSelf, n.ls)
		d.Right, d.RightSelf = append(d.Right, n.r), append(d.RightSelf, n.rs)
	}
	var visit func(id int32, level int)
	visit = func(id int32, level int) {
		n := nodes[id]
		row(level, n)
		var other dnode
		for _, k := range n.kids {
			c := nodes[k]
			if c.l >= min || c.r >= min {
				visit(k, level+1)
				continue
			}
			other.l += c.l
			other.r += c.r
		}
		if other.l != 0 || other.r != 0 {
			other.name, other.ls, other.rs = OtherName, other.l, other.r
			row(level+1, other)
		}
	}
	visit(0, 0)
	return d
}

// FromFlamegraphDiff reads Pyroscope's diff format: levels[d].values is a
// flat list of [left x offset, left total, left self, right x offset,
// right total, right self, name] per box, each x offset relative to the
// end of the previous box of its side on that level. A box's parent is
// the box on the level above whose span, both sides together, holds its
// start; boxes with nothing on either side are left out.
func FromFlamegraphDiff(fd *querierv1.FlameGraphDiff) (Diff, error) {
	type box struct {
		start, width int64 // both sides together
		node         int32
	}
	if fd == nil || len(fd.Levels) == 0 {
		return diffRows([]dnode{{name: RootName}}, 0), nil
	}
	var nodes []dnode
	var prev, cur []box
	for d, lvl := range fd.Levels {
		v := lvl.GetValues()
		if len(v)%7 != 0 {
			return Diff{}, fmt.Errorf("flamegraph diff level %d: %d values, not a multiple of 7", d, len(v))
		}
		cur = cur[:0]
		var endL, endR int64
		p := 0
		for i := 0; i < len(v); i += 7 {
			xl, tl, sl, xr, tr, sr, name := endL+v[i], v[i+1], v[i+2], endR+v[i+3], v[i+4], v[i+5], v[i+6]
			endL, endR = xl+tl, xr+tr
			if name < 0 || name >= int64(len(fd.Names)) {
				return Diff{}, fmt.Errorf("flamegraph diff level %d: name index %d out of range", d, name)
			}
			if tl < 0 || sl < 0 || sl > tl || tr < 0 || sr < 0 || sr > tr {
				return Diff{}, fmt.Errorf("flamegraph diff level %d: box with totals %d, %d and selfs %d, %d", d, tl, tr, sl, sr)
			}
			b := box{start: xl + xr, width: tl + tr, node: int32(len(nodes))} // #nosec G115 -- a box index; the answer is bounded by the server's max nodes
			n := dnode{name: fd.Names[name], l: tl, ls: sl, r: tr, rs: sr}
			switch {
			case d == 0 && i > 0:
				return Diff{}, errors.New("flamegraph diff: more than one root")
			case d == 0:
				n.name = RootName
			case b.width == 0:
				continue
			default:
				for p < len(prev) && prev[p].start+prev[p].width <= b.start {
					p++
				}
				if p == len(prev) || b.start < prev[p].start {
					return Diff{}, fmt.Errorf("flamegraph diff level %d: box at %d has no parent", d, b.start)
				}
				nodes[prev[p].node].kids = append(nodes[prev[p].node].kids, b.node)
			}
			nodes = append(nodes, n)
			cur = append(cur, b)
		}
		prev, cur = cur, prev
	}
	// The server has folded what it folds: keep every node.
	return diffRows(nodes, 0), nil
}

// Sides reads the two trees back out of the diff, each without the rows
// where it has nothing.
func (d Diff) Sides() (left, right *Tree) {
	return d.side(d.Left, d.LeftSelf), d.side(d.Right, d.RightSelf)
}

func (d Diff) side(totals, selfs []int64) *Tree {
	n := len(d.Levels)
	if len(totals) != n || len(selfs) != n || len(d.Labels) != n {
		return New()
	}
	var s NestedSet
	for i := range d.Levels {
		// A node with nothing has children with nothing: leaving them all
		// out keeps the rows a nested set.
		if i > 0 && totals[i] == 0 {
			continue
		}
		s.Levels, s.Labels = append(s.Levels, d.Levels[i]), append(s.Labels, d.Labels[i])
		s.Totals, s.Selfs = append(s.Totals, totals[i]), append(s.Selfs, selfs[i])
	}
	t, ok := FromNestedSet(s)
	if !ok {
		// Rows this package laid out are a nested set; a hand-made Diff
		// may not be.
		return New()
	}
	return t
}
