package query

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/schema"
)

// filter256 is a filter that compiles to 256 disjoint selectors (the most
// a filter may): one broad term, which splits each of the next 127 in
// two, and one more disjoint from all.
func filter256() string {
	terms := []string{`(slurm.job.user == "u" && slurm.job.account == "c")`}
	for i := 0; i < 127; i++ {
		terms = append(terms, fmt.Sprintf(`(slurm.job.id == "%d" && host.name == "n%d")`, i, i))
	}
	terms = append(terms, `(slurm.job.id == "127" && host.name == "n127" && slurm.job.user == "v")`)
	return strings.Join(terms, " || ")
}

// BenchmarkWeekOf256Selectors runs each Pyroscope query type for a
// 256-selector filter over 7 days against the stand-in holding 128 jobs
// (a profile every 6 hours each), and reports the calls each query makes
// (selectors × 24 h chunks) and the time per call. The default cap of
// 1024 calls refuses these queries; here it is raised to let them run.
func BenchmarkWeekOf256Selectors(b *testing.B) {
	s := newStandin(b, 8*24*time.Hour)
	var ps []prof
	for i := 0; i < 128; i++ {
		for h := 0; h < 7*24; h += 6 {
			ps = append(ps, prof{now.Add(-time.Duration(h)*time.Hour - time.Minute), fmt.Sprint(i), fmt.Sprintf("n%d", i),
				map[string]int64{"python;train;matmul": 3e9, "python;train;backward": 2e9, "python;load": 1e9}})
		}
	}
	for len(ps) > 0 {
		n := min(len(ps), 512)
		s.push(b, ps[:n]...)
		ps = ps[n:]
	}
	scope := jobScope(b, filter256())
	if sels, err := scope.Selectors(filter.Pyroscope); err != nil || len(sels) != 256 {
		b.Fatalf("%d selectors, %v", len(sels), err)
	}
	week := Range{From: now.Add(-7 * 24 * time.Hour), To: now, Step: 6048 * time.Second} // 100 points
	ctx := context.Background()
	queries := []struct {
		name string
		run  func(e *Engine) error
	}{
		{"flamegraph", func(e *Engine) error { _, err := e.FlameGraph(ctx, scope, CPUProfileType, week, 8192); return err }},
		{"profileSeries", func(e *Engine) error { _, err := e.ProfileSeries(ctx, scope, CPUProfileType, nil, week); return err }},
		{"topEntities", func(e *Engine) error {
			_, err := e.TopEntities(ctx, scope, schema.JobID, ByCPUTime, week, 10)
			return err
		}},
	}
	for _, q := range queries {
		b.Run(q.name, func(b *testing.B) {
			e := &Engine{Profiles: s.profile, MaxCalls: 4096}
			var calls int64
			for b.Loop() {
				s.profile.calls.Store(0)
				if err := q.run(e); err != nil {
					b.Fatal(err)
				}
				calls = s.profile.calls.Load()
			}
			b.ReportMetric(float64(calls), "calls/op")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N)/float64(calls), "ms/call")
		})
	}
	b.Run("default-cap", func(b *testing.B) {
		e := &Engine{Profiles: s.profile}
		for b.Loop() {
			s.profile.calls.Store(0)
			if err := queries[0].run(e); !errors.Is(err, ErrTooManyCalls) || s.profile.calls.Load() != 0 {
				b.Fatalf("%v after %d calls", err, s.profile.calls.Load())
			}
		}
	})
}
