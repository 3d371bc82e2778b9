package flame

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// fixture reads a SelectMergeStacktraces answer recorded from a real
// Pyroscope (internal/testenv/pyrostandin/testdata/fixtures, copied into
// testdata).
func fixture(t testing.TB, name string) *querierv1.FlameGraph {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var resp querierv1.SelectMergeStacktracesResponse
	if err := protojson.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Flamegraph
}

func decode(t testing.TB, fg *querierv1.FlameGraph) *Tree {
	t.Helper()
	tr := New()
	if err := tr.AddFlamegraph(fg); err != nil {
		t.Fatal(err)
	}
	return tr
}

// stacks lists "a;b;c value/self" lines of a tree, for readable diffs.
func stacks(tr *Tree) []string {
	var out []string
	var path []string
	tr.Walk(func(level int, name string, self, total int64) bool {
		path = append(path[:level], name)
		out = append(out, fmt.Sprintf("%s %d/%d", strings.Join(path, ";"), total, self))
		return true
	})
	return out
}

// The scenario of the recording: job 4242 over both pushes, in units of
// 10 ms (see internal/testenv/pyrostandin/testdata/fixtures/README.md).
func job4242() *Tree {
	tr := New()
	const ms10 = 10_000_000
	for _, s := range []struct {
		stack string
		v     int64
	}{
		{"python;train_step;forward;matmul_kernel_launch", 300 + 360},
		{"python;train_step;backward", 120 + 100},
		{"python;train_step;backward;at::native::add_kernel<float>(at::TensorIterator&, c10::Scalar const&)", 80 + 90 + 60 + 40},
		{"python;train_step;forward;attention", 250 + 270},
		{"python;dataloader;decode_jpeg", 90 + 110},
	} {
		tr.Add(strings.Split(s.stack, ";"), s.v*ms10)
	}
	return tr
}

func TestDecodeRecordedFlamegraph(t *testing.T) {
	got := decode(t, fixture(t, "04a-merge-stacktraces-job4242.response.json"))
	if got.Total() != 18_700_000_000 {
		t.Errorf("total %d, want 18.7e9", got.Total())
	}
	if g, w := stacks(got), stacks(job4242()); !reflect.DeepEqual(g, w) {
		t.Errorf("decoded\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}

// The job's graph is the sum of its hosts' graphs: node-a recorded, node-b
// the difference, merged back.
func TestMergeSumsHosts(t *testing.T) {
	job := decode(t, fixture(t, "04a-merge-stacktraces-job4242.response.json"))
	nodeA := decode(t, fixture(t, "04b-merge-stacktraces-job4242-node-a.response.json"))
	if nodeA.Total() != 10_500_000_000 {
		t.Fatalf("node-a total %d, want 10.5e9", nodeA.Total())
	}
	nodeB := New()
	const ms10 = 10_000_000
	nodeB.Add(strings.Split("python;train_step;forward;attention", ";"), (250+270)*ms10)
	nodeB.Add(strings.Split("python;train_step;backward;at::native::add_kernel<float>(at::TensorIterator&, c10::Scalar const&)", ";"), (60+40)*ms10)
	nodeB.Add(strings.Split("python;dataloader;decode_jpeg", ";"), (90+110)*ms10)

	sum := New()
	sum.Merge(nodeA)
	if err := sum.AddFlamegraph(nodeB.Flamegraph()); err != nil {
		t.Fatal(err)
	}
	if g, w := stacks(sum), stacks(job); !reflect.DeepEqual(g, w) {
		t.Errorf("node-a + node-b\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}

// Truncating like max_nodes gives what the server gave for max_nodes=3.
func TestTruncateMatchesServer(t *testing.T) {
	full := decode(t, fixture(t, "04a-merge-stacktraces-job4242.response.json"))
	want := decode(t, fixture(t, "04c-merge-stacktraces-job4242-max-nodes-3.response.json"))
	if g, w := stacks(full.Truncate(3)), stacks(want); !reflect.DeepEqual(g, w) {
		t.Errorf("truncated\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
	if full.Truncate(100) != full || full.Truncate(0) != full {
		t.Error("a tree within the limit must come back as is")
	}
	if got := full.Truncate(4); got.Len() > 4+1+3 {
		t.Errorf("max_nodes 4 kept %d nodes: %v", got.Len(), stacks(got))
	}
	if full.Len() != 10 {
		t.Errorf("Truncate changed its input: %d nodes", full.Len())
	}
	// The server's answer for max_nodes 3, truncated to 3 again, is what
	// it was: the "other" nodes count, but tie with forward at the cutoff.
	if g, w := stacks(want.Truncate(3)), stacks(want); !reflect.DeepEqual(g, w) {
		t.Errorf("the server's 3-node graph truncated to 3 again\n%s\nwant it unchanged\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
	if got := want.Truncate(2); got == want || counted(got) > 2 {
		t.Errorf("max_nodes 2 of the 3-node graph kept %d counted nodes: %v", counted(got), stacks(got))
	}
}

// Every node tied at the cutoff stays, as in Pyroscope: asked for 3, the
// tree keeps main, a and the three nodes of 5.
func TestTruncateKeepsTies(t *testing.T) {
	tr := New()
	for _, s := range []struct {
		stack string
		v     int64
	}{{"main;a", 10}, {"main;b", 5}, {"main;c", 5}, {"main;d", 5}, {"main;e", 1}} {
		tr.Add(strings.Split(s.stack, ";"), s.v)
	}
	want := []string{"total 26/0", "total;main 26/0", "total;main;a 10/10", "total;main;b 5/5", "total;main;c 5/5",
		"total;main;d 5/5", "total;main;other 1/1"}
	if got := stacks(tr.Truncate(3)); !reflect.DeepEqual(got, want) {
		t.Errorf("truncated to 3\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// An "other" counts, and one at the cutoff stays "other", merged with
	// what folds beside it.
	tr.Add([]string{"main", "other"}, 5)
	want = []string{"total 31/0", "total;main 31/0", "total;main;a 10/10", "total;main;b 5/5", "total;main;c 5/5",
		"total;main;d 5/5", "total;main;other 6/6"}
	if got := stacks(tr.Truncate(3)); !reflect.DeepEqual(got, want) {
		t.Errorf("with an other of 5\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// counted is the number of nodes besides the root that are not "other".
func counted(t *Tree) int {
	n := 0
	t.Walk(func(level int, name string, _, _ int64) bool {
		if level > 0 && name != OtherName {
			n++
		}
		return true
	})
	return n
}

// An absent profile type answers an empty graph (08b): one root of 0.
func TestEmptyFlamegraph(t *testing.T) {
	tr := decode(t, fixture(t, "08b-error-unknown-profile-type.response.json"))
	if tr.Total() != 0 || tr.Len() != 1 {
		t.Errorf("empty graph decoded to %v", stacks(tr))
	}
	if err := New().AddFlamegraph(nil); err != nil {
		t.Error(err)
	}
}

func TestRoundTrip(t *testing.T) {
	in := fixture(t, "04a-merge-stacktraces-job4242.response.json")
	tr := decode(t, in)
	again := decode(t, tr.Flamegraph())
	if g, w := stacks(again), stacks(tr); !reflect.DeepEqual(g, w) {
		t.Errorf("round trip\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
	if got := tr.Flamegraph(); got.Total != in.Total || got.MaxSelf != in.MaxSelf {
		t.Errorf("total/maxSelf %d/%d, want %d/%d", got.Total, got.MaxSelf, in.Total, in.MaxSelf)
	}
}

func TestMalformedFlamegraphs(t *testing.T) {
	for name, fg := range map[string]*querierv1.FlameGraph{
		"ragged":       {Names: []string{"total"}, Levels: []*querierv1.Level{{Values: []int64{0, 1, 0}}}},
		"name index":   {Names: []string{"total"}, Levels: []*querierv1.Level{{Values: []int64{0, 1, 0, 7}}}},
		"negative":     {Names: []string{"total"}, Levels: []*querierv1.Level{{Values: []int64{0, -1, 0, 0}}}},
		"self > total": {Names: []string{"total"}, Levels: []*querierv1.Level{{Values: []int64{0, 1, 2, 0}}}},
		"two roots":    {Names: []string{"total"}, Levels: []*querierv1.Level{{Values: []int64{0, 1, 0, 0, 0, 1, 0, 0}}}},
		"orphan": {Names: []string{"total", "a"}, Levels: []*querierv1.Level{
			{Values: []int64{0, 1, 0, 0}}, {Values: []int64{5, 1, 1, 1}}}},
	} {
		if err := New().AddFlamegraph(fg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestGraphBeyondIDs: a graph that would take a tree past its int32 ids
// (maxIDs, lowered here so that the input stays small) is refused whole,
// in names or in boxes (the root box counted); one within it is taken.
func TestGraphBeyondIDs(t *testing.T) {
	defer func(m int) { maxIDs = m }(maxIDs)
	maxIDs = 3
	fg := func(names int, boxes int) *querierv1.FlameGraph {
		g := &querierv1.FlameGraph{Names: []string{"total"}, Levels: []*querierv1.Level{{Values: []int64{0, int64(boxes), 0, 0}}}}
		for i := 1; i < names; i++ {
			g.Names = append(g.Names, fmt.Sprint("f", i))
		}
		var v []int64
		for i := 1; i < boxes; i++ {
			v = append(v, 0, 1, 1, int64(i%names))
		}
		g.Levels = append(g.Levels, &querierv1.Level{Values: v})
		return g
	}
	// The tree holds its root (one node, one name) already.
	for _, c := range []struct{ names, boxes int }{{3, 2}, {2, 3}} {
		tr := New()
		if err := tr.AddFlamegraph(fg(c.names, c.boxes)); err == nil || tr.Len() != 1 || tr.Total() != 0 {
			t.Errorf("%d names, %d boxes: err %v, %d nodes, total %d", c.names, c.boxes, err, tr.Len(), tr.Total())
		}
	}
	tr := New()
	if err := tr.AddFlamegraph(fg(2, 2)); err != nil || tr.Len() != 2 {
		t.Errorf("within the limit: err %v, %d nodes", err, tr.Len())
	}
}

func TestNestedSet(t *testing.T) {
	tr := New()
	tr.Add([]string{"main", "b"}, 3)
	tr.Add([]string{"main", "a"}, 2)
	tr.Add([]string{"main"}, 1)
	s := tr.NestedSet()
	var rows []string
	for i := range s.Levels {
		rows = append(rows, fmt.Sprintf("%d %d %d %s", s.Levels[i], s.Totals[i], s.Selfs[i], s.Labels[i]))
	}
	want := []string{"0 6 0 total", "1 6 1 main", "2 2 2 a", "2 3 3 b"}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows %q, want %q", rows, want)
	}
	back, ok := FromNestedSet(s)
	if !ok || !reflect.DeepEqual(stacks(back), stacks(tr)) {
		t.Errorf("FromNestedSet: %v %v", ok, stacks(back))
	}
	for name, bad := range map[string]NestedSet{
		"level skipped": {Levels: []int64{0, 2}, Totals: []int64{1, 1}, Selfs: []int64{0, 1}, Labels: []string{"total", "x"}},
		"two roots":     {Levels: []int64{0, 0}, Totals: []int64{1, 1}, Selfs: []int64{1, 1}, Labels: []string{"total", "total"}},
		"no root":       {Levels: []int64{1}, Totals: []int64{1}, Selfs: []int64{1}, Labels: []string{"x"}},
		"short column":  {Levels: []int64{0, 1}, Totals: []int64{1, 1}, Selfs: []int64{0}, Labels: []string{"total", "x"}},
	} {
		if _, ok := FromNestedSet(bad); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTopFunctions(t *testing.T) {
	tr := New()
	tr.Add([]string{"main", "f", "f", "g"}, 5)
	tr.Add([]string{"main", "g"}, 3)
	tr.Add([]string{"main"}, 1)
	got := tr.TopFunctions(2)
	want := []Function{{"g", 8, 8}, {"main", 1, 9}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	all := tr.TopFunctions(0)
	for _, f := range all {
		if f.Name == "f" && f.Total != 5 {
			t.Errorf("recursive f counted %d, want 5 (once per stack)", f.Total)
		}
	}
}

// Stacks gives back every stack that was added, with its value, from the
// tree as Pyroscope's format carries it: a node with children and self
// value of its own is a stack too.
func TestStacks(t *testing.T) {
	in := New()
	in.Add([]string{"main", "load", "read"}, 5)
	in.Add([]string{"main", "load"}, 2)
	in.Add([]string{"main", "work"}, 3)
	in.Add([]string{"main", "work"}, 1)
	tr, err := FromFlamegraphs(in.Flamegraph())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	tr.Stacks(func(stack []string, self int64) {
		got = append(got, fmt.Sprintf("%s %d", strings.Join(stack, ";"), self))
	})
	want := []string{"main;load 2", "main;load;read 5", "main;work 4"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stacks %q, want %q", got, want)
	}
}

func TestKthLargest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n < 60; n++ {
		v := make([]int64, n)
		for i := range v {
			v[i] = r.Int64N(10)
		}
		sorted := append([]int64(nil), v...)
		slicesSortDesc(sorted)
		for k := 1; k <= n; k++ {
			c := append([]int64(nil), v...)
			if got := kthLargest(c, k); got != sorted[k-1] {
				t.Fatalf("kthLargest(%v, %d) = %d, want %d", v, k, got, sorted[k-1])
			}
		}
	}
}

func slicesSortDesc(v []int64) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] > v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

// randomGraph builds a flame graph of about n nodes whose frame names are
// drawn from a shared pool, so that graphs of different hosts overlap as a
// job's do.
func randomGraph(r *rand.Rand, n int) *querierv1.FlameGraph {
	tr := New()
	pool := make([]string, 2048)
	for i := range pool {
		pool[i] = fmt.Sprintf("pkg%d.(*Type%d).Method%d", i%37, i%101, i)
	}
	stack := make([]string, 0, 64)
	for tr.Len() < n+1 {
		depth := 1 + r.IntN(40)
		stack = stack[:0]
		for d := 0; d < depth; d++ {
			// Few choices near the root, more deeper down: a realistic shape.
			stack = append(stack, pool[r.IntN(min(len(pool), 2+d*d))])
		}
		tr.Add(stack, 1+r.Int64N(1000)*10_000_000)
	}
	return tr.Truncate(n).Flamegraph()
}

// hostGraphs makes n flame graphs of about size nodes each, as the hosts
// of one job give: the same program (a shared tree of calls), sampled with
// different weights on every host, so that most but not all nodes overlap.
func hostGraphs(r *rand.Rand, n, size int) []*querierv1.FlameGraph {
	base := New()
	if err := base.AddFlamegraph(randomGraph(r, size+size/2)); err != nil {
		panic(err)
	}
	out := make([]*querierv1.FlameGraph, n)
	for i := range out {
		host := New()
		var path []string
		base.Walk(func(level int, name string, self, _ int64) bool {
			path = append(path[:level], name)
			if level > 0 && self > 0 {
				host.Add(path[1:], 1+r.Int64N(2*self))
			}
			return true
		})
		out[i] = host.Truncate(size).Flamegraph()
	}
	return out
}

// BenchmarkMerge16x8192 is the datasource's hot path for a 16-node job:
// decode and merge 16 flame graphs of 8,192 nodes, cap the result at 8,192
// nodes and lay it out as the frame (the flamegraph query type wraps those
// columns). Target: 5 ms. "job" graphs overlap as one program's hosts do;
// "disjoint" graphs share almost no stacks (the worst case: a 130,000-node
// merge).
func BenchmarkMerge16x8192(b *testing.B) {
	for _, tc := range []struct {
		name   string
		graphs func(r *rand.Rand) []*querierv1.FlameGraph
	}{
		{"job", func(r *rand.Rand) []*querierv1.FlameGraph { return hostGraphs(r, 16, 8192) }},
		{"disjoint", func(r *rand.Rand) []*querierv1.FlameGraph {
			gs := make([]*querierv1.FlameGraph, 16)
			for i := range gs {
				gs[i] = randomGraph(r, 8192)
			}
			return gs
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			graphs := tc.graphs(rand.New(rand.NewPCG(42, 7)))
			merged := 0
			for b.Loop() {
				tr, err := FromFlamegraphs(graphs...)
				if err != nil {
					b.Fatal(err)
				}
				merged = tr.Len()
				if s := tr.Truncate(8192).NestedSet(); len(s.Levels) == 0 {
					b.Fatal("empty frame")
				}
			}
			b.ReportMetric(float64(merged), "merged-nodes")
		})
	}
}
