package query

import (
	"context"
	"fmt"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
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
	graphs := make([]*querierv1.FlameGraph, len(sels)*len(chunks))
	err = e.fan(ctx, len(graphs), func(ctx context.Context, i int) error {
		sel, c := sels[i/len(chunks)], chunks[i%len(chunks)]
		fg, err := e.Profiles.MergeStacktraces(ctx, profileType, sel.String(), c.From, c.last(), int64(maxNodes))
		graphs[i] = fg
		return err
	})
	if err != nil {
		return nil, err
	}
	tree, err := flame.FromFlamegraphs(graphs...)
	if err != nil {
		return nil, fmt.Errorf("pyroscope: %w", err)
	}
	if len(graphs) == 1 {
		return tree, nil
	}
	return tree.Truncate(maxNodes), nil
}
