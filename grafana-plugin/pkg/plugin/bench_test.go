package plugin

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"
	"github.com/grafana/grafana-plugin-sdk-go/backend"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/querytype"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

// BenchmarkQueryDataOverhead compares QueryData (filter, selectors, call,
// decode, frame) with the raw backend call it makes, against the
// Pyroscope stand-in holding one job's profile of about 8,000 stack
// nodes. Report raw/op and querydata/op; the target is an overhead of at
// most 10%.
func BenchmarkQueryDataOverhead(b *testing.B) {
	srv := pyrostandin.New()
	if err := srv.Start("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	now := time.Now()
	pushBenchProfile(b, srv.URL(), now)

	p, err := backends.NewPyroscope(backends.Config{URL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	from, to := now.Add(-time.Hour), now.Add(time.Minute)
	sel := "{" + schema.JobID.Label + `="77"}`
	d := NewWith(Settings{}, p, nil)
	q := dataQuery("A", queryModel{QueryType: querytype.Flamegraph, Filter: `slurm.job.id == "77"`})
	q.TimeRange = backend.TimeRange{From: from, To: to}
	req := &backend.QueryDataRequest{Queries: []backend.DataQuery{q}}

	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.MergeStacktraces(context.Background(), query.CPUProfileType, sel, from, to, querytype.DefaultMaxNodes); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("querydata", func(b *testing.B) {
		for b.Loop() {
			resp, _ := d.QueryData(context.Background(), req)
			if r := resp.Responses["A"]; r.Error != nil || r.Frames[0].Rows() < 1000 {
				b.Fatal(r.Error)
			}
		}
	})
}

func pushBenchProfile(b *testing.B, url string, at time.Time) {
	r := rand.New(rand.NewPCG(3, 4))
	pp := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000, TimeNanos: at.Add(-time.Minute).UnixNano(), DurationNanos: int64(10 * time.Second),
	}
	locs := map[int]*profile.Location{}
	loc := func(i int) *profile.Location {
		if l, ok := locs[i]; ok {
			return l
		}
		fn := &profile.Function{ID: uint64(i + 1), Name: fmt.Sprintf("pkg%d.fn%d", i%31, i)}
		l := &profile.Location{ID: uint64(i + 1), Line: []profile.Line{{Function: fn}}}
		pp.Function, pp.Location = append(pp.Function, fn), append(pp.Location, l)
		locs[i] = l
		return l
	}
	for s := 0; s < 1200; s++ {
		depth := 2 + r.IntN(20)
		var stack []*profile.Location
		for d := 0; d < depth; d++ {
			stack = append([]*profile.Location{loc(r.IntN(2 + d*d))}, stack...) // leaf first
		}
		pp.Sample = append(pp.Sample, &profile.Sample{Location: stack, Value: []int64{(1 + r.Int64N(100)) * 10_000_000}})
	}
	var buf bytes.Buffer
	if err := pp.Write(&buf); err != nil {
		b.Fatal(err)
	}
	c := pushv1connect.NewPusherServiceClient(http.DefaultClient, url)
	_, err := c.Push(context.Background(), connect.NewRequest(&pushv1.PushRequest{Series: []*pushv1.RawProfileSeries{{
		Labels: []*typesv1.LabelPair{{Name: "__name__", Value: "process_cpu"}, {Name: schema.ServiceName, Value: "bench"},
			{Name: schema.JobID.Label, Value: "77"}},
		Samples: []*pushv1.RawSample{{RawProfile: buf.Bytes()}}}}}))
	if err != nil {
		b.Fatal(err)
	}
}
