package flame

// NestedSet is a tree laid out as Grafana's flame graph frame holds it: one
// row per node, depth first with children by name, giving its depth, total,
// self value and name. The Grafana frame itself is built by the flamegraph
// query type (package querytype), so that this package needs no Grafana
// SDK.
type NestedSet struct {
	Levels, Totals, Selfs []int64
	Labels                []string
}

// NestedSet lays the tree out in nested-set order.
func (t *Tree) NestedSet() NestedSet {
	n := t.Len()
	s := NestedSet{Levels: make([]int64, 0, n), Totals: make([]int64, 0, n), Selfs: make([]int64, 0, n), Labels: make([]string, 0, n)}
	t.Walk(func(level int, label string, self, total int64) bool {
		s.Levels = append(s.Levels, int64(level))
		s.Totals = append(s.Totals, total)
		s.Selfs = append(s.Selfs, self)
		s.Labels = append(s.Labels, label)
		return true
	})
	return s
}

// FromNestedSet reads rows back into a tree. It fails (false) on rows that
// are not a nested set: columns of different lengths, a level that skips
// one, or a second root.
func FromNestedSet(s NestedSet) (*Tree, bool) {
	n := len(s.Levels)
	if len(s.Totals) != n || len(s.Selfs) != n || len(s.Labels) != n {
		return nil, false
	}
	t := New()
	var path []int32
	for i, level := range s.Levels {
		if level < 0 || int(level) > len(path) || (i == 0) != (level == 0) {
			return nil, false
		}
		var id int32
		if level > 0 {
			id = t.child(path[level-1], t.intern(s.Labels[i]))
		}
		path = append(path[:level], id)
		t.nodes[id].total += s.Totals[i]
		t.nodes[id].self += s.Selfs[i]
	}
	return t, true
}
