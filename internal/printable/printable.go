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

// Name turns bytes a job wrote (a kernel name, an NVTX range) into a name
// that a profile or a label can carry: valid UTF-8, each invalid byte
// U+FFFD, each control character (C0, DEL, C1) '?'. Unlike String it
// escapes nothing: it is stored, and String renders it for a terminal.
func Name(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b))
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1:
			sb.WriteRune(utf8.RuneError)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			sb.WriteByte('?')
		default:
			sb.WriteRune(r)
		}
		b = b[max(size, 1):]
	}
	return sb.String()
}
