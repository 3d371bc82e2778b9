package pyrostandin

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/schema"
)

// diffEnv holds job 1 (main;a 30, main;b 10) ten minutes ago and job 2
// (main;a 20, main;c 40) forty minutes ago.
func diffEnv(t *testing.T) env {
	e := newEnv(t)
	e.mustPush(t, series(t, now.Add(-10*time.Minute), map[string]int64{"main;a": 30, "main;b": 10}, job("1", "n1")...),
		series(t, now.Add(-40*time.Minute), map[string]int64{"main;a": 20, "main;c": 40}, job("2", "n2")...))
	return e
}

func side(job string, from, to time.Time, maxNodes int64) *querierv1.SelectMergeStacktracesRequest {
	r := &querierv1.SelectMergeStacktracesRequest{ProfileTypeID: cpuType, LabelSelector: `{` + schema.JobID.Label + `="` + job + `"}`,
		Start: ms(from), End: ms(to)}
	if maxNodes > 0 {
		r.MaxNodes = &maxNodes
	}
	return r
}

func (e env) diff(t *testing.T, left, right *querierv1.SelectMergeStacktracesRequest) (*querierv1.FlameGraphDiff, error) {
	t.Helper()
	resp, err := e.querier.Diff(context.Background(), connect.NewRequest(&querierv1.DiffRequest{Left: left, Right: right}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.Flamegraph, nil
}

// The server lays the two sides' trees over one another, each over its
// own range: children aligned by name, a function of one side only with
// nothing on the other, x offsets per side relative to the end of that
// side's previous box, children after their parent's self; names in the
// order the server meets them (a parent's last child first). Worked by
// hand from the two jobs' stacks.
func TestDiffLaysTheSidesOver(t *testing.T) {
	e := diffEnv(t)
	got, err := e.diff(t, side("1", now.Add(-20*time.Minute), now, 0), side("2", now.Add(-50*time.Minute), now.Add(-30*time.Minute), 0))
	if err != nil {
		t.Fatal(err)
	}
	want := &querierv1.FlameGraphDiff{
		Names: []string{"total", "main", "c", "b", "a"},
		Levels: []*querierv1.Level{
			{Values: []int64{0, 40, 0, 0, 60, 0, 0}},
			{Values: []int64{0, 40, 0, 0, 60, 0, 1}},
			{Values: []int64{
				0, 30, 30, 0, 20, 20, 4, // a: left at 0, right at 0
				0, 10, 10, 0, 0, 0, 3, // b: left at 30, right at 20, of nothing
				0, 0, 0, 0, 40, 40, 2, // c: left at 40, of nothing, right at 20
			}},
		},
		Total: 100, MaxSelf: 40, LeftTicks: 40, RightTicks: 60,
	}
	if !proto.Equal(got, want) {
		t.Errorf("diff\n%v\nwant\n%v", got, want)
	}
	// Each side over its own range: job 2 is not in the left's.
	got, err = e.diff(t, side("2", now.Add(-20*time.Minute), now, 0), side("2", now.Add(-50*time.Minute), now.Add(-30*time.Minute), 0))
	if err != nil || got.LeftTicks != 0 || got.RightTicks != 60 {
		t.Errorf("job 2 over the last 20 minutes and 30 to 50 minutes ago: %v, %v", got, err)
	}
}

// max_nodes is the larger side's; past it, the cutoff is the max_nodes-th
// largest of every node's larger side, the root counted: of 60, 60, 40,
// 30 and 10, the fourth is 30, so b (10 and nothing) folds into an
// "other" after the children kept, on both sides.
func TestDiffMaxNodes(t *testing.T) {
	e := diffEnv(t)
	got, err := e.diff(t, side("1", now.Add(-time.Hour), now, 4), side("2", now.Add(-time.Hour), now, 0))
	if err != nil {
		t.Fatal(err)
	}
	want := &querierv1.FlameGraphDiff{
		Names: []string{"total", "main", "other", "c", "a"},
		Levels: []*querierv1.Level{
			{Values: []int64{0, 40, 0, 0, 60, 0, 0}},
			{Values: []int64{0, 40, 0, 0, 60, 0, 1}},
			{Values: []int64{
				0, 30, 30, 0, 20, 20, 4, // a
				0, 0, 0, 0, 40, 40, 3, // c: left at 30, right at 20
				0, 10, 10, 0, 0, 0, 2, // other: left at 30, right at 60
			}},
		},
		Total: 100, MaxSelf: 40, LeftTicks: 40, RightTicks: 60,
	}
	if !proto.Equal(got, want) {
		t.Errorf("diff at max_nodes 4\n%v\nwant\n%v", got, want)
	}
}

// Each side is checked as SelectMergeStacktraces checks it, with its
// messages; max_nodes over the server's maximum is refused first.
func TestDiffChecksEachSide(t *testing.T) {
	e := diffEnv(t)
	for _, tc := range []struct {
		left, right *querierv1.SelectMergeStacktracesRequest
		want        string
	}{
		{side("1", now.Add(-time.Hour), now, maxMaxNodes+1), side("2", now.Add(-time.Hour), now, 0),
			"max flamegraph nodes limit 1048577 is greater than allowed 1048576"},
		{side("1", now.Add(-time.Hour), now, 0), side("2", now.Add(-25*time.Hour), now, 0),
			"the query time range exceeds the limit (max_query_length, actual: 25h0m0s, limit: 1d)"},
		{side("1", now, now.Add(-time.Hour), 0), side("2", now.Add(-time.Hour), now, 0), "query start time is after end time"},
		{nil, side("2", now.Add(-time.Hour), now, 0), "missing time range in the query"},
	} {
		_, err := e.diff(t, tc.left, tc.right)
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("diff %v / %v: %v, want %q", tc.left, tc.right, err, tc.want)
		}
	}
}
