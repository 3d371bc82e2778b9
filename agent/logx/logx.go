// Package logx keeps the agent's log readable on a bad day: every error
// in one line of bounded length, however many errors it joins or what a
// server put in it (Line, Err, Join), and an error that repeats logged at
// once, then again now and then with how often it came back, and its end
// said (Limiter).
package logx

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxErr bounds the text of one error in the log.
const MaxErr = 512

// Line renders s as one line of at most limit bytes (limit <= 0: no bound):
// newlines, tabs and other white space become one space, other control or
// non-printable characters (escape sequences, bidirectional overrides,
// invalid bytes) become U+FFFD, and a cut is marked with "…".
func Line(s string, limit int) string {
	var b strings.Builder
	space := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case r == utf8.RuneError && n == 1 || !unicode.IsPrint(r):
			r = utf8.RuneError
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
		if limit > 0 && b.Len() > limit {
			break
		}
	}
	out := b.String()
	if limit > 0 && len(out) > limit {
		cut := max(limit-len("…"), 0)
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = strings.TrimRight(out[:cut], " ") + "…"
	}
	return out
}

// Err renders err for the log in one line of at most MaxErr bytes. The
// lines of an errors.Join are kept once each, in order, a repeated one
// with its count: seven profiles that failed alike are one "… (7 times)".
func Err(err error) string {
	if err == nil {
		return ""
	}
	return Line(distinct(strings.Split(err.Error(), "\n")), MaxErr)
}

// distinct joins msgs with "; ", each once, in the order first seen, with
// "(N times)" after one that came N > 1 times. Empty ones are left out.
func distinct(msgs []string) string {
	var order []string
	count := map[string]int{}
	for _, m := range msgs {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if count[m] == 0 {
			order = append(order, m)
		}
		count[m]++
	}
	for i, m := range order {
		if n := count[m]; n > 1 {
			order[i] = fmt.Sprintf("%s (%d times)", m, n)
		}
	}
	return strings.Join(order, "; ")
}

// Join is errors.Join for errors that often repeat (one per profile of an
// interval): its message names each distinct error once, in one line,
// with its count. errors.Is and errors.As see every error.
func Join(errs ...error) error {
	var kept []error
	for _, e := range errs {
		if e != nil {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return &joined{errs: kept}
}

type joined struct{ errs []error }

func (j *joined) Error() string {
	msgs := make([]string, len(j.errs))
	for i, e := range j.errs {
		msgs[i] = strings.Join(strings.Fields(e.Error()), " ")
	}
	return distinct(msgs)
}

func (j *joined) Unwrap() []error { return j.errs }
