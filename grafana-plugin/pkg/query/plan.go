package query

import (
	"time"
)

// How a query's [From, To) becomes Pyroscope calls.
//
// Pyroscope's bounds are milliseconds, both inclusive (compared with the
// profiles' nanosecond stamps), and it refuses a call whose end - start is
// over max_query_length (1 day by default). SelectSeries reads
// [start - step, end] and puts a point at start + k*step (k >= 0, up to
// end) summing (t - step, t]; the first point also takes start - step
// itself, and nothing after the last point counts. The plans below cover
// [From, To) exactly with calls the server accepts: a profile counts once
// if From <= its time < To, in milliseconds.

// span is a piece of a range, [From, To).
type span struct{ From, To time.Time }

// last is the inclusive end Pyroscope takes for a span.
func (s span) last() time.Time { return s.To.Add(-time.Millisecond) }

// spans splits [from, to) into as few equal spans as fit maxLen (a span's
// inclusive length, to - from - 1 ms, must not exceed it). Nothing comes
// back for an empty range.
func spans(from, to time.Time, maxLen time.Duration) []span {
	l := to.Sub(from).Milliseconds()
	if l <= 0 {
		return nil
	}
	per := maxLen.Milliseconds() + 1
	if maxLen <= 0 || per >= l {
		return []span{{from, to}}
	}
	n := (l + per - 1) / per
	out := make([]span, 0, n)
	start := from
	for i := int64(0); i < n; i++ {
		// The first l%n spans take one more millisecond.
		d := l / n
		if i < l%n {
			d++
		}
		end := start.Add(time.Duration(d) * time.Millisecond)
		out = append(out, span{start, end})
		start = end
	}
	return out
}

// seriesCall is one SelectSeries request: Start and End are the API's,
// Step its step.
type seriesCall struct {
	Start, End time.Time
	Step       time.Duration
}

// seriesPlan covers [from, to) with points step apart: full steps from
// from on, and the remainder (shorter than a step) as one last point at
// to - 1 ms. Each call holds as many steps as max_query_length allows.
// A range under 2 ms cannot be asked for and plans nothing.
func seriesPlan(from, to time.Time, step, maxLen time.Duration) []seriesCall {
	s := step.Milliseconds()
	if s < 1 {
		s = 1
	}
	// A call of m steps starting at p covers [p, p + m*s + 1 ms): its
	// first point takes p itself too. Its checked length is (m-1)*s.
	perCall := int64(1 << 62)
	if maxLen > 0 {
		perCall = maxLen.Milliseconds()/s + 1
	}
	ms := func(t int64) time.Time { return time.UnixMilli(t) }
	p, end := from.UnixMilli(), to.UnixMilli()
	var out []seriesCall
	for {
		rest := end - p
		m := min(perCall, (rest-1)/s)
		if m < 1 {
			break
		}
		if rest-(m*s+1) == 1 {
			// A 1 ms remainder cannot be a call of its own.
			if m == 1 {
				break
			}
			m--
		}
		out = append(out, seriesCall{ms(p + s), ms(p + m*s), time.Duration(s) * time.Millisecond})
		p += m*s + 1
	}
	if rest := end - p; rest >= 2 {
		// One point for [p, end): step rest - 1 from end - 1 ms.
		out = append(out, seriesCall{ms(end - 1), ms(end - 1), time.Duration(rest-1) * time.Millisecond})
	}
	return out
}

// totalsPlan asks for one point per span: the totals of [from, to). Like
// seriesPlan, it plans nothing for a range under 2 ms.
func totalsPlan(from, to time.Time, maxLen time.Duration) []seriesCall {
	var out []seriesCall
	for _, sp := range spans(from, to, maxLen) {
		if d := sp.To.Sub(sp.From); d >= 2*time.Millisecond {
			out = append(out, seriesCall{sp.last(), sp.last(), d - time.Millisecond})
		}
	}
	return out
}
