package flame

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
)

// tree builds a tree from "a;b;c" -> value.
func tree(stacks map[string]int64) *Tree {
	t := New()
	for s, v := range stacks {
		t.Add(strings.Split(s, ";"), v)
	}
	return t
}

// rows lists a diff's rows as "level label left/leftSelf right/rightSelf".
func rows(d Diff) []string {
	var out []string
	for i := range d.Levels {
		out = append(out, fmt.Sprintf("%d %s %d/%d %d/%d", d.Levels[i], d.Labels[i], d.Left[i], d.LeftSelf[i], d.Right[i], d.RightSelf[i]))
	}
	return out
}

var (
	diffLeft  = map[string]int64{"main;a": 30, "main;b": 10}
	diffRight = map[string]int64{"main;a": 20, "main;c": 40}
)

// A function only one side calls has its row, all of its value on that
// side and nothing on the other.
func TestDiffLaysTheTreesOverOneAnother(t *testing.T) {
	got := rows(NewDiff(tree(diffLeft), tree(diffRight), 0))
	want := []string{
		"0 total 40/0 60/0",
		"1 main 40/0 60/0",
		"2 a 30/30 20/20",
		"2 b 10/10 0/0",
		"2 c 0/0 40/40",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diff rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Over maxNodes, Pyroscope's cutoff is the maxNodes-th largest of each
// node's larger side, the root counted: of 60, 60, 40, 30 and 10, the
// fourth is 30, so b (10 and 0) folds into "other" on both sides and a
// (30 on the left only) stays.
func TestDiffFoldsByTheLargerSide(t *testing.T) {
	got := rows(NewDiff(tree(diffLeft), tree(diffRight), 4))
	want := []string{
		"0 total 40/0 60/0",
		"1 main 40/0 60/0",
		"2 a 30/30 20/20",
		"2 c 0/0 40/40",
		"2 other 10/10 0/0",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diff rows at max 4 nodes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := len(rows(NewDiff(tree(diffLeft), tree(diffRight), 5))); n != 5 {
		t.Errorf("5 nodes at max 5: %d rows", n)
	}
}

// The diff of the test above as Pyroscope encodes it, worked by hand:
// each side's x offsets are relative to the end of that side's previous
// box on the level, and a node's children start after its self value.
func TestFromFlamegraphDiff(t *testing.T) {
	fd := &querierv1.FlameGraphDiff{
		Names: []string{"total", "main", "c", "b", "a"},
		Levels: []*querierv1.Level{
			{Values: []int64{0, 40, 0, 0, 60, 0, 0}},
			{Values: []int64{0, 40, 0, 0, 60, 0, 1}},
			{Values: []int64{
				0, 30, 30, 0, 20, 20, 4, // a at 0 and 0
				0, 10, 10, 0, 0, 0, 3, // b at 30 and 20
				0, 0, 0, 0, 40, 40, 2, // c at 40 and 20
			}},
		},
		Total: 100, LeftTicks: 40, RightTicks: 60, MaxSelf: 40,
	}
	got, err := FromFlamegraphDiff(fd)
	if err != nil {
		t.Fatal(err)
	}
	if want := NewDiff(tree(diffLeft), tree(diffRight), 0); !reflect.DeepEqual(got, want) {
		t.Errorf("decoded:\n%s\nwant:\n%s", strings.Join(rows(got), "\n"), strings.Join(rows(want), "\n"))
	}
	for _, bad := range []*querierv1.FlameGraphDiff{
		{Names: []string{"total"}, Levels: []*querierv1.Level{{Values: []int64{0, 1, 0, 0, 1, 0}}}},
		{Names: []string{"total"}, Levels: []*querierv1.Level{{Values: []int64{0, 1, 0, 0, 1, 0, 3}}}},
		{Names: []string{"total"}, Levels: []*querierv1.Level{{Values: []int64{0, 1, 2, 0, 1, 0, 0}}}},
		{Names: []string{"total", "x"}, Levels: []*querierv1.Level{{Values: []int64{0, 1, 0, 0, 1, 0, 0}},
			{Values: []int64{5, 1, 1, 0, 0, 0, 1}}}},
	} {
		if _, err := FromFlamegraphDiff(bad); err == nil {
			t.Errorf("accepted %v", bad.Levels)
		}
	}
}

// Each side read back is that side's tree, without the rows of the other.
func TestDiffSides(t *testing.T) {
	l, r := NewDiff(tree(diffLeft), tree(diffRight), 0).Sides()
	if got, want := stacks(l), stacks(tree(diffLeft)); !reflect.DeepEqual(got, want) {
		t.Errorf("left side %v, want %v", got, want)
	}
	if got, want := stacks(r), stacks(tree(diffRight)); !reflect.DeepEqual(got, want) {
		t.Errorf("right side %v, want %v", got, want)
	}
}
