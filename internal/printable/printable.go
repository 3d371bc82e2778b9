// Package printable renders values from hostile sources (job names,
// function names, label values, server messages) for a terminal: every
// command line of slurmscope prints through it, so a name cannot carry an
// escape sequence to the terminal or break a table's lines.
package printable

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String renders s: printable characters as they are, anything else
// (newlines, tabs, escape sequences, bidirectional overrides, invalid
// bytes) escaped as Go would quote it, and a backslash doubled so an
// escape cannot be faked. An empty s is shown as empty.
func String(s, empty string) string {
	if s == "" {
		return empty
	}
	clean := true
	for _, r := range s {
		if r == '\\' || r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// Lines renders a multi-line message (an error naming several problems)
// line by line.
func Lines(s string) []string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		out = append(out, String(l, ""))
	}
	return out
}
