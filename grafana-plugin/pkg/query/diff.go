package query

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
)

// Comparisons: two selections of profiles (job 4242 against job 4250, one
// rank against the job's others), each over its own range, laid over one
// another as Grafana's flame graph panel draws a diff.

// Side is one selection of a diff: Filter narrows the query's scope (nil
// narrows nothing), over its own Range.
type Side struct {
	Filter *filter.Filter
	Range  Range
}

// Diff returns the call trees of profileType under scope narrowed to left
// and to right, laid over one another, capped at maxNodes. Both sides
// keep the scope's ownership. Where each side is one selector over one
// time chunk, Pyroscope's Diff call answers; otherwise each side is
// merged as FlameGraph merges it and the two are laid over one another
// here as Pyroscope lays them (flame.NewDiff). Either way each side's
// selections count against MaxCalls, a Diff call for the two the server
// makes. maxNodes <= 0 is the server's default in a Diff call, and no cut
// after merging.
func (e *Engine) Diff(ctx context.Context, scope Scope, profileType string, left, right Side, maxNodes int) (flame.Diff, error) {
	if e.Profiles == nil {
		return flame.Diff{}, ErrNoPyroscope
	}
	lc, err := e.sideCalls(scope, profileType, left)
	if err != nil {
		return flame.Diff{}, fmt.Errorf("left: %w", err)
	}
	rc, err := e.sideCalls(scope, profileType, right)
	if err != nil {
		return flame.Diff{}, fmt.Errorf("right: %w", err)
	}
	if err := e.allow(len(lc)+len(rc), fmt.Sprintf("%d on the left and %d on the right, selector(s) × time chunk(s)", len(lc), len(rc))); err != nil {
		return flame.Diff{}, err
	}
	if len(lc) == 1 && len(rc) == 1 {
		fd, err := e.Profiles.Diff(ctx, profileType, lc[0].selection(), rc[0].selection(), int64(maxNodes))
		if err != nil {
			return flame.Diff{}, err
		}
		d, err := flame.FromFlamegraphDiff(fd)
		if err != nil {
			return flame.Diff{}, fmt.Errorf("pyroscope: %w", err)
		}
		return d, nil
	}
	graphs, err := e.merge(ctx, append(lc, rc...), maxNodes)
	if err != nil {
		return flame.Diff{}, err
	}
	lt, err := sumGraphs(graphs[:len(lc)], maxNodes)
	if err != nil {
		return flame.Diff{}, err
	}
	rt, err := sumGraphs(graphs[len(lc):], maxNodes)
	if err != nil {
		return flame.Diff{}, err
	}
	return flame.NewDiff(lt, rt, maxNodes), nil
}

// sideCalls are the calls that read one side: its selectors, ownership
// included, over its range's chunks.
func (e *Engine) sideCalls(scope Scope, profileType string, s Side) ([]mergeCall, error) {
	if s.Filter != nil {
		scope = scope.narrowed(s.Filter)
	}
	sels, err := scope.Selectors(filter.Pyroscope)
	if err != nil {
		return nil, err
	}
	return mergeCalls(profileType, sels, spans(s.Range.From, s.Range.To, e.maxQueryLength())), nil
}

// FuncChange is one function's part of each side of a diff: its self
// time, and that as a share of its side's whole time.
type FuncChange struct {
	Name       string  `json:"name"`
	LeftSelf   int64   `json:"left_self_ns"`
	RightSelf  int64   `json:"right_self_ns"`
	LeftShare  float64 `json:"left_share"`
	RightShare float64 `json:"right_share"`
	// Change is RightShare - LeftShare: what the function gained (or,
	// below 0, lost) of its side's time.
	Change float64 `json:"change"`
}

// Changes returns the functions of the diff whose share of their side's
// time grew and shrank the most: the n (<= 0: all) largest gains, the
// largest first, and the n largest losses, the largest first. Shares,
// not times, are compared, so that two jobs of different lengths or
// sizes compare where their time goes. A function folded into "other"
// names no one place and is left out.
func Changes(d flame.Diff, n int) (grew, shrank []FuncChange) {
	l, r := d.Sides()
	self := func(t *flame.Tree) map[string]int64 {
		m := map[string]int64{}
		for _, f := range t.TopFunctions(0) {
			if f.Name != flame.OtherName && f.Self > 0 {
				m[f.Name] = f.Self
			}
		}
		return m
	}
	ls, rs := self(l), self(r)
	share := func(v, total int64) float64 {
		if total <= 0 {
			return 0
		}
		return float64(v) / float64(total)
	}
	var all []FuncChange
	for _, name := range unionKeys(ls, rs) {
		c := FuncChange{Name: name, LeftSelf: ls[name], RightSelf: rs[name],
			LeftShare: share(ls[name], l.Total()), RightShare: share(rs[name], r.Total())}
		c.Change = c.RightShare - c.LeftShare
		all = append(all, c)
	}
	slices.SortFunc(all, func(a, b FuncChange) int {
		return cmp.Or(cmp.Compare(math.Abs(b.Change), math.Abs(a.Change)), strings.Compare(a.Name, b.Name))
	})
	for _, c := range all {
		switch {
		case c.Change > 0 && (n <= 0 || len(grew) < n):
			grew = append(grew, c)
		case c.Change < 0 && (n <= 0 || len(shrank) < n):
			shrank = append(shrank, c)
		}
	}
	return grew, shrank
}

func unionKeys(a, b map[string]int64) []string {
	seen := make(map[string]bool, len(a)+len(b))
	var out []string
	for _, m := range []map[string]int64{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}
