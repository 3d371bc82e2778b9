package logx

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"plain", 0, "plain"},
		{"  two\nlines\r\n\tand a tab  ", 0, "two lines and a tab"},
		{"esc \x1b[31mred\x1b[0m", 0, "esc \uFFFD[31mred\uFFFD[0m"},
		{"bidi \u202eevil", 0, "bidi \uFFFDevil"},
		{"bad \xff byte", 0, "bad \uFFFD byte"},
		{"0123456789", 8, "01234…"},
		{"0123456789", 10, "0123456789"},
		{"ééééé", 6, "é…"}, // never cuts a rune in two
	} {
		if got := Line(tc.in, tc.limit); got != tc.want {
			t.Errorf("Line(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
		if tc.limit > 0 && len(Line(tc.in, tc.limit)) > tc.limit {
			t.Errorf("Line(%q, %d) is longer than %d", tc.in, tc.limit, tc.limit)
		}
	}
}

// TestErrJoinedRepeatsOnce: seven profiles that failed alike make one
// line, with the count, not seven lines glued with \n.
func TestErrJoinedRepeatsOnce(t *testing.T) {
	same := errors.New("pyroscope: spool full")
	var errs []error
	for range 7 {
		errs = append(errs, same)
	}
	errs = append(errs, errors.New("disk\nfull"))
	got := Err(errors.Join(errs...))
	if want := "pyroscope: spool full (7 times); disk; full"; got != want {
		t.Errorf("Err = %q, want %q", got, want)
	}
	long := Err(errors.New(strings.Repeat("x", 10*MaxErr)))
	if len(long) > MaxErr || strings.ContainsAny(long, "\n\r") {
		t.Errorf("Err of a long error: %d bytes", len(long))
	}
	if Err(nil) != "" {
		t.Error("Err(nil) is not empty")
	}
}

func TestJoin(t *testing.T) {
	if Join(nil, nil) != nil {
		t.Fatal("Join of nils is not nil")
	}
	a := fmt.Errorf("profile: %w", fs.ErrPermission)
	err := Join(a, nil, a, errors.New("two\nlines"), a)
	if got, want := err.Error(), "profile: permission denied (3 times); two lines"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Error("errors.Is does not see the joined errors")
	}
}

// fakeClock is the limiter's clock: time passes only when a test says so.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time      { return c.t }
func (c *fakeClock) Add(d time.Duration) { c.t = c.t.Add(d) }
func newLimiter(c *fakeClock) (*Limiter, *bytes.Buffer) {
	var b bytes.Buffer
	h := slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	return NewLimiter(slog.New(h), Options{Every: 5 * time.Minute, Now: c.Now}), &b
}

func lines(b *bytes.Buffer) []string {
	s := strings.TrimRight(b.String(), "\n")
	b.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestLimiter: an error is logged at once, its repeats counted; it is
// logged again once the period has passed, with the count and when it was
// first seen; another error is logged at once; a success says after how
// many failures, and the next failure is new again.
func TestLimiter(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	c := &fakeClock{t: t0}
	l, b := newLimiter(c)
	down := errors.New(`Post "http://prom:9090/api/v1/write": dial tcp 10.0.0.1:9090: connect: connection refused`)

	if !l.Warn("send", "remote write unavailable", down, "backend", "prom") {
		t.Error("the first error was not logged")
	}
	first := lines(b)
	if want := `level=WARN msg="remote write unavailable" err="Post \"http://prom:9090/api/v1/write\": dial tcp 10.0.0.1:9090: connect: connection refused" backend=prom`; len(first) != 1 || first[0] != want {
		t.Fatalf("first error logged as\n%q\nwant\n%q", first, want)
	}
	// Every 15 s for 4m45s: counted, not logged.
	for range 19 {
		c.Add(15 * time.Second)
		if l.Warn("send", "remote write unavailable", down) {
			t.Fatalf("a repeat at %v was logged", c.t.Sub(t0))
		}
	}
	if got := lines(b); got != nil {
		t.Fatalf("repeats within the period logged: %q", got)
	}
	c.Add(15 * time.Second) // 5 min after the first
	if !l.Warn("send", "remote write unavailable", down) {
		t.Fatal("the repeat after the period was not logged")
	}
	if got, want := lines(b), `level=WARN msg="remote write unavailable" err="Post \"http://prom:9090/api/v1/write\": dial tcp 10.0.0.1:9090: connect: connection refused" repeats=20 since=2026-03-02T08:00:00.000Z`; len(got) != 1 || got[0] != want {
		t.Fatalf("repeat logged as\n%q\nwant\n%q", got, want)
	}
	// The same error naming another address is the same error; another
	// error is new and logged at once.
	c.Add(time.Second)
	if l.Warn("send", "remote write unavailable", errors.New(`Post "http://prom:9090/api/v1/write": dial tcp 10.0.0.2:9090: connect: connection refused`)) {
		t.Error("a repeat that differs only in its numbers was logged as new")
	}
	if !l.Warn("send", "remote write unavailable", errors.New("HTTP 503 Service Unavailable")) {
		t.Error("a new error was not logged at once")
	}
	// Another key is independent.
	if !l.Error("drop:rejected", "dropping metrics", errors.New("out of order sample")) {
		t.Error("an error under another key was not logged")
	}
	lines(b)

	c.Add(time.Minute)
	if !l.OK("send", "remote write reachable again") {
		t.Fatal("the recovery was not logged")
	}
	if got, want := lines(b), `level=INFO msg="remote write reachable again (recovered after 23 failures)" failures=23 since=2026-03-02T08:00:00.000Z`; len(got) != 1 || got[0] != want {
		t.Fatalf("recovery logged as\n%q\nwant\n%q", got, want)
	}
	if l.OK("send", "remote write reachable again") {
		t.Error("a second success logged a recovery")
	}
	if !l.Warn("send", "remote write unavailable", down) {
		t.Error("after a recovery, a failure is not logged at once")
	}
}

// TestLimiterBoundsDistinctErrors: errors that name ever new words share
// one entry past maxDistinct, still logged now and then.
func TestLimiterBoundsDistinctErrors(t *testing.T) {
	c := &fakeClock{t: time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)}
	l, b := newLimiter(c)
	logged := 0
	for i := range 100 {
		if l.Warn("watch", "loading a process failed", fmt.Errorf("file %c%c missing", 'a'+i%26, 'a'+i/26)) {
			logged++
		}
	}
	if logged != maxDistinct+1 {
		t.Errorf("%d of 100 distinct errors logged, want %d", logged, maxDistinct+1)
	}
	if n := len(l.keys["watch"].errs); n != maxDistinct+1 {
		t.Errorf("%d entries kept, want %d", n, maxDistinct+1)
	}
	lines(b)
}

// TestLimiterDisabledLevel: below the handler's level nothing is written,
// and the failures are still counted.
func TestLimiterDisabledLevel(t *testing.T) {
	c := &fakeClock{t: time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)}
	var b bytes.Buffer
	l := NewLimiter(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelError})), Options{Now: c.Now})
	l.Warn("k", "m", errors.New("e"))
	l.Warn("k", "m", errors.New("e"))
	if b.Len() != 0 {
		t.Errorf("logged below the handler's level: %q", b.String())
	}
	if n := l.keys["k"].n; n != 2 {
		t.Errorf("%d failures counted, want 2", n)
	}
}
