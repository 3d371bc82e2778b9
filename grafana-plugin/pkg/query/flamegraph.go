package query

import (
	"context"
	"fmt"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
)

// FlameGraph returns the merged call tree of profileType under scope over
// [From, To), capped at maxNodes (<= 0: Pyroscope's default per call,
// none after). One call's answer is the server's tree as it came; several
// (selectors, time chunks) are summed and truncated once, as Pyroscope
// truncates.
func (e *Engine) FlameGraph(ctx context.Context, scope Scope, profileType string, r Range, maxNodes int) (*flame.Tree, error) {
	if e.Profiles == nil {
		return nil, ErrNoPyroscope
	}
	sels, err := scope.Selectors(filter.Pyroscope)
	if err != nil {
		return nil, err
	}
	chunks := spans(r.From, r.To, e.maxQueryLength())
	if err := e.budget(len(sels), len(chunks), 1); err != nil {
		return nil, err
	}
	graphs, err := e.merge(ctx, mergeCalls(profileType, sels, chunks), maxNodes)
	if err != nil {
		return nil, err
	}
	return sumGraphs(graphs, maxNodes)
}

// mergeCall is one SelectMergeStacktraces call: a selector over a span.
type mergeCall struct {
	profileType string
	sel         filter.Selector
	span        span
}

func (c mergeCall) selection() backends.Selection {
	return backends.Selection{Selector: c.sel.String(), Start: c.span.From, End: c.span.last()}
}

// mergeCalls are the calls that cover sels over chunks: each selector in
// each chunk.
func mergeCalls(profileType string, sels []filter.Selector, chunks []span) []mergeCall {
	out := make([]mergeCall, 0, len(sels)*len(chunks))
	for _, sel := range sels {
		for _, c := range chunks {
			out = append(out, mergeCall{profileType, sel, c})
		}
	}
	return out
}

// merge makes the calls, at most Parallel at a time, and returns their
// answers in their order.
func (e *Engine) merge(ctx context.Context, calls []mergeCall, maxNodes int) ([]*querierv1.FlameGraph, error) {
	graphs := make([]*querierv1.FlameGraph, len(calls))
	err := e.fan(ctx, len(calls), func(ctx context.Context, i int) error {
		c := calls[i]
		fg, err := e.Profiles.MergeStacktraces(ctx, c.profileType, c.sel.String(), c.span.From, c.span.last(), int64(maxNodes))
		graphs[i] = fg
		return err
	})
	if err != nil {
		return nil, err
	}
	return graphs, nil
}

// sumGraphs sums answers into one tree: one answer is the server's tree
// as it came, several are truncated once more after summing, as
// Pyroscope truncates what it merges.
func sumGraphs(graphs []*querierv1.FlameGraph, maxNodes int) (*flame.Tree, error) {
	tree, err := flame.FromFlamegraphs(graphs...)
	if err != nil {
		return nil, fmt.Errorf("pyroscope: %w", err)
	}
	if len(graphs) == 1 {
		return tree, nil
	}
	return tree.Truncate(maxNodes), nil
}
