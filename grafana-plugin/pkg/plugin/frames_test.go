package plugin

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
)

func TestFlameFrame(t *testing.T) {
	tr := flame.New()
	tr.Add([]string{"main", "b"}, 3)
	tr.Add([]string{"main", "a"}, 2)
	tr.Add([]string{"main"}, 1)
	f := flameFrame(tr, "flamegraph", "ns")
	if f.Meta == nil || f.Meta.PreferredVisualization != "flamegraph" {
		t.Errorf("meta %+v", f.Meta)
	}
	var names []string
	for _, fl := range f.Fields {
		names = append(names, fl.Name)
	}
	if !reflect.DeepEqual(names, []string{FieldLevel, FieldValue, FieldSelf, FieldLabel}) || f.Fields[1].Config.Unit != "ns" {
		t.Errorf("fields %v, unit %+v", names, f.Fields[1].Config)
	}
	var rows []string
	for i := 0; i < f.Rows(); i++ {
		rows = append(rows, fmt.Sprintf("%v %v %v %v", f.Fields[0].At(i), f.Fields[1].At(i), f.Fields[2].At(i), f.Fields[3].At(i)))
	}
	want := []string{"0 6 0 total", "1 6 1 main", "2 2 2 a", "2 3 3 b"}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows %q, want %q", rows, want)
	}
	back, ok := FromFrame(f)
	if !ok || !reflect.DeepEqual(back.NestedSet(), tr.NestedSet()) {
		t.Errorf("FromFrame: %v %+v", ok, back)
	}

	noSelf := data.NewFrame("x", f.Fields[0], f.Fields[1], f.Fields[3])
	floats := data.NewFrame("x", f.Fields[0], data.NewField(FieldValue, nil, []float64{6, 6, 2, 3}), f.Fields[2], f.Fields[3])
	for name, bad := range map[string]*data.Frame{"no self field": noSelf, "float values": floats} {
		if _, ok := FromFrame(bad); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}
