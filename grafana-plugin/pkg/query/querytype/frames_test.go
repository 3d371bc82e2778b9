package querytype

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
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

func TestFindingFrames(t *testing.T) {
	fs := []findings.Finding{
		{Kind: findings.OOMKilled, Severity: findings.Critical, JobID: "7", User: "bob", Name: "a\"b",
			Summary: "2 processes OOM-killed", Advice: "ask for more", Value: 2},
		{Kind: findings.CPUUnderused, Severity: findings.Warning, JobID: "9", User: "alice", Name: "train",
			Summary: "used 1.9 of 16 cores (12%)", Advice: "ask for fewer", Value: 0.11875, Threshold: 0.5},
	}
	tab := findingsFrame(fs)
	if tab.Meta.PreferredVisualization != data.VisTypeTable || tab.Rows() != 2 || len(tab.Fields) != len(findingColumns) {
		t.Fatalf("table: %d rows, %d fields, meta %+v", tab.Rows(), len(tab.Fields), tab.Meta)
	}
	var row []string
	for _, f := range tab.Fields {
		row = append(row, fmt.Sprint(f.At(1)))
	}
	want := []string{"warning", "cpuUnderused", "9", "alice", "train", "used 1.9 of 16 cores (12%)", "ask for fewer", "0.11875", "0.5"}
	if !reflect.DeepEqual(row, want) {
		t.Errorf("row %q, want %q", row, want)
	}
	nums := findingNumbers(fs)
	if len(nums) != 2 {
		t.Fatalf("%d numeric frames", len(nums))
	}
	for i, f := range nums {
		if f.Meta.Type != data.FrameTypeNumericMulti || len(f.Fields) != 1 || f.Fields[0].Len() != 1 || f.Fields[0].At(0) != fs[i].Value {
			t.Errorf("frame %d: %+v", i, f)
		}
		l := f.Fields[0].Labels
		if l["slurm.job.id"] != fs[i].JobID || l["finding"] != string(fs[i].Kind) || l["slurm.job.name"] != fs[i].Name || len(l) != len(FindingLabels) {
			t.Errorf("frame %d labels %v", i, l)
		}
	}
	if empty := findingNumbers(nil); len(empty) != 1 || empty[0].Meta.Type != data.FrameTypeNumericMulti || empty[0].Rows() != 0 {
		t.Errorf("no findings: %+v", empty)
	}
	if empty := findingsFrame(nil); empty.Rows() != 0 || len(empty.Fields) != len(findingColumns) {
		t.Errorf("no findings, table: %+v", empty)
	}
}
