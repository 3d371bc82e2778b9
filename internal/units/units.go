// Package units reads and writes the sizes and durations that slurmscope's
// flags take, one parser for the agent and the query CLI: a size as 256MiB
// or 10GB, a duration as 90s, 36h, 7d or 1d12h.
//
// Sizes are a whole number of bytes, optionally followed by a unit written
// exactly as here (case matters: mB would be millibytes, and 10G does not
// say which G it is): B; KiB, MiB, GiB, TiB (powers of 1024); kB, MB, GB,
// TB (powers of 1000), and KB for kB as it is often written. There are no
// fractions and no sign, and no space before the unit.
//
// Durations are Go's (time.ParseDuration: 90m, 1.5h, 250ms, -5s), which
// may be led by whole weeks (w, 7 days) and then whole days (d, 24 hours):
// 2w, 7d, 1d12h, 1w2d6h30m. Days and weeks come first, in that order, as
// Prometheus writes them; a sign, if any, leads the whole duration.
//
// FormatBytes and FormatDuration write what ParseBytes and ParseDuration
// read back exactly, so a flag's help shows a default it takes.
package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// sizeUnits are the units of sizes, largest first and binary before
// decimal, the order FormatBytes prefers among forms of one length.
var sizeUnits = []struct {
	name string
	mult int64
}{
	{"TiB", 1 << 40}, {"TB", 1e12},
	{"GiB", 1 << 30}, {"GB", 1e9},
	{"MiB", 1 << 20}, {"MB", 1e6},
	{"KiB", 1 << 10}, {"kB", 1e3},
}

// sizeMult is the multiplier of a unit as ParseBytes reads it.
func sizeMult(unit string) int64 {
	switch unit {
	case "", "B":
		return 1
	case "KB":
		return 1e3
	}
	for _, u := range sizeUnits {
		if u.name == unit {
			return u.mult
		}
	}
	return 0
}

// ParseBytes reads a size: digits, then optionally a unit (B, KiB, MiB,
// GiB, TiB, kB, KB, MB, GB, TB). Leading and trailing space is ignored.
// A negative size, a fraction, an unknown unit and a size past
// math.MaxInt64 bytes are errors.
func ParseBytes(s string) (int64, error) {
	n, err := parseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	return n, nil
}

func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("a size cannot be negative")
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, errors.New("want a size such as 512MiB, 2GiB or 10GB")
	}
	if i < len(s) && s[i] == '.' {
		return 0, errors.New("a size is a whole number of its unit (1536MiB, not 1.5GiB)")
	}
	mult := sizeMult(s[i:])
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit %q (want B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)", s[i:])
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

// FormatBytes writes n in the shortest form that is exactly n: 268435456
// as 256MiB, 1000 as 1kB, 1536 as 1536. Between forms of one length a
// unit wins over none, a larger unit over a smaller, and binary over
// decimal: 1024 is 1KiB. A negative n, which ParseBytes refuses, is
// written as a plain number.
func FormatBytes(n int64) string {
	plain := strconv.FormatInt(n, 10)
	if n <= 0 {
		return plain
	}
	best := ""
	for _, u := range sizeUnits {
		if n%u.mult != 0 {
			continue
		}
		if s := strconv.FormatInt(n/u.mult, 10) + u.name; best == "" || len(s) < len(best) {
			best = s
		}
	}
	if best == "" || len(plain) < len(best) {
		return plain
	}
	return best
}

const (
	// Day is a day as durations count it: 24 hours.
	Day = 24 * time.Hour
	// Week is 7 days.
	Week = 7 * Day
)

// ParseDuration reads a duration: Go's (time.ParseDuration), optionally
// led by whole weeks (w) and then whole days (d): 7d, 1w, 1d12h, -1d.
// A duration past what time.Duration holds is an error.
func ParseDuration(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	return d, nil
}

var errDuration = errors.New("want a duration such as 90s, 15m, 36h, 7d or 1d12h")

func parseDuration(s string) (time.Duration, error) {
	rest := s
	neg := false
	if rest != "" && (rest[0] == '-' || rest[0] == '+') {
		neg = rest[0] == '-'
		rest = rest[1:]
	}
	var total time.Duration
	lead := false // whether weeks or days were given
	for _, u := range []struct {
		c    byte
		unit time.Duration
	}{{'w', Week}, {'d', Day}} {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 || i == len(rest) || rest[i] != u.c {
			continue
		}
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil || n > int64(math.MaxInt64/u.unit) || time.Duration(n)*u.unit > math.MaxInt64-total {
			return 0, errors.New("too long")
		}
		total += time.Duration(n) * u.unit
		rest = rest[i+1:]
		lead = true
	}
	if !lead {
		// Go's own duration, sign and all.
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, errDuration
		}
		return d, nil
	}
	if rest != "" {
		if rest[0] == '-' || rest[0] == '+' {
			return 0, errDuration // the sign leads the whole duration
		}
		d, err := time.ParseDuration(rest)
		if err != nil {
			return 0, errDuration
		}
		if d > math.MaxInt64-total {
			return 0, errors.New("too long")
		}
		total += d
	}
	if neg {
		total = -total
	}
	return total, nil
}

// FormatDuration writes d as days where it is a whole number of them
// (168h as 7d), and otherwise as time.Duration.String does (36h0m0s,
// 1m30s); ParseDuration reads either back exactly.
func FormatDuration(d time.Duration) string {
	if d != 0 && d%Day == 0 {
		return strconv.FormatInt(int64(d/Day), 10) + "d"
	}
	return d.String()
}

// Bytes is a flag.Value for a size in an int64, read by ParseBytes and
// shown by FormatBytes:
//
//	fs.Var(units.NewBytes(&maxBytes, 256<<20), "max-bytes", "...")
//
// It is a flag.Getter; Get returns the int64.
type Bytes struct{ p *int64 }

// NewBytes sets *p to def and returns the flag.Value that sets *p.
func NewBytes(p *int64, def int64) *Bytes {
	*p = def
	return &Bytes{p}
}

// String is the size as FormatBytes writes it; "0" for a zero Bytes.
func (b *Bytes) String() string {
	if b == nil || b.p == nil {
		return "0"
	}
	return FormatBytes(*b.p)
}

// Set sets the size to ParseBytes' reading of s.
func (b *Bytes) Set(s string) error {
	n, err := parseBytes(s) // the flag package quotes s itself
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}

// Get returns the size, an int64.
func (b *Bytes) Get() any { return *b.p }

// Duration is a flag.Value for a time.Duration, read by ParseDuration and
// shown by FormatDuration:
//
//	fs.Var(units.NewDuration(&keep, 7*units.Day), "retention", "...")
//
// It is a flag.Getter; Get returns the time.Duration.
type Duration struct{ p *time.Duration }

// NewDuration sets *p to def and returns the flag.Value that sets *p.
func NewDuration(p *time.Duration, def time.Duration) *Duration {
	*p = def
	return &Duration{p}
}

// String is the duration as FormatDuration writes it; "0s" for a zero
// Duration.
func (d *Duration) String() string {
	if d == nil || d.p == nil {
		return "0s"
	}
	return FormatDuration(*d.p)
}

// Set sets the duration to ParseDuration's reading of s.
func (d *Duration) Set(s string) error {
	v, err := parseDuration(s) // the flag package quotes s itself
	if err != nil {
		return err
	}
	*d.p = v
	return nil
}

// Get returns the duration, a time.Duration.
func (d *Duration) Get() any { return *d.p }
