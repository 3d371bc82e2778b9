// Package flame holds call trees: decoded from Pyroscope's flamegraph
// format, merged by summing, truncated as Pyroscope truncates, and turned
// into Grafana's nested-set frame.
//
// A job that spans many nodes is queried as several disjoint selectors;
// each answer is one flame graph and the job's graph is their sum. The
// tree is an arena of nodes keyed by (parent, name) so that merging 16
// graphs of 8,192 nodes stays within a few milliseconds.
package flame

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
)

// RootName is the name Pyroscope gives the root of every flame graph.
const RootName = "total"

// OtherName is the node Pyroscope folds a parent's small children into.
const OtherName = "other"

type node struct {
	name   int32
	parent int32
	self   int64
	total  int64
	// Children as a list; a parent with many children also indexes them
	// in Tree.wide, since scanning would be quadratic.
	firstChild, nextSibling int32
	kids                    int32
}

// wideAt is the number of children from which a node's children are found
// through the map rather than by scanning the list.
const wideAt = 16

// Tree is a call tree whose nodes are merged by frame name. The zero value
// is not usable; call New.
type Tree struct {
	names   []string
	nameIDs map[string]int32
	nodes   []node // nodes[0] is the root
	index   map[uint64]int32
}

// New returns an empty tree (a root with no value).
func New() *Tree { return newSized(0) }

// newSized makes room for about n nodes up front: growing the arena and
// the index while merging costs more than the merge itself.
func newSized(n int) *Tree {
	t := &Tree{nameIDs: map[string]int32{}, index: map[uint64]int32{}, nodes: make([]node, 0, n+1)}
	t.nodes = append(t.nodes, node{name: t.intern(RootName), parent: -1})
	return t
}

// FromFlamegraphs sums flame graphs (one per selector or per host) into a
// new tree.
func FromFlamegraphs(fgs ...*querierv1.FlameGraph) (*Tree, error) {
	// The hosts of one job share most of their stacks: size for twice the
	// largest graph (once, for a single graph) rather than for the sum,
	// which would allocate (and clear) a table ten times too big for the
	// common case.
	n := 0
	for _, fg := range fgs {
		m := 0
		for _, l := range fg.GetLevels() {
			m += len(l.GetValues()) / 4
		}
		n = max(n, m)
	}
	if len(fgs) > 1 {
		n *= 2
	}
	t := newSized(min(n, 1<<20))
	for _, fg := range fgs {
		if err := t.AddFlamegraph(fg); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// maxIDs bounds a tree's nodes and names, whose ids are int32s (a var so
// that a test can lower it).
var maxIDs = math.MaxInt32

func (t *Tree) intern(s string) int32 {
	if id, ok := t.nameIDs[s]; ok {
		return id
	}
	id := int32(len(t.names)) // #nosec G115 -- under maxIDs: AddFlamegraph refuses a backend's graph beyond it; Add and Merge take trees in memory (2^31 nodes are over 80 GiB)
	t.names = append(t.names, s)
	t.nameIDs[s] = id
	return id
}

// child returns the child of parent named name, creating it. Most nodes
// have a few children, found by scanning their list faster than by
// hashing; the few wide ones are indexed by (parent, name).
func (t *Tree) child(parent, name int32) int32 {
	p := &t.nodes[parent]
	wide := p.kids >= wideAt
	k := uint64(uint32(parent))<<32 | uint64(uint32(name)) // #nosec G115 -- ids are non-negative int32s
	if wide {
		if id, ok := t.index[k]; ok {
			return id
		}
	} else {
		for c := p.firstChild; c != 0; c = t.nodes[c].nextSibling {
			if t.nodes[c].name == name {
				return c
			}
		}
	}
	id := int32(len(t.nodes)) // #nosec G115 -- under maxIDs: AddFlamegraph refuses a backend's graph beyond it; Add and Merge take trees in memory (2^31 nodes are over 80 GiB)
	t.nodes = append(t.nodes, node{name: name, parent: parent, nextSibling: t.nodes[parent].firstChild})
	p = &t.nodes[parent] // append may have moved the arena
	p.firstChild = id
	p.kids++
	switch {
	case wide:
		t.index[k] = id
	case p.kids == wideAt:
		for c := p.firstChild; c != 0; c = t.nodes[c].nextSibling {
			t.index[uint64(uint32(parent))<<32|uint64(uint32(t.nodes[c].name))] = c // #nosec G115 -- ids are non-negative int32s
		}
	}
	return id
}

// Total is the root's value: everything in the tree.
func (t *Tree) Total() int64 { return t.nodes[0].total }

// Len is the number of nodes, the root included.
func (t *Tree) Len() int { return len(t.nodes) }

// Add adds v at the end of the stack (root first, root itself excluded).
// Tests and the benchmarks build trees with it.
func (t *Tree) Add(stack []string, v int64) {
	cur := int32(0)
	t.nodes[0].total += v
	for _, f := range stack {
		cur = t.child(cur, t.intern(f))
		t.nodes[cur].total += v
	}
	t.nodes[cur].self += v
}

// box is one decoded flame graph rectangle.
type box struct {
	start, total, self int64
	node               int32 // in the destination tree
}

// AddFlamegraph sums a Pyroscope flame graph into t. The format: names[0]
// is the root; levels[d].values is a flat list of [x_offset, total, self,
// name] per box at depth d, with x_offset relative to the end of the
// previous box on that level. A box's parent is the box on the level above
// whose span holds its start.
func (t *Tree) AddFlamegraph(fg *querierv1.FlameGraph) error {
	if fg == nil || len(fg.Levels) == 0 {
		return nil
	}
	// Node and name ids are int32s: a graph that would take the tree past
	// them is refused before anything of it is added.
	boxes := 0
	for _, lvl := range fg.Levels {
		boxes += len(lvl.GetValues()) / 4
	}
	if len(fg.Names) > maxIDs-len(t.names) || boxes > maxIDs-len(t.nodes) {
		return fmt.Errorf("flamegraph of %d names and %d boxes: a tree holds at most %d of each", len(fg.Names), boxes, maxIDs)
	}
	// Intern this graph's names once; boxes then refer to them by index.
	ids := make([]int32, len(fg.Names))
	for i, n := range fg.Names {
		ids[i] = t.intern(n)
	}
	var prev, cur []box
	for d, lvl := range fg.Levels {
		v := lvl.GetValues()
		if len(v)%4 != 0 {
			return fmt.Errorf("flamegraph level %d: %d values, not a multiple of 4", d, len(v))
		}
		cur = cur[:0]
		end := int64(0)
		p := 0
		for i := 0; i < len(v); i += 4 {
			start, total, self, name := end+v[i], v[i+1], v[i+2], v[i+3]
			end = start + total
			if name < 0 || name >= int64(len(ids)) {
				return fmt.Errorf("flamegraph level %d: name index %d out of range", d, name)
			}
			if total < 0 || self < 0 || self > total {
				return fmt.Errorf("flamegraph level %d: box with total %d and self %d", d, total, self)
			}
			var id int32
			if d == 0 {
				if i > 0 {
					return errors.New("flamegraph: more than one root")
				}
				id = 0
			} else {
				if total == 0 {
					continue
				}
				for p < len(prev) && prev[p].start+prev[p].total <= start {
					p++
				}
				if p == len(prev) || start < prev[p].start {
					return fmt.Errorf("flamegraph level %d: box at %d has no parent", d, start)
				}
				id = t.child(prev[p].node, ids[name])
			}
			t.nodes[id].total += total
			t.nodes[id].self += self
			cur = append(cur, box{start: start, total: total, self: self, node: id})
		}
		prev, cur = cur, prev
	}
	return nil
}

// Merge adds every node of o into t.
func (t *Tree) Merge(o *Tree) {
	ids := make([]int32, len(o.names))
	for i, n := range o.names {
		ids[i] = t.intern(n)
	}
	// Parents precede their children in the arena, so one pass suffices.
	m := make([]int32, len(o.nodes))
	for i, n := range o.nodes {
		if i == 0 {
			m[0] = 0
		} else {
			m[i] = t.child(m[n.parent], ids[n.name])
		}
		t.nodes[m[i]].total += n.total
		t.nodes[m[i]].self += n.self
	}
}

// children returns, for every node, its children sorted by name, as one
// CSR layout: the children of n are kids[off[n]:off[n+1]].
func (t *Tree) children() (off []int32, kids []int32) {
	off = make([]int32, len(t.nodes)+1)
	for i := 1; i < len(t.nodes); i++ {
		off[t.nodes[i].parent+1]++
	}
	for i := 1; i < len(off); i++ {
		off[i] += off[i-1]
	}
	kids = make([]int32, len(t.nodes))
	fill := slices.Clone(off[:len(t.nodes)])
	for i := 1; i < len(t.nodes); i++ {
		par := t.nodes[i].parent
		kids[fill[par]] = int32(i) // #nosec G115 -- a node index, under maxIDs
		fill[par]++
	}
	for n := range t.nodes {
		seg := kids[off[n]:off[n+1]]
		if len(seg) > 1 {
			slices.SortFunc(seg, func(a, b int32) int {
				return strings.Compare(t.names[t.nodes[a].name], t.names[t.nodes[b].name])
			})
		}
	}
	return off, kids
}

// Walk visits the tree depth first, children by name, root first at level
// 0. It stops descending where fn returns false.
func (t *Tree) Walk(fn func(level int, name string, self, total int64) bool) {
	off, kids := t.children()
	type item struct {
		n     int32
		level int
	}
	stack := []item{{0, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := t.nodes[it.n]
		if !fn(it.level, t.names[n.name], n.self, n.total) {
			continue
		}
		seg := kids[off[it.n]:off[it.n+1]]
		for i := len(seg) - 1; i >= 0; i-- {
			stack = append(stack, item{seg[i], it.level + 1})
		}
	}
}

// Truncate applies max_nodes as Pyroscope does: the cutoff is the
// maxNodes-th largest total among all nodes but the root ("other" nodes
// included), and every node at or above it stays, ties and all, so that
// more than maxNodes nodes may come back. Each parent's other children,
// and any "other" it had, fold into one child "other" (self = total). A
// tree of at most maxNodes nodes, or maxNodes <= 0, comes back as is.
func (t *Tree) Truncate(maxNodes int) *Tree {
	if maxNodes <= 0 || len(t.nodes)-1 <= maxNodes {
		return t
	}
	totals := make([]int64, 0, len(t.nodes)-1)
	for _, n := range t.nodes[1:] {
		totals = append(totals, n.total)
	}
	min := kthLargest(totals, maxNodes)
	// Own name tables, so that later merges into either tree cannot
	// disturb the other.
	out := &Tree{names: slices.Clone(t.names), nameIDs: make(map[string]int32, len(t.names)+1),
		index: map[uint64]int32{}}
	for i, s := range out.names {
		out.nameIDs[s] = int32(i) // #nosec G115 -- a name index of t, under maxIDs
	}
	out.nodes = make([]node, 1, maxNodes+1)
	root := t.nodes[0]
	out.nodes[0] = node{name: root.name, parent: -1, self: root.self, total: root.total}
	other := out.intern(OtherName)
	// Parents precede children, so m[parent] is set before the child is
	// seen; a node at or above the cutoff has its parent kept too.
	m := make([]int32, len(t.nodes))
	for i := 1; i < len(t.nodes); i++ {
		n := t.nodes[i]
		dst := m[n.parent]
		if dst < 0 {
			m[i] = -1 // under a folded node: already counted in its "other"
			continue
		}
		if n.total >= min && n.name != other {
			m[i] = out.child(dst, n.name)
			out.nodes[m[i]].self += n.self
			out.nodes[m[i]].total += n.total
			continue
		}
		o := out.child(dst, other)
		out.nodes[o].self += n.total
		out.nodes[o].total += n.total
		m[i] = -1
	}
	return out
}

// kthLargest returns the k-th largest value of v (1-based), reordering v.
func kthLargest(v []int64, k int) int64 {
	lo, hi, want := 0, len(v)-1, k-1
	for lo < hi {
		// Median of three keeps sorted inputs from going quadratic.
		mid := lo + (hi-lo)/2
		if v[mid] > v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] > v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[mid] > v[hi] {
			v[mid], v[hi] = v[hi], v[mid]
		}
		pivot := v[hi]
		i, j := lo, hi
		for i <= j {
			for v[i] > pivot {
				i++
			}
			for v[j] < pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case want <= j:
			hi = j
		case want >= i:
			lo = i
		default:
			return v[want]
		}
	}
	return v[want]
}

// Flamegraph encodes the tree in Pyroscope's flamegraph format, children
// in name order. It is the inverse of AddFlamegraph.
func (t *Tree) Flamegraph() *querierv1.FlameGraph {
	fg := &querierv1.FlameGraph{Total: t.Total()}
	nameIdx := map[int32]int64{}
	idx := func(n int32) int64 {
		if i, ok := nameIdx[n]; ok {
			return i
		}
		i := int64(len(fg.Names))
		fg.Names = append(fg.Names, t.names[n])
		nameIdx[n] = i
		return i
	}
	idx(t.nodes[0].name)
	off, kids := t.children()
	ends := []int64{}
	// Depth-first, so each level's boxes are emitted in x order.
	var visit func(n int32, level int, start int64)
	visit = func(n int32, level int, start int64) {
		for len(fg.Levels) <= level {
			fg.Levels = append(fg.Levels, &querierv1.Level{})
			ends = append(ends, 0)
		}
		nd := t.nodes[n]
		fg.MaxSelf = max(fg.MaxSelf, nd.self)
		lv := fg.Levels[level]
		lv.Values = append(lv.Values, start-ends[level], nd.total, nd.self, idx(nd.name))
		ends[level] = start + nd.total
		x := start + nd.self
		for _, c := range kids[off[n]:off[n+1]] {
			visit(c, level+1, x)
			x += t.nodes[c].total
		}
	}
	visit(0, 0, 0)
	return fg
}

// Function is one function's share of a tree.
type Function struct {
	Name  string
	Self  int64
	Total int64 // counted once per stack, however often the function recurses
}

// TopFunctions returns the n functions with the most self value (total as
// the tie break), the root excluded.
func (t *Tree) TopFunctions(n int) []Function {
	self := map[int32]int64{}
	total := map[int32]int64{}
	var path []int32 // names on the current stack, for recursion
	t.walkIDs(func(level int, id int32) {
		path = append(path[:level], t.nodes[id].name)
		if level == 0 {
			return
		}
		nd := t.nodes[id]
		self[nd.name] += nd.self
		if !slices.Contains(path[1:level], nd.name) {
			total[nd.name] += nd.total
		}
	})
	out := make([]Function, 0, len(total))
	for name, tot := range total {
		out = append(out, Function{Name: t.names[name], Self: self[name], Total: tot})
	}
	slices.SortFunc(out, func(a, b Function) int {
		switch {
		case a.Self != b.Self:
			return cmpDesc(a.Self, b.Self)
		case a.Total != b.Total:
			return cmpDesc(a.Total, b.Total)
		}
		return strings.Compare(a.Name, b.Name)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// Stacks calls fn for every node with self value: its stack, root first
// and the root itself left out, and that value. The slice is reused from
// call to call: fn copies what it keeps.
func (t *Tree) Stacks(fn func(stack []string, self int64)) {
	var path []string
	t.walkIDs(func(level int, id int32) {
		if level == 0 {
			return
		}
		nd := t.nodes[id]
		path = append(path[:level-1], t.names[nd.name])
		if nd.self > 0 {
			fn(path, nd.self)
		}
	})
}

func cmpDesc(a, b int64) int {
	if a > b {
		return -1
	}
	return 1
}

func (t *Tree) walkIDs(fn func(level int, id int32)) {
	off, kids := t.children()
	var visit func(n int32, level int)
	visit = func(n int32, level int) {
		fn(level, n)
		for _, c := range kids[off[n]:off[n+1]] {
			visit(c, level+1)
		}
	}
	visit(0, 0)
}
