package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"24h": 24 * time.Hour, "90m": 90 * time.Minute, "1.5h": 90 * time.Minute, "24h0m0s": 24 * time.Hour,
		"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "1w": 7 * 24 * time.Hour,
	} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "7", "d", "soon", "12h1d"} {
		if _, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q): no error", in)
		}
	}
}

func TestParseTime(t *testing.T) {
	for in, want := range map[string]time.Time{
		"2026-11-30T12:00:00Z":      time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		"2026-11-30T12:00:00+01:00": time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC),
		"2026-11-30T12:00:00":       time.Date(2026, 11, 30, 12, 0, 0, 0, time.Local),
		"2026-11-30T12:00":          time.Date(2026, 11, 30, 12, 0, 0, 0, time.Local),
		"2026-11-30":                time.Date(2026, 11, 30, 0, 0, 0, 0, time.Local),
	} {
		if got, err := parseTime(in); err != nil || !got.Equal(want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "30/11/2026", "2026-13-01"} {
		if _, err := parseTime(in); err == nil {
			t.Errorf("parseTime(%q): no error", in)
		}
	}
}

// --to takes a date, --since a duration in days or the time the range
// starts; the report's range is what was asked.
func TestJobRangeFlags(t *testing.T) {
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// 06:00 UTC is inside a range of local days in every time zone.
	pyro := pyroWith(t, end, map[string][]time.Time{"4242": {end.Add(-6 * time.Hour)}})
	utc := func(y, m, d int) string {
		return time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.Local).UTC().Format(time.RFC3339)
	}
	for _, tc := range []struct {
		since, to string
		from      string // want
		upTo      string
	}{
		{"2d", "2026-12-01", utc(2026, 11, 29), utc(2026, 12, 1)},
		{"1d12h", "2026-12-01T00:00:00", time.Date(2026, 11, 29, 12, 0, 0, 0, time.Local).UTC().Format(time.RFC3339), utc(2026, 12, 1)},
		{"2026-11-29", "2026-12-01", utc(2026, 11, 29), utc(2026, 12, 1)},
		{"2026-11-30T00:00:00Z", "2026-11-30T13:00:00Z", "2026-11-30T00:00:00Z", "2026-11-30T13:00:00Z"},
	} {
		code, stdout, stderr := run("job", "4242", "--pyroscope-url", pyro, "--since", tc.since, "--to", tc.to, "--json")
		var rep struct{ From, To string }
		if err := json.Unmarshal([]byte(stdout), &rep); code != exitOK || err != nil || rep.From != tc.from || rep.To != tc.upTo {
			t.Errorf("--since %s --to %s: exit %d, from %s to %s; want %s to %s\n%s", tc.since, tc.to, code, rep.From, rep.To, tc.from, tc.upTo, stderr)
		}
	}
	for _, tc := range []struct{ args, want []string }{
		{[]string{"--since", "2026-12-02", "--to", "2026-12-01"}, []string{"--since 2026-12-02T00:00:00", "is not before --to"}},
		{[]string{"--since", "0s"}, []string{"--since must be positive"}},
		{[]string{"--to", "tomorrow"}, []string{`--to: "tomorrow" is not a time`}},
		{[]string{"--since", "soon"}, []string{"want a duration (24h, 7d) or a time"}},
	} {
		code, _, stderr := run(append([]string{"job", "4242", "--pyroscope-url", pyro}, tc.args...)...)
		for _, w := range tc.want {
			if code != exitUsage || !strings.Contains(stderr, w) {
				t.Errorf("%q: exit %d, stderr lacks %q:\n%s", tc.args, code, w, stderr)
			}
		}
	}
	// A job before a --since given as a time: the hint says to start earlier.
	code, _, stderr := run("job", "4242", "--pyroscope-url", pyro, "--since", "2026-11-30T11:45:00Z", "--to", "2026-11-30T13:00:00Z")
	if code != exitNoData || !strings.Contains(stderr, "--since 2026-11-30T11:45:00Z)") || !strings.Contains(stderr, "needs an earlier --since") {
		t.Errorf("no data after --since: exit %d\n%s", code, stderr)
	}
}
