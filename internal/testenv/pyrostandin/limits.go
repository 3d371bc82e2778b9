package pyrostandin

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/common/model"
)

// limits are the server's tenant limits that the project depends on, with
// Pyroscope's defaults.
type limits struct {
	now                              func() time.Time
	maxQueryLength                   time.Duration
	rejectOlderThan, rejectNewerThan time.Duration
	block                            time.Duration // label queries see whole blocks of this span
}

func defaultLimits() limits {
	return limits{now: time.Now, maxQueryLength: 24 * time.Hour,
		rejectOlderThan: time.Hour, rejectNewerThan: 10 * time.Minute, block: time.Hour}
}

// checkRange validates a query's [start, end] (ms) as every querier call
// does before anything else, with the server's messages.
func (l *limits) checkRange(start, end int64) error {
	switch {
	case start == 0 || end == 0:
		return invalid("missing time range in the query")
	case start > end:
		return invalid("query start time is after end time")
	}
	if l.maxQueryLength > 0 {
		if d := time.Duration(end-start) * time.Millisecond; d > l.maxQueryLength {
			return invalid("the query time range exceeds the limit (max_query_length, actual: %s, limit: %s)",
				d, model.Duration(l.maxQueryLength))
		}
	}
	return nil
}

// window is the ingestion window at one moment, in ms; 0 is unbounded.
type window struct{ from, to int64 }

func (l *limits) ingestionWindow() window {
	now := l.now().UnixMilli()
	var w window
	if l.rejectOlderThan > 0 {
		w.from = now - l.rejectOlderThan.Milliseconds()
	}
	if l.rejectNewerThan > 0 {
		w.to = now + l.rejectNewerThan.Milliseconds()
	}
	return w
}

// check says why a profile stamped tsNanos is outside the window. The
// bounds are exclusive, compared in milliseconds.
func (w window) check(tsNanos int64, ls labelSet) error {
	t := tsNanos / 1e6
	if (w.from == 0 || t > w.from) && (w.to == 0 || t < w.to) {
		return nil
	}
	var detail string
	switch {
	case w.to == 0:
		detail = "the ingestion window starts at " + formatMillis(w.from)
	case w.from == 0:
		detail = "the ingestion window ends at " + formatMillis(w.to)
	default:
		detail = "the ingestion window starts at " + formatMillis(w.from) + " and ends at " + formatMillis(w.to)
	}
	return fmt.Errorf("profile with labels '%s' is outside of ingestion window (profile timestamp: %s, %s)", ls, formatMillis(t), detail)
}

func formatMillis(ms int64) string { return time.UnixMilli(ms).UTC().String() }

// blockSpan widens [start, end] (ms) to the blocks it touches, which is
// what a label query sees.
func (l *limits) blockSpan(start, end int64) (int64, int64) {
	b := l.block.Milliseconds()
	if b <= 0 {
		return start, end
	}
	return start - mod(start, b), end - mod(end, b) + b - 1
}

func mod(a, b int64) int64 { return (a%b + b) % b }

var errStep = errors.New("step must be >= 1ms")
