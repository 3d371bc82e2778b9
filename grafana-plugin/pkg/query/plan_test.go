package query

import (
	"math/rand/v2"
	"testing"
	"time"
)

// covered is what Pyroscope counts for one SelectSeries call, by its
// documented semantics: the milliseconds [start - step, last point], where
// the last point is the last start + k*step not after end.
func covered(c seriesCall) (lo, hi int64) {
	s, start, end := c.Step.Milliseconds(), c.Start.UnixMilli(), c.End.UnixMilli()
	return start - s, start + (end-start)/s*s
}

// checkPlan asserts that calls count each millisecond of [from, to) once
// and nothing else, in calls the server accepts.
func checkPlan(t *testing.T, from, to int64, step, maxLen time.Duration, calls []seriesCall) {
	t.Helper()
	next := from
	for i, c := range calls {
		if c.Step < time.Millisecond || c.End.Before(c.Start) || maxLen > 0 && c.End.Sub(c.Start) > maxLen {
			t.Fatalf("[%d, %d) step %v max %v: call %d %+v is refused by the server", from, to, step, maxLen, i, c)
		}
		lo, hi := covered(c)
		if lo != next {
			t.Fatalf("[%d, %d) step %v max %v: call %d covers from %d, want %d (%+v)", from, to, step, maxLen, i, lo, next, calls)
		}
		next = hi + 1
	}
	if want := to; len(calls) > 0 && next != want || len(calls) == 0 && to-from >= 2 {
		t.Fatalf("[%d, %d) step %v max %v: covered up to %d (%d calls)", from, to, step, maxLen, next, len(calls))
	}
}

func TestSeriesPlanCoversTheRangeOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		from := int64(1796019480000) + r.Int64N(1e6)
		to := from + r.Int64N(5000)
		step := time.Duration(1+r.Int64N(400)) * time.Millisecond
		maxLen := time.Duration(r.Int64N(3000)) * time.Millisecond
		if maxLen == time.Millisecond {
			maxLen = 0 // the engine never asks for less than a second
		}
		checkPlan(t, from, to, step, maxLen, seriesPlan(time.UnixMilli(from), time.UnixMilli(to), step, maxLen))
		checkPlan(t, from, to, 0, maxLen, totalsPlan(time.UnixMilli(from), time.UnixMilli(to), maxLen))
	}
}

func TestPlansForAWeek(t *testing.T) {
	to := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	from := to.Add(-7 * 24 * time.Hour)
	sp := spans(from, to, 24*time.Hour)
	if len(sp) != 7 || sp[0].To.Sub(sp[0].From) != 24*time.Hour || !sp[6].To.Equal(to) {
		t.Errorf("7 days in 24 h spans: %v", sp)
	}
	if got := spans(from, to, 0); len(got) != 1 {
		t.Errorf("no limit: %d spans", len(got))
	}
	// 100 points over a week: steps of 6048 s, 15 to a call, and the
	// remainder as a last point.
	calls := seriesPlan(from, to, 6048*time.Second, 24*time.Hour)
	if len(calls) != 8 || calls[0].Step != 6048*time.Second || !calls[7].End.Equal(to.Add(-time.Millisecond)) {
		t.Errorf("%d calls: %+v", len(calls), calls)
	}
	if got := totalsPlan(from, to, 24*time.Hour); len(got) != 7 {
		t.Errorf("totals: %d calls", len(got))
	}
}
