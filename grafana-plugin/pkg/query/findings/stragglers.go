package findings

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Stragglers are the ranks of a multi-rank job (MPI, torchrun) that take
// longer than the others where the job spends its time. Ranks meet at
// every collective call, so the job runs at its slowest rank's pace: a
// rank that spends twice the median rank's time in a function makes the
// others wait, which shows as their time in the collective, not in the
// function. Each rank is judged against the median rank, place by place
// (the job's top functions by CPU time; the calls its threads blocked in,
// from the blocked off-CPU profile, where there is one), so that the
// straggler is named with the function where it differs.

// MaxStragglerAbove bounds the StragglerAbove setting: past it, no rank
// would ever be named.
const MaxStragglerAbove = 100

// MinRanks is the fewest ranks a job's stragglers are judged among. Each
// rank is judged against the median of the others, so that of two ranks
// the one twice the other's time is named (against the median of all
// two, their mean, each would be as far from it as the other).
const MinRanks = 2

// A finding names at most namedStragglers ranks of a job, those with the
// most time over the median first; and a rank only where its time over
// the median is at least minStragglerShare of the median rank's whole
// time, so that a function the job barely runs names nobody.
const (
	namedStragglers   = 5
	minStragglerShare = 0.05
)

// Place is where a job spends time: a function, or, for blocked time, the
// call that blocked and its caller (a Wait).
type Place struct {
	Function string `json:"function"`
	Caller   string `json:"caller,omitempty"`
}

func (p Place) String() string {
	s := "`" + p.Function + "`"
	if p.Caller != "" {
		s += " under `" + p.Caller + "`"
	}
	return s
}

// RankTimes is one profile type's time per rank of a job, in the places
// the job as a whole spends the most.
type RankTimes struct {
	// What the times are, as a summary names them: "CPU time", "blocked
	// time".
	What   string
	Places []Place
	Ranks  []RankTime
}

// What the CPU and blocked times are called (RankTimes.What).
const (
	CPUTime     = "CPU time"
	BlockedTime = "blocked time"
)

// RankTime is one rank's time, in nanoseconds: in all, and in each of
// RankTimes.Places, in their order.
type RankTime struct {
	Rank  string
	Total int64
	In    []int64
}

// RankedJob is a job whose profiles name their ranks.
type RankedJob struct {
	ID, User, Name string
	Times          []RankTimes
}

// straggler is a rank over the median in one place.
type straggler struct {
	what             string
	rank             string
	place            Place
	time, median     float64
	excess, ratio    float64
	ranks            int
	medianRankTotals float64
}

// Stragglers returns the job's straggler findings under t (zero fields:
// defaults): per rank, the place where its time is furthest over the
// median of the other ranks', where that is more than StragglerAbove times it
// (which must be above 0: a place most ranks never reach is one rank's
// work, not a straggler). Fewer than MinRanks ranks name none.
func Stragglers(j RankedJob, t Thresholds) []Finding {
	t = t.WithDefaults()
	var found []straggler
	// What is material is judged against the ranks' work, their CPU time
	// where it is known: a rank that blocks a few milliseconds longer
	// than the others at its start is no straggler, whatever the ratio.
	var work []float64
	for _, rt := range j.Times {
		if rt.What == CPUTime {
			work = rankTotals(rt)
		}
	}
	for _, rt := range j.Times {
		found = append(found, stragglersOf(rt, t, work)...)
	}
	slices.SortStableFunc(found, func(a, b straggler) int {
		return cmp.Or(cmp.Compare(b.excess/b.medianRankTotals, a.excess/a.medianRankTotals), CompareRanks(a.rank, b.rank))
	})
	found = found[:min(len(found), namedStragglers)]
	out := make([]Finding, 0, len(found))
	for _, s := range found {
		out = append(out, Finding{Kind: Straggler, Severity: Warning, JobID: j.ID, User: j.User, Name: j.Name,
			Rank: s.rank, Function: s.place.Function, Value: s.ratio, Threshold: t.StragglerAbove,
			Summary: fmt.Sprintf("rank %s spent %.1f× the other ranks' median %s in %s (%s against %s, of %d ranks)",
				s.rank, s.ratio, s.what, s.place, secs(s.time), secs(s.median), s.ranks),
			Advice: fmt.Sprintf("The other ranks wait for rank %s at each synchronisation: compare it with them (a diff query, or slurmscope diff), "+
				"and look for uneven work or data, or a slower or busier node.", s.rank),
			Numbers: []Number{{"rank_time", s.time, "ns"}, {"median_rank_time", s.median, "ns"}, {"ratio_to_median", s.ratio, "short"},
				{"ranks", float64(s.ranks), "short"}}})
	}
	return out
}

// stragglersOf finds, in one profile type, each rank's place furthest over
// the median where it is a straggler.
func stragglersOf(rt RankTimes, t Thresholds, work []float64) []straggler {
	n := len(rt.Ranks)
	if n < MinRanks {
		return nil
	}
	totals := rankTotals(rt)
	best := map[int]straggler{} // by rank index
	for p, place := range rt.Places {
		in := make([]float64, n)
		for i, r := range rt.Ranks {
			if p < len(r.In) {
				in[i] = float64(r.In[p])
			}
		}
		for i, v := range in {
			med, medTotal := medianOfOthers(in, i), medianOfOthers(totals, i)
			if med <= 0 || medTotal <= 0 {
				continue
			}
			material := medTotal
			if len(work) == n {
				material = max(material, medianOfOthers(work, i))
			}
			excess := v - med
			if v <= t.StragglerAbove*med || excess < minStragglerShare*material {
				continue
			}
			if b, ok := best[i]; ok && b.excess >= excess {
				continue
			}
			best[i] = straggler{what: rt.What, rank: rt.Ranks[i].Rank, place: place, time: v, median: med,
				excess: excess, ratio: v / med, ranks: n, medianRankTotals: medTotal}
		}
	}
	out := make([]straggler, 0, len(best))
	for _, s := range best {
		out = append(out, s)
	}
	return out
}

// rankTotals is each rank's whole time in rt.
func rankTotals(rt RankTimes) []float64 {
	totals := make([]float64, len(rt.Ranks))
	for i, r := range rt.Ranks {
		totals[i] = float64(r.Total)
	}
	return totals
}

// medianOfOthers is the median of vs without vs[i]: a rank's peers.
func medianOfOthers(vs []float64, i int) float64 {
	return Median(append(slices.Clone(vs[:i]), vs[i+1:]...))
}

// Median is the middle value of vs, or the mean of the two middle ones:
// what stragglers are judged against.
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// CompareRanks orders ranks as numbers where they are (2 before 10).
func CompareRanks(a, b string) int {
	if len(a) != len(b) && isDigits(a) && isDigits(b) {
		return cmp.Compare(len(a), len(b))
	}
	return strings.Compare(a, b)
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// secs prints nanoseconds as seconds.
func secs(ns float64) string { return fmt.Sprintf("%.1fs", ns/1e9) }
