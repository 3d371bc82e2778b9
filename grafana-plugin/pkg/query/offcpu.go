package query

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/schema"
)

// Off-CPU time: where jobs' threads blocked, read from the blocked sample
// type of the off_cpu profile (schema.OffCPU) and never summed with the
// runnable one, for the findings that name it and `slurmscope job`.

// WaitJobs bounds the jobs one findings query looks up waits for: each is
// a flame graph call per selector and time chunk, and a cluster's table
// may hold hundreds of jobs with idle cores. Those that left the most
// core-hours idle come first; the others' findings go without.
const WaitJobs = 20

// OffCPUProfileType returns the blocked off-CPU profile type with data in
// the range, or "" if there is none.
func (e *Engine) OffCPUProfileType(ctx context.Context, r Range) (string, error) {
	return e.heldProfileType(ctx, r, schema.OffCPU)
}

// FindingsWithWaits is Findings, with each job that left cores idle named
// where its threads blocked (findings.NamesWaits), from its blocked
// off-CPU profile under scope over r, and the stragglers of multi-rank
// jobs (ranks.go) with the calls MaxCalls leaves. Without Pyroscope, or
// without off-CPU profiles in the range, the findings are Findings'; a
// Pyroscope that fails fails the query. Straggler findings alone need no
// Prometheus, and need Pyroscope. Alert rules read only the findings'
// values, which waits do not change, so they use Findings.
func (e *Engine) FindingsWithWaits(ctx context.Context, scope Scope, r Range, kind findings.Kind) ([]findings.Finding, error) {
	var out []findings.Finding
	used := 0
	if kind != findings.Straggler {
		jobs, err := e.Usage(ctx, scope, r)
		if err != nil {
			return nil, err
		}
		if kind == "" || kind == findings.CPUUnderused {
			if used, err = e.addWaits(ctx, scope, jobs, r); err != nil {
				return nil, err
			}
		}
		out = e.evaluate(jobs, kind)
	}
	if kind == findings.Straggler && e.Profiles == nil {
		return nil, ErrNoPyroscope
	}
	if (kind == "" || kind == findings.Straggler) && e.Profiles != nil {
		st, err := e.stragglers(ctx, scope, r, e.maxCalls()-used)
		if err != nil {
			return nil, err
		}
		out = append(out, st...)
		findings.Sort(out)
	}
	return out, nil
}

// addWaits sets Blocked and Waits of the jobs whose findings name them,
// at most WaitJobs of them and as many as MaxCalls allows, those with the
// most idle core-hours first. One ProfileTypes call per chunk first, so
// that a cluster without off-CPU profiles pays no more than that. Waits are
// extra: where the call limit leaves no room for them, the findings go
// without rather than fail. It returns the Pyroscope calls it made.
func (e *Engine) addWaits(ctx context.Context, scope Scope, jobs []findings.Job, r Range) (int, error) {
	chunks := spans(r.From, r.To, e.maxQueryLength())
	room := e.maxCalls() - len(chunks) // after the ProfileTypes calls
	if e.Profiles == nil || room <= 0 {
		return 0, nil
	}
	want := e.waitJobs(jobs)
	if len(want) == 0 {
		return 0, nil
	}
	pt, err := e.OffCPUProfileType(ctx, r)
	if err != nil || pt == "" {
		return len(chunks), err
	}
	type call struct {
		job int
		sel filter.Selector
		c   span
	}
	var calls []call
	for _, i := range want {
		sels, err := scope.narrowed(filter.Equal(schema.JobID, jobs[i].ID)).Selectors(filter.Pyroscope)
		if err != nil {
			return len(chunks), err
		}
		if len(calls)+len(sels)*len(chunks) > room {
			break
		}
		for _, sel := range sels {
			for _, c := range chunks {
				calls = append(calls, call{i, sel, c})
			}
		}
	}
	graphs := make([]*querierv1.FlameGraph, len(calls))
	err = e.fan(ctx, len(calls), func(ctx context.Context, k int) error {
		c := calls[k]
		fg, err := e.Profiles.MergeStacktraces(ctx, pt, c.sel.String(), c.c.From, c.c.last(), 0)
		graphs[k] = fg
		return err
	})
	if err != nil {
		return len(chunks) + len(calls), err
	}
	byJob := map[int][]*querierv1.FlameGraph{}
	for k, c := range calls {
		byJob[c.job] = append(byJob[c.job], graphs[k])
	}
	for i, gs := range byJob {
		t, err := flame.FromFlamegraphs(gs...)
		if err != nil {
			return len(chunks) + len(calls), fmt.Errorf("pyroscope: %w", err)
		}
		jobs[i].Blocked, jobs[i].Waits = t.Total(), topWaits(t, TopCPUFunctions)
	}
	return len(chunks) + len(calls), nil
}

// waitJobs returns the indexes of the jobs whose findings name waits, the
// most idle core-hours first, at most WaitJobs.
func (e *Engine) waitJobs(jobs []findings.Job) []int {
	var out []int
	idle := map[int]float64{}
	for i, j := range jobs {
		if findings.NamesWaits(j, e.Thresholds) {
			out = append(out, i)
			idle[i], _ = findings.Waste(j, e.Thresholds)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int { return cmp.Compare(idle[b], idle[a]) })
	return out[:min(len(out), WaitJobs)]
}

// topWaits sums t's blocked time by wait (findings.WaitAt), the most
// blocked first, at most n (<= 0: all). Stacks folded into "other" name no
// one place and are left out; their time still counts in t's total.
func topWaits(t *flame.Tree, n int) []findings.Wait {
	sums := map[findings.Wait]int64{}
	t.Stacks(func(stack []string, self int64) {
		if stack[len(stack)-1] != flame.OtherName {
			sums[findings.WaitAt(stack)] += self
		}
	})
	out := make([]findings.Wait, 0, len(sums))
	for w, v := range sums {
		w.Blocked = v
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b findings.Wait) int {
		if c := cmp.Compare(b.Blocked, a.Blocked); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.Function, b.Function), strings.Compare(a.Caller, b.Caller))
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}
