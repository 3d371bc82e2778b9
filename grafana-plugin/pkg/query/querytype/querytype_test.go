package querytype

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/data"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/schema"
)

// The front end's generated files are what the registry renders now.
func TestTypeScriptIsCurrent(t *testing.T) {
	files, err := TypeScript()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join("..", "..", "..", "..", path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the registry renders: run go generate ./grafana-plugin/pkg/query/querytype", path)
		}
	}
}

// answering fakes both backends: every call answers one group per
// group-by label (value "v"), so that frames carry the labels asked for.
type answering struct{}

func (answering) MergeStacktraces(context.Context, string, string, time.Time, time.Time, int64) (*querierv1.FlameGraph, error) {
	t := flame.New()
	t.Add([]string{"main", "work"}, 10)
	return t.Flamegraph(), nil
}

// Diff answers main;work 10 on both sides.
func (answering) Diff(context.Context, string, backends.Selection, backends.Selection, int64) (*querierv1.FlameGraphDiff, error) {
	return &querierv1.FlameGraphDiff{Names: []string{"total", "main", "work"}, Levels: []*querierv1.Level{
		{Values: []int64{0, 10, 0, 0, 10, 0, 0}}, {Values: []int64{0, 10, 0, 0, 10, 0, 1}}, {Values: []int64{0, 10, 10, 0, 10, 10, 2}},
	}}, nil
}

func (answering) SelectSeries(_ context.Context, _, _ string, groupBy []string, start, _ time.Time, _ time.Duration) ([]*typesv1.Series, error) {
	s := &typesv1.Series{Points: []*typesv1.Point{{Timestamp: start.UnixMilli(), Value: 5}}}
	for _, g := range groupBy {
		s.Labels = append(s.Labels, &typesv1.LabelPair{Name: g, Value: "v"})
	}
	return []*typesv1.Series{s}, nil
}

func (answering) ProfileTypes(context.Context, time.Time, time.Time) ([]*typesv1.ProfileType, error) {
	return []*typesv1.ProfileType{{ID: schema.ProcessCPU.ID()}}, nil
}

func (answering) QueryRange(_ context.Context, expr string, start, _ time.Time, _ time.Duration) ([]backends.PromSeries, error) {
	l := map[string]string{}
	for _, a := range schema.All {
		if strings.Contains(expr, a.Label) {
			l[a.Label] = "v"
		}
	}
	return []backends.PromSeries{{Labels: l, Samples: []backends.Sample{{T: start, V: 1}}}}, nil
}

func (answering) Query(context.Context, string, time.Time) ([]backends.PromSeries, error) {
	return nil, nil
}

func (answering) LabelValues(context.Context, string, []string, time.Time, time.Time) ([]string, error) {
	return []string{"v"}, nil
}

var (
	_ query.Profiles = answering{}
	_ query.Metrics  = answering{}
)

// samples are valid models of every type, in each of its shapes.
var samples = map[string][]string{
	Flamegraph:      {`{}`, `{"maxNodes": 100, "profileType": "process_cpu:cpu:nanoseconds:cpu:nanoseconds"}`},
	ProfileSeries:   {`{}`, `{"groupBy": ["slurm.job.user", "host.name"]}`},
	GPUMetric:       {`{}`, `{"metric": "slurmscope_job_gpu_utilization_ratio", "groupBy": ["slurm.job.user"], "window": "30m"}`},
	TopEntities:     {`{}`, `{"entity": "slurm.job.user", "rankBy": "gpuUtilization", "limit": 3}`},
	AttributeValues: {`{"attribute": "host.name"}`},
	Findings:        {`{}`, `{"format": "numeric"}`, `{"finding": "gpuIdle", "format": "table"}`, `{"finding": "straggler"}`},
	Diff: {`{}`, `{"leftFilter": "slurm.job.id == \"1\"", "rightFilter": "slurm.job.id == \"2\"", "maxNodes": 100,
		"rightFrom": "2026-11-29T00:00:00Z", "rightTo": "1796083200000"}`},
}

// Every type's frames are of the type its Shape says, and their numbers
// carry exactly the labels it says; a type without samples fails here.
func TestShapesAreTheFrames(t *testing.T) {
	now := time.Now()
	env := Env{Engine: &query.Engine{Profiles: answering{}, Metrics: answering{}},
		Range: query.Range{From: now.Add(-time.Hour), To: now, Step: time.Minute}, ProfileType: schema.ProcessCPU.ID()}
	for _, name := range Names() {
		if len(samples[name]) == 0 {
			t.Errorf("%s: no sample model", name)
		}
		for _, raw := range samples[name] {
			q, err := Parse(name, []byte(raw))
			if err != nil {
				t.Errorf("%s %s: %v", name, raw, err)
				continue
			}
			frames, err := q.Run(context.Background(), env)
			if err != nil || len(frames) == 0 {
				t.Errorf("%s %s: %d frames, %v", name, raw, len(frames), err)
				continue
			}
			sh := q.Shape()
			for _, f := range frames {
				var typ data.FrameType
				if f.Meta != nil {
					typ = f.Meta.Type
				}
				if typ != sh.Type {
					t.Errorf("%s %s: frame type %q, its shape says %q", name, raw, typ, sh.Type)
				}
				for _, fl := range f.Fields {
					if fl.Labels == nil {
						continue
					}
					var keys []string
					for k := range fl.Labels {
						keys = append(keys, k)
					}
					if !sameSet(keys, sh.Labels) {
						t.Errorf("%s %s: labels %v, its shape says %v", name, raw, keys, sh.Labels)
					}
				}
			}
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestParseErrorsAreTheUsers(t *testing.T) {
	_, err := Parse("nope", nil)
	if err == nil {
		t.Fatal("an unknown type parsed")
	}
	for _, name := range Names() {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%q does not name %s", err, name)
		}
	}
	for _, tc := range []struct{ name, raw, want string }{
		{Flamegraph, `{"maxNodes": 70000}`, "maxNodes 70000: want 1 to 65536"},
		{Flamegraph, `{"maxNodes": "x"}`, "not valid JSON"},
		{ProfileSeries, `{"groupBy": ["slurm.job"]}`, `unknown attribute "slurm.job"`},
		{GPUMetric, `{"metric": "up"}`, `unknown metric "up"`},
		{GPUMetric, `{"window": "500ms"}`, "want a duration from 1s"},
		{TopEntities, `{"limit": -1}`, "limit -1 is negative"},
		{TopEntities, `{"rankBy": "memory"}`, `rank "memory"`},
		{AttributeValues, `{}`, `unknown attribute ""`},
		{Findings, `{"format": "csv"}`, `format "csv": want table or numeric`},
		{Findings, `{"finding": "straggler", "format": "numeric"}`, "finding straggler: a table only"},
		{Diff, `{"leftFilter": "slurm.job.idd == \"1\""}`, "leftFilter: 1:1: unknown attribute slurm.job.idd"},
		{Diff, `{"rightFrom": "yesterday"}`, `rightFrom: "yesterday": want epoch milliseconds or an RFC 3339 time`},
		{Diff, `{"leftFrom": "2000", "leftTo": "1000"}`, "leftFrom 2000 is not before leftTo 1000"},
		{Diff, `{"maxNodes": -1}`, "maxNodes -1: want 1 to 65536"},
	} {
		if _, err := Parse(tc.name, []byte(tc.raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.name, tc.raw, err, tc.want)
		}
	}
	// Fields of other types are left alone: Grafana keeps them.
	if _, err := Parse(Flamegraph, []byte(`{"limit": -1, "format": "csv"}`)); err != nil {
		t.Errorf("another type's fields: %v", err)
	}
}

func TestRegisterRefusesATakenName(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registered flamegraph twice")
		}
	}()
	Register[flamegraphQuery](Info{Name: Flamegraph, Key: "Other"})
}

func TestFieldNames(t *testing.T) {
	if got := FieldNames(TopEntities); !slices.Equal(got, []string{"entity", "rankBy", "limit"}) {
		t.Errorf("topEntities fields %v", got)
	}
	if FieldNames("nope") != nil {
		t.Error("fields of an unknown type")
	}
}
