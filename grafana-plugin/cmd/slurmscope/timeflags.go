package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/slurmscope/slurmscope/internal/units"
)

// parseDuration takes Go's durations (90m, 1.5h) led by whole weeks and
// days (7d, 1w, 1d12h), as package units reads every duration flag:
// people count a job's life in days, and Pyroscope's own settings
// (max_query_length) are written that way, as the datasource's are.
func parseDuration(s string) (time.Duration, error) {
	d, err := units.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (e.g. 90m, 36h, 7d, 1d12h)", s)
	}
	return d, nil
}

// timeLayouts are the times a user may give: RFC 3339, and sacct's forms
// (what `sacct -o Start,End` prints, and a bare date), read in local time
// as sacct reads them.
var timeLayouts = []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

// parseTime reads a point in time in one of timeLayouts. A bare date is
// that day's midnight, as sacct's --starttime and --endtime take it.
func parseTime(s string) (time.Time, error) {
	for _, layout := range timeLayouts {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time: want RFC 3339 (2026-11-30T12:00:00Z), 2026-11-30T12:00:00 (local) or 2026-11-30 (local midnight)", s)
}

// durationValue is a flag.Value for parseDuration's durations.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	*d = durationValue(v)
	return err
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

// sinceValue is --since: how far back from --to (a duration), or where the
// range starts (a time).
type sinceValue struct {
	back time.Duration
	from time.Time // set when a time was given
}

func (v *sinceValue) Set(s string) error {
	if d, err := parseDuration(s); err == nil {
		*v = sinceValue{back: d}
		return nil
	}
	t, err := parseTime(s)
	if err != nil {
		return errors.New("want a duration (24h, 7d) or a time (RFC 3339, or 2026-11-30)")
	}
	*v = sinceValue{from: t}
	return nil
}

func (v *sinceValue) String() string {
	if !v.from.IsZero() {
		return v.from.Format(time.RFC3339)
	}
	return v.back.String()
}

// start is where the range that ends at to begins.
func (v sinceValue) start(to time.Time) (time.Time, error) {
	if !v.from.IsZero() {
		if !v.from.Before(to) {
			return time.Time{}, fmt.Errorf("--since %s is not before --to %s", v.from.Format(time.RFC3339), to.Format(time.RFC3339))
		}
		return v.from, nil
	}
	if v.back <= 0 {
		return time.Time{}, errors.New("--since must be positive")
	}
	return to.Add(-v.back), nil
}
