package query

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/promql"
	"github.com/slurmscope/slurmscope/schema"
)

// AttributeValues returns the values of attr under scope, from both
// backends (GPU attributes live only in Prometheus, profiles only in
// Pyroscope). A backend that is not configured is skipped; one that fails
// fails the call, so that a partial list is never taken for the whole.
func (e *Engine) AttributeValues(ctx context.Context, scope Scope, attr schema.Attribute, r Range) ([]string, error) {
	if e.Profiles == nil && e.Metrics == nil {
		return nil, errors.Join(ErrNoPyroscope, ErrNoPrometheus)
	}
	seen := map[string]bool{}
	var mu sync.Mutex
	add := func(vs []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range vs {
			if v != "" {
				seen[v] = true
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	if e.Profiles != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vs, err := e.profileValues(ctx, scope, attr, r)
			errs[0] = err
			add(vs)
		}()
	}
	if e.Metrics != nil {
		sels, err := scope.Selectors(filter.Prometheus)
		if err != nil {
			return nil, err
		}
		if len(sels) > 0 {
			ms := make([]string, len(sels))
			for i, s := range sels {
				ms[i] = promql.Matchers(s)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				vs, err := e.Metrics.LabelValues(ctx, attr.Label, ms, r.From, r.To)
				errs[1] = err
				add(vs)
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

// profileValues lists the values of attr on profiles in [From, To):
// Pyroscope's LabelValues answers by whole blocks, which reach minutes or
// hours outside the range, so the values come from SelectSeries grouped
// by attr, one total per profile type, which is exact.
func (e *Engine) profileValues(ctx context.Context, scope Scope, attr schema.Attribute, r Range) ([]string, error) {
	sels, err := scope.Selectors(filter.Pyroscope)
	if err != nil || len(sels) == 0 {
		return nil, err
	}
	calls := totalsPlan(r.From, r.To, e.maxQueryLength())
	if err := e.budget(len(sels), len(calls), 1); err != nil {
		return nil, err
	}
	pts, err := e.ProfileTypes(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := e.budget(len(sels), len(calls), len(pts)); err != nil {
		return nil, err
	}
	// One profile type after the other, so that the calls in flight stay
	// within Parallel.
	var out []string
	for _, pt := range pts {
		ss, err := e.series(ctx, scope, pt.ID, []schema.Attribute{attr}, calls)
		if err != nil {
			return nil, err
		}
		for _, s := range ss {
			out = append(out, s.Labels[attr.Name])
		}
	}
	return out, nil
}

// ProfileTypes lists the profile types with data in the range, one call
// per time chunk. Profile types are not per job, so ownership does not
// narrow them.
func (e *Engine) ProfileTypes(ctx context.Context, r Range) ([]*typesv1.ProfileType, error) {
	if e.Profiles == nil {
		return nil, ErrNoPyroscope
	}
	chunks := spans(r.From, r.To, e.maxQueryLength())
	if err := e.budget(1, len(chunks), 1); err != nil {
		return nil, err
	}
	answers := make([][]*typesv1.ProfileType, len(chunks))
	err := e.fan(ctx, len(chunks), func(ctx context.Context, i int) error {
		pts, err := e.Profiles.ProfileTypes(ctx, chunks[i].From, chunks[i].last())
		answers[i] = pts
		return err
	})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []*typesv1.ProfileType
	for _, pts := range answers {
		for _, pt := range pts {
			if !seen[pt.ID] {
				seen[pt.ID] = true
				out = append(out, pt)
			}
		}
	}
	slices.SortFunc(out, func(a, b *typesv1.ProfileType) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// GPUProfileType returns the GPU kernel-time profile type with data in the
// range, or "" if there is none.
func (e *Engine) GPUProfileType(ctx context.Context, r Range) (string, error) {
	return e.heldProfileType(ctx, r, schema.GPUTime)
}

// heldProfileType returns the id Pyroscope holds want under in the range
// (its period may differ from the schema's), or "" if it holds none.
func (e *Engine) heldProfileType(ctx context.Context, r Range, want schema.ProfileType) (string, error) {
	pts, err := e.ProfileTypes(ctx, r)
	if err != nil {
		return "", err
	}
	for _, pt := range pts {
		if want.Matches(pt.ID) {
			return pt.ID, nil
		}
	}
	return "", nil
}
