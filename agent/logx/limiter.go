package logx

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// DefaultEvery is how often a Limiter logs an error that keeps coming back.
const DefaultEvery = 5 * time.Minute

// maxDistinct bounds the distinct errors a Limiter keeps per key; past it
// they share one entry, so that errors naming ever new things (a pid, a
// file) cannot grow it.
const maxDistinct = 16

// Limiter logs errors that may repeat every interval (a backend that is
// down, a source that fails to drain): an error is logged the first time
// it is seen under its key, then counted and logged again at most every
// Every, with repeats (how often it came back since it was first seen) and
// since (when that was); once its key succeeds again one info line says
// after how many failures. Nothing is lost silently: the counts go in the
// lines, and callers keep their own counters. It is safe for concurrent use.
type Limiter struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*failing
}

// failing is what a key has failed with since its last success.
type failing struct {
	first time.Time
	n     int               // failures
	errs  map[string]*event // by normalised text
}

type event struct {
	first, logged time.Time
	n             int // occurrences, the first included
}

// Options configures a Limiter.
type Options struct {
	// Every is the least time between two lines of one error; default
	// DefaultEvery.
	Every time.Duration
	// Now is the clock; default time.Now. Tests give a fake one.
	Now func() time.Time
}

// NewLimiter logs to log (nil: slog.Default()).
func NewLimiter(log *slog.Logger, o Options) *Limiter {
	if log == nil {
		log = slog.Default()
	}
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Limiter{log: log, every: o.Every, now: o.Now, keys: map[string]*failing{}}
}

// Log logs msg at level with err (one line, Err) and args, if this error
// is new under key or was last logged Every ago; a repeat carries repeats
// and since. Errors are told apart by their text with the numbers in it
// left out, so that "entry 12" and "entry 13" are one error. It reports
// whether it logged.
func (l *Limiter) Log(level slog.Level, key, msg string, err error, args ...any) bool {
	text := Err(err)
	norm := normalise(text)
	now := l.now()
	l.mu.Lock()
	f := l.keys[key]
	if f == nil {
		f = &failing{first: now, errs: map[string]*event{}}
		l.keys[key] = f
	}
	f.n++
	e := f.errs[norm]
	if e == nil && len(f.errs) >= maxDistinct {
		norm = "\x00other"
		e = f.errs[norm]
	}
	first := e == nil
	if first {
		e = &event{first: now, logged: now}
		f.errs[norm] = e
	}
	e.n++
	due := first || now.Sub(e.logged) >= l.every
	if due {
		e.logged = now
	}
	repeats, since := e.n-1, e.first
	l.mu.Unlock()
	if !due || !l.log.Enabled(context.Background(), level) {
		return due
	}
	attrs := make([]any, 0, len(args)+6)
	if err != nil {
		attrs = append(attrs, "err", text)
	}
	attrs = append(attrs, args...)
	if !first {
		attrs = append(attrs, "repeats", repeats, "since", since)
	}
	l.log.Log(context.Background(), level, msg, attrs...)
	return true
}

// Warn is Log at slog.LevelWarn.
func (l *Limiter) Warn(key, msg string, err error, args ...any) bool {
	return l.Log(slog.LevelWarn, key, msg, err, args...)
}

// Error is Log at slog.LevelError.
func (l *Limiter) Error(key, msg string, err error, args ...any) bool {
	return l.Log(slog.LevelError, key, msg, err, args...)
}

// OK says key succeeded. If it had failed since its last success, one info
// line says so: msg, "(recovered after N failures)", since the first of
// them; the errors of key are then forgotten, and a new failure is logged
// at once. It reports whether it logged.
func (l *Limiter) OK(key, msg string, args ...any) bool {
	l.mu.Lock()
	f := l.keys[key]
	delete(l.keys, key)
	l.mu.Unlock()
	if f == nil {
		return false
	}
	attrs := append([]any{"failures", f.n, "since", f.first}, args...)
	l.log.Info(fmt.Sprintf("%s (recovered after %d %s)", msg, f.n, plural(f.n, "failure", "failures")), attrs...)
	return true
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// normalise leaves the digits out of an error's text: what tells two
// errors apart is what they say, not which pid, entry or port they name.
func normalise(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, s)
}
