package querytype

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/data"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/schema"
)

// twoJobs fakes Pyroscope's Diff: job 1 (main;a 30, main;b 10) against
// job 2 (main;a 20, main;c 40), as the server encodes it; it records the
// sides it is asked.
type twoJobs struct {
	answering
	mu    sync.Mutex
	sides []backends.Selection
}

func (p *twoJobs) Diff(_ context.Context, _ string, left, right backends.Selection, _ int64) (*querierv1.FlameGraphDiff, error) {
	p.mu.Lock()
	p.sides = append(p.sides, left, right)
	p.mu.Unlock()
	return &querierv1.FlameGraphDiff{Names: []string{"total", "main", "c", "b", "a"}, Levels: []*querierv1.Level{
		{Values: []int64{0, 40, 0, 0, 60, 0, 0}},
		{Values: []int64{0, 40, 0, 0, 60, 0, 1}},
		{Values: []int64{0, 30, 30, 0, 20, 20, 4, 0, 10, 10, 0, 0, 0, 3, 0, 0, 0, 0, 40, 40, 2}},
	}}, nil
}

// A diff is the frame Grafana's flame graph panel draws as one: the
// flame graph's fields for the left side, valueRight and selfRight for
// the right; the function only job 2 calls has all of its value on the
// right. Each side is the query's filter and its own, over its own range.
func TestDiffFrame(t *testing.T) {
	p := &twoJobs{}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	top, err := filter.Compile(`host.name == "n1"`)
	if err != nil {
		t.Fatal(err)
	}
	env := Env{Engine: &query.Engine{Profiles: p}, Scope: query.Scope{Filter: top}, ProfileType: schema.ProcessCPU.ID(),
		Range: query.Range{From: now.Add(-time.Hour), To: now}}
	q, err := Parse(Diff, []byte(`{"leftFilter": "slurm.job.id == \"1\"", "rightFilter": "slurm.job.id == \"2\"",
		"rightFrom": "2026-11-29T00:00:00Z", "rightTo": "1795957200000"}`))
	if err != nil {
		t.Fatal(err)
	}
	frames, err := q.Run(context.Background(), env)
	if err != nil || len(frames) != 1 {
		t.Fatalf("%d frames, %v", len(frames), err)
	}
	f := frames[0]
	var names []string
	for _, fl := range f.Fields {
		names = append(names, fl.Name)
	}
	if want := []string{"level", "value", "self", "label", "valueRight", "selfRight"}; !reflect.DeepEqual(names, want) {
		t.Errorf("fields %v, want %v", names, want)
	}
	if f.Meta == nil || f.Meta.PreferredVisualization != data.VisTypeFlameGraph {
		t.Errorf("meta %+v", f.Meta)
	}
	if v, _ := f.FieldByName(FieldValueRight); v.Config == nil || v.Config.Unit != "ns" {
		t.Errorf("valueRight config %+v", v.Config)
	}
	var rows []string
	for i := range f.Rows() {
		rows = append(rows, strings.Join([]string{str(f.Fields[0].At(i)), f.Fields[3].At(i).(string), str(f.Fields[1].At(i)), str(f.Fields[2].At(i)),
			str(f.Fields[4].At(i)), str(f.Fields[5].At(i))}, " "))
	}
	want := []string{"0 total 40 0 60 0", "1 main 40 0 60 0", "2 a 30 30 20 20", "2 b 10 10 0 0", "2 c 0 0 40 40"}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows %q, want %q", rows, want)
	}
	if len(p.sides) != 2 {
		t.Fatalf("sides %+v", p.sides)
	}
	l, r := p.sides[0], p.sides[1]
	if !strings.Contains(l.Selector, `host_name="n1"`) || !strings.Contains(l.Selector, `slurm_job_id="1"`) ||
		!strings.Contains(r.Selector, `host_name="n1"`) || !strings.Contains(r.Selector, `slurm_job_id="2"`) {
		t.Errorf("selectors %s, %s", l.Selector, r.Selector)
	}
	// Pyroscope's ends are inclusive: the last millisecond of each range.
	if !l.Start.Equal(now.Add(-time.Hour)) || !l.End.Equal(now.Add(-time.Millisecond)) ||
		!r.Start.Equal(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)) || !r.End.Equal(time.Date(2026, 11, 29, 12, 59, 59, 999e6, time.UTC)) {
		t.Errorf("ranges %v to %v and %v to %v", l.Start, l.End, r.Start, r.End)
	}
}

func str(v any) string {
	if x, ok := v.(int64); ok {
		return strconv.FormatInt(x, 10)
	}
	return "?"
}
