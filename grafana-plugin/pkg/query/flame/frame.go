package flame

import (
	"github.com/grafana/grafana-plugin-sdk-go/data"
)

// Frame field names Grafana's flame graph panel reads.
const (
	FieldLevel = "level"
	FieldValue = "value"
	FieldSelf  = "self"
	FieldLabel = "label"
)

// Frame returns the tree as Grafana's nested-set frame: one row per node in
// depth-first order (children by name), with its depth, total, self value
// and name. unit is a Grafana unit id for the values ("ns", "bytes", "short").
func (t *Tree) Frame(name, unit string) *data.Frame {
	n := len(t.nodes)
	levels := make([]int64, 0, n)
	values := make([]int64, 0, n)
	selfs := make([]int64, 0, n)
	labels := make([]string, 0, n)
	t.Walk(func(level int, label string, self, total int64) bool {
		levels = append(levels, int64(level))
		values = append(values, total)
		selfs = append(selfs, self)
		labels = append(labels, label)
		return true
	})
	value := data.NewField(FieldValue, nil, values)
	self := data.NewField(FieldSelf, nil, selfs)
	if unit != "" {
		value.Config = &data.FieldConfig{Unit: unit}
		self.Config = &data.FieldConfig{Unit: unit}
	}
	f := data.NewFrame(name, data.NewField(FieldLevel, nil, levels), value, self, data.NewField(FieldLabel, nil, labels))
	f.Meta = &data.FrameMeta{PreferredVisualization: data.VisTypeFlameGraph}
	return f
}

// FromFrame reads a nested-set frame back into a tree; tests and the CLI
// use it to check what the datasource returned.
func FromFrame(f *data.Frame) (*Tree, bool) {
	var levelF, vf, sf, nf *data.Field
	for _, fl := range f.Fields {
		switch fl.Name {
		case FieldLevel:
			levelF = fl
		case FieldValue:
			vf = fl
		case FieldSelf:
			sf = fl
		case FieldLabel:
			nf = fl
		}
	}
	if levelF == nil || vf == nil || sf == nil || nf == nil {
		return nil, false
	}
	t := New()
	var path []int32
	for i := 0; i < levelF.Len(); i++ {
		level, ok1 := levelF.At(i).(int64)
		total, ok2 := vf.At(i).(int64)
		self, ok3 := sf.At(i).(int64)
		label, ok4 := nf.At(i).(string)
		if !ok1 || !ok2 || !ok3 || !ok4 || level < 0 || int(level) > len(path) || (i == 0) != (level == 0) {
			return nil, false
		}
		var id int32
		if level > 0 {
			id = t.child(path[level-1], t.intern(label))
		}
		path = append(path[:level], id)
		t.nodes[id].total += total
		t.nodes[id].self += self
	}
	return t, true
}
