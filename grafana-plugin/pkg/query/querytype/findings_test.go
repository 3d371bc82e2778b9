package querytype

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/schema"
)

// idleJob fakes Prometheus for findings: job 1 ran for the hour of the
// range on one node, busy 1 of its 16 cores.
type idleJob struct{ answering }

func (idleJob) Query(_ context.Context, expr string, at time.Time) ([]backends.PromSeries, error) {
	if !strings.Contains(expr, "_over_time(") {
		return nil, nil // not there before the range
	}
	v := 0.0
	switch max := strings.HasPrefix(expr, "max "); {
	case strings.Contains(expr, schema.HostCPUs.Job.Name):
		v = 16
	case max && (strings.Contains(expr, schema.JobLastSeen.Name) || strings.Contains(expr, schema.HostCPUUsage.Job.Name)):
		v = 3600
	case !strings.Contains(expr, schema.JobLastSeen.Name) && !strings.Contains(expr, schema.HostCPUUsage.Job.Name):
		return nil, nil
	}
	return []backends.PromSeries{{Labels: map[string]string{schema.JobID.Label: "1", schema.HostName.Label: "n1"},
		Samples: []backends.Sample{{T: at, V: v}}}}, nil
}

// blockedReads fakes Pyroscope: it holds off-CPU profiles, in which
// every thread blocked reading under load_batch, and counts its calls.
type blockedReads struct {
	answering
	calls atomic.Int64
}

func (b *blockedReads) ProfileTypes(context.Context, time.Time, time.Time) ([]*typesv1.ProfileType, error) {
	b.calls.Add(1)
	return []*typesv1.ProfileType{{ID: schema.ProcessCPU.ID()}, {ID: schema.OffCPU.ID()}}, nil
}

func (b *blockedReads) MergeStacktraces(context.Context, string, string, time.Time, time.Time, int64) (*querierv1.FlameGraph, error) {
	b.calls.Add(1)
	t := flame.New()
	t.Add([]string{"main", "load_batch", "read", "entry_SYSCALL_64", "schedule"}, 10)
	return t.Flamegraph(), nil
}

// A findings table names where the threads of a job with idle cores
// blocked; the numbers for alert rules cost no Pyroscope call, and are
// the same.
func TestFindingsTableNamesWaits(t *testing.T) {
	p := &blockedReads{}
	now := time.Now()
	env := Env{Engine: &query.Engine{Profiles: p, Metrics: idleJob{}}, Range: query.Range{From: now.Add(-time.Hour), To: now}}
	// run runs a findings query and returns its Pyroscope calls.
	run := func(raw string) int64 {
		t.Helper()
		q, err := Parse(Findings, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		p.calls.Store(0)
		frames, err := q.Run(context.Background(), env)
		if err != nil || len(frames) == 0 {
			t.Fatalf("%s: %v", raw, err)
		}
		if f := frames[0]; f.Meta.Type == "" {
			summary, _ := f.FieldByName("summary")
			if got := summary.At(0).(string); got != "used 1 of 16 cores (6%); 100% of its threads' blocked time is in `read` under `load_batch`" {
				t.Errorf("table summary %q", got)
			}
		} else if v := f.Fields[0].At(0); v != 1.0/16 {
			t.Errorf("numbers: %v", v)
		}
		return p.calls.Load()
	}
	if run(`{}`) == 0 {
		t.Error("the table asked Pyroscope nothing")
	}
	if n := run(`{"format": "numeric"}`); n != 0 {
		t.Errorf("numbers for alert rules made %d Pyroscope calls", n)
	}
}
