package findings

import (
	"strconv"
	"strings"
	"testing"
)

// ranked is job 42 of four ranks whose CPU time goes to matmul and
// allreduce, in seconds: rank 2 computes twice as long as the median rank
// in matmul, and the others wait for it in allreduce.
func ranked() RankedJob {
	const s = 1e9
	cpu := RankTimes{What: CPUTime, Places: []Place{{Function: "matmul"}, {Function: "allreduce"}}, Ranks: []RankTime{
		{"0", 100 * s, []int64{20 * s, 30 * s}},
		{"1", 100 * s, []int64{20 * s, 30 * s}},
		{"2", 100 * s, []int64{40 * s, 10 * s}},
		{"3", 100 * s, []int64{20 * s, 30 * s}},
	}}
	return RankedJob{ID: "42", User: "alice", Name: "train", Times: []RankTimes{cpu}}
}

// The rank at twice the median in one function is named, with that
// function; the ranks that wait for it in the collective are not.
func TestStragglerNamesTheRankAndFunction(t *testing.T) {
	fs := Stragglers(ranked(), Thresholds{})
	if len(fs) != 1 {
		t.Fatalf("findings %+v", fs)
	}
	f := fs[0]
	if f.Kind != Straggler || f.Severity != Warning || f.Rank != "2" || f.Function != "matmul" || f.JobID != "42" || f.User != "alice" {
		t.Errorf("finding %+v", f)
	}
	if want := "rank 2 spent 2.0× the other ranks' median CPU time in `matmul` (40.0s against 20.0s, of 4 ranks)"; f.Summary != want {
		t.Errorf("summary\n %q\nwant\n %q", f.Summary, want)
	}
	if f.Value != 2 || f.Threshold != 1.5 || number(f, "rank_time") != 40e9 || number(f, "median_rank_time") != 20e9 || number(f, "ranks") != 4 {
		t.Errorf("value %v, threshold %v, numbers %+v", f.Value, f.Threshold, f.Numbers)
	}
	if !strings.Contains(f.Advice, "rank 2") {
		t.Errorf("advice %q", f.Advice)
	}
}

// The threshold is strictly above: 2× the median is no straggler at 2,
// and is one just below it.
func TestStragglerThreshold(t *testing.T) {
	if fs := Stragglers(ranked(), Thresholds{StragglerAbove: 2}); len(fs) != 0 {
		t.Errorf("at 2×, with the threshold 2: %+v", fs)
	}
	if fs := Stragglers(ranked(), Thresholds{StragglerAbove: 1.99}); len(fs) != 1 {
		t.Errorf("at 2×, with the threshold 1.99: %+v", fs)
	}
}

func TestStragglerNeedsAMaterialDifference(t *testing.T) {
	// 3× the median, but 0.2 s over it of a median rank's 100 s.
	j := ranked()
	j.Times[0].Places = append(j.Times[0].Places, Place{Function: "log"})
	for i, in := range []int64{1e8, 1e8, 3e8, 1e8} {
		j.Times[0].Ranks[i].In = append(j.Times[0].Ranks[i].In, in)
	}
	if fs := Stragglers(j, Thresholds{}); len(fs) != 1 || fs[0].Function != "matmul" {
		t.Errorf("a function the job barely runs: %+v", fs)
	}
	// Only rank 0 writes checkpoints: its own work, not a straggler.
	j = ranked()
	j.Times[0].Places = []Place{{Function: "checkpoint"}}
	for i := range j.Times[0].Ranks {
		j.Times[0].Ranks[i].In = []int64{0}
	}
	j.Times[0].Ranks[0].In = []int64{50e9}
	if fs := Stragglers(j, Thresholds{}); len(fs) != 0 {
		t.Errorf("a function most ranks never run: %+v", fs)
	}
	// Two ranks: the one at twice the other's time is named (srun -n 2);
	// two alike name neither.
	j = ranked()
	j.Times[0].Ranks = []RankTime{{"0", 40e9, []int64{20e9, 20e9}}, {"1", 60e9, []int64{40e9, 20e9}}}
	if fs := Stragglers(j, Thresholds{}); len(fs) != 1 || fs[0].Rank != "1" || fs[0].Function != "matmul" {
		t.Errorf("two ranks, one at 2x: %+v", fs)
	}
	j = ranked()
	j.Times[0].Ranks = j.Times[0].Ranks[0:2]
	if fs := Stragglers(j, Thresholds{}); len(fs) != 0 {
		t.Errorf("two ranks alike: %+v", fs)
	}
}

// Blocked time names the call that blocked and its caller; a rank over the
// median in both profiles has a finding for each.
func TestStragglerInBlockedTime(t *testing.T) {
	j := ranked()
	j.Times = append(j.Times, RankTimes{What: BlockedTime, Places: []Place{{Function: "read", Caller: "load_batch"}}, Ranks: []RankTime{
		{"0", 10e9, []int64{5e9}}, {"1", 10e9, []int64{5e9}}, {"2", 30e9, []int64{25e9}}, {"3", 10e9, []int64{5e9}},
	}})
	fs := Stragglers(j, Thresholds{})
	if len(fs) != 2 {
		t.Fatalf("findings %+v", fs)
	}
	// 20 s over a median rank's 10 s of blocked time comes before 20 s
	// over 100 s of CPU time.
	if want := "rank 2 spent 5.0× the other ranks' median blocked time in `read` under `load_batch` (25.0s against 5.0s, of 4 ranks)"; fs[0].Summary != want {
		t.Errorf("summary\n %q\nwant\n %q", fs[0].Summary, want)
	}
	if fs[0].Function != "read" || fs[1].Function != "matmul" {
		t.Errorf("functions %q, %q", fs[0].Function, fs[1].Function)
	}
}

// A job names at most five ranks, the furthest over the median first.
func TestStragglersAreFew(t *testing.T) {
	j := RankedJob{ID: "7"}
	rt := RankTimes{What: CPUTime, Places: []Place{{Function: "f"}}}
	for i := range 20 {
		in := int64(10e9)
		if i >= 12 {
			in = int64(i) * 10e9 // ranks 12..19 straggle, 19 the most
		}
		rt.Ranks = append(rt.Ranks, RankTime{Rank: strconv.Itoa(i), Total: 100e9, In: []int64{in}})
	}
	j.Times = []RankTimes{rt}
	fs := Stragglers(j, Thresholds{})
	var got []string
	for _, f := range fs {
		got = append(got, f.Rank)
	}
	if strings.Join(got, ",") != "19,18,17,16,15" {
		t.Errorf("ranks named: %v", got)
	}
}

func TestCompareRanks(t *testing.T) {
	if CompareRanks("2", "10") >= 0 || CompareRanks("10", "9") <= 0 || CompareRanks("a", "b") >= 0 {
		t.Error("ranks are not ordered as numbers")
	}
}

// A rank that blocked 15 ms longer than the others, three times their
// time, is no straggler in a job whose ranks compute for 100 s: what is
// material is judged against the ranks' CPU time.
func TestBlockedStragglerMustMatterAgainstTheWork(t *testing.T) {
	j := ranked()
	j.Times[0].Ranks[2].In = []int64{20e9, 30e9} // no CPU straggler
	j.Times = append(j.Times, RankTimes{What: BlockedTime, Places: []Place{{Function: "[unknown]"}}, Ranks: []RankTime{
		{"0", 5e6, []int64{5e6}}, {"1", 5e6, []int64{5e6}}, {"2", 20e6, []int64{20e6}}, {"3", 5e6, []int64{5e6}},
	}})
	if fs := Stragglers(j, Thresholds{}); len(fs) != 0 {
		t.Errorf("findings %+v", fs)
	}
	// Without CPU times, the blocked times are their own measure.
	j.Times = j.Times[1:]
	if fs := Stragglers(j, Thresholds{}); len(fs) != 1 || fs[0].Rank != "2" {
		t.Errorf("blocked times alone: %+v", fs)
	}
}
