package query

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
)

func mustFilter(t testing.TB, src string) *filter.Filter {
	t.Helper()
	f, err := filter.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// diffRows lists a diff's rows as "level label left/leftSelf right/rightSelf".
func diffRows(d flame.Diff) []string {
	var out []string
	for i := range d.Levels {
		out = append(out, fmt.Sprintf("%d %s %d/%d %d/%d", d.Levels[i], d.Labels[i], d.Left[i], d.LeftSelf[i], d.Right[i], d.RightSelf[i]))
	}
	return out
}

// twoJobs holds job 1 (main;a 30 s, main;b 10 s, user u1) and job 2
// (main;a 20 s, main;c 40 s, user u2), ten minutes apart.
func twoJobs(t *testing.T) standin {
	s := newStandin(t, time.Hour)
	s.push(t, prof{now.Add(-10 * time.Minute), "1", "n1", map[string]int64{"main;a": 30e9, "main;b": 10e9}},
		prof{now.Add(-20 * time.Minute), "2", "n2", map[string]int64{"main;a": 20e9, "main;c": 40e9}})
	return s
}

var wantJobDiff = []string{
	"0 total 40000000000/0 60000000000/0",
	"1 main 40000000000/0 60000000000/0",
	"2 a 30000000000/30000000000 20000000000/20000000000",
	"2 b 10000000000/10000000000 0/0",
	"2 c 0/0 40000000000/40000000000", // only job 2 calls c: all of it added
}

// Job 1 against job 2: the function only job 2 calls shows as added, its
// whole value on the right and nothing on the left. One selector over one
// chunk a side is one Diff call; the same sides as two selectors on the
// left are merged here, to the same answer.
func TestDiffOfTwoJobs(t *testing.T) {
	s := twoJobs(t)
	e := &Engine{Profiles: s.profile}
	r := Range{From: now.Add(-time.Hour), To: now}
	right := Side{Filter: mustFilter(t, `slurm.job.id == "2"`), Range: r}
	d, err := e.Diff(context.Background(), Scope{}, CPUProfileType, Side{Filter: mustFilter(t, `slurm.job.id == "1"`), Range: r}, right, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if got := diffRows(d); !reflect.DeepEqual(got, wantJobDiff) {
		t.Errorf("job 1 against job 2:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantJobDiff, "\n"))
	}
	if n := s.profile.calls.Load(); n != 1 {
		t.Errorf("%d calls for one selector a side, want one Diff", n)
	}
	s.profile.calls.Store(0)
	twoSels := Side{Filter: mustFilter(t, `slurm.job.id == "1" || host.name == "nowhere"`), Range: r}
	merged, err := e.Diff(context.Background(), Scope{}, CPUProfileType, twoSels, right, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(merged, d) {
		t.Errorf("merged here:\n%s\nthe server's:\n%s", strings.Join(diffRows(merged), "\n"), strings.Join(diffRows(d), "\n"))
	}
	if n := s.profile.calls.Load(); n != 3 {
		t.Errorf("%d calls for two selectors and one, want 3", n)
	}
	// Each side over its own range: job 2's side before it ran is empty.
	early := Side{Filter: right.Filter, Range: Range{From: now.Add(-time.Hour), To: now.Add(-30 * time.Minute)}}
	d, err = e.Diff(context.Background(), Scope{}, CPUProfileType, Side{Filter: mustFilter(t, `slurm.job.id == "1"`), Range: r}, early, 8192)
	if err != nil || d.Left[0] != 40e9 || d.Right[0] != 0 {
		t.Errorf("job 2 before it ran: %v, %v", diffRows(d), err)
	}
}

// The query's scope, its ownership included, narrows both sides: user u1
// sees job 1 on the left and nothing of u2's job 2 on the right.
func TestDiffKeepsOwnershipOnBothSides(t *testing.T) {
	s := twoJobs(t)
	e := &Engine{Profiles: s.profile}
	r := Range{From: now.Add(-time.Hour), To: now}
	owned := Scope{Restricted: true, Owner: "u1"}
	d, err := e.Diff(context.Background(), owned, CPUProfileType, Side{Filter: mustFilter(t, `slurm.job.id == "2"`), Range: r},
		Side{Filter: mustFilter(t, `slurm.job.id == "1"`), Range: r}, 0)
	if err != nil || d.Left[0] != 0 || d.Right[0] != 40e9 {
		t.Errorf("u1's diff of job 2 against job 1: %v, %v", diffRows(d), err)
	}
	if _, err := e.Diff(context.Background(), Scope{Restricted: true}, CPUProfileType, Side{Range: r}, Side{Range: r}, 0); !errors.Is(err, ErrNoLogin) {
		t.Errorf("no login: %v", err)
	}
}

// Both sides' calls count against MaxCalls, refused before any is made.
func TestDiffCallBudget(t *testing.T) {
	s := twoJobs(t)
	e := &Engine{Profiles: s.profile, MaxCalls: 3}
	// Three days: three chunks on the left, one on the right.
	left := Side{Filter: mustFilter(t, `slurm.job.id == "1"`), Range: Range{From: now.Add(-72 * time.Hour), To: now}}
	right := Side{Filter: mustFilter(t, `slurm.job.id == "2"`), Range: Range{From: now.Add(-time.Hour), To: now}}
	_, err := e.Diff(context.Background(), Scope{}, CPUProfileType, left, right, 0)
	want := "too many backend calls: this query needs 4 Pyroscope calls (3 on the left and 1 on the right"
	if !errors.Is(err, ErrTooManyCalls) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("4 calls over 3: %v", err)
	}
	if n := s.profile.calls.Load(); n != 0 {
		t.Errorf("the refused diff made %d calls", n)
	}
	e.MaxCalls = 4
	d, err := e.Diff(context.Background(), Scope{}, CPUProfileType, left, right, 0)
	if err != nil || !reflect.DeepEqual(diffRows(d), wantJobDiff) {
		t.Errorf("4 calls: %v, %v", diffRows(d), err)
	}
}

// Shares, not times, are compared: c went from nothing to two thirds of
// the right side, a from three quarters to a third.
func TestChanges(t *testing.T) {
	l, r := flame.New(), flame.New()
	l.Add([]string{"main", "a"}, 30)
	l.Add([]string{"main", "b"}, 10)
	r.Add([]string{"main", "a"}, 20)
	r.Add([]string{"main", "c"}, 40)
	grew, shrank := Changes(flame.NewDiff(l, r, 0), 0)
	if len(grew) != 1 || grew[0].Name != "c" || grew[0].LeftSelf != 0 || grew[0].RightSelf != 40 || math.Abs(grew[0].Change-2.0/3) > 1e-9 {
		t.Errorf("grew %+v", grew)
	}
	if len(shrank) != 2 || shrank[0].Name != "a" || shrank[1].Name != "b" || math.Abs(shrank[0].Change-(1.0/3-0.75)) > 1e-9 {
		t.Errorf("shrank %+v", shrank)
	}
	if _, shrank := Changes(flame.NewDiff(l, r, 0), 1); len(shrank) != 1 {
		t.Errorf("at most 1: %+v", shrank)
	}
}
