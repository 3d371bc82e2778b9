package filter

import (
	"errors"
	"regexp"
	"regexp/syntax"
	"strings"
)

// anyText matches any text, newlines included, whatever flags the backend
// wraps a regex in.
const anyText = "(?s:.*)"

// anchorSearch turns pattern, searched for anywhere in a value as CEL's
// matches() does, into a regex that means the same when a backend anchors it
// at both ends, as ^(?s:v)$ (Prometheus 3) or ^(?:v)$ (Prometheus 2): the
// value matches iff some substring matches pattern, and anyText may skip
// the rest. Assertions (^, $, \b) keep their meaning because they look at
// the whole value in both forms.
//
// pattern must be valid.
func anchorSearch(pattern string) string {
	core := pattern
	// A trailing \Q...  without \E quotes to the end of the regex, and would
	// swallow the suffix and the backend's closing parenthesis. Only when
	// pattern ends inside \Q is the extra \E valid, and then it only closes
	// the quote.
	if strings.Contains(pattern, `\Q`) && parses(pattern+`\E`) {
		core += `\E`
	}
	re, _ := syntax.Parse(pattern, syntax.Perl)
	switch {
	case usesDot(re):
		// CEL's default: . does not match \n. The group both restores that
		// under a backend's (?s) and confines the pattern's own flags.
		core = "(?-s:" + core + ")"
	case strings.ContainsAny(pattern, "|(") || strings.Contains(pattern, `\Q`):
		// Keep alternatives and flag groups like (?i) to the pattern.
		core = "(?:" + core + ")"
	}
	return anyText + core + anyText
}

func parses(pattern string) bool {
	_, err := syntax.Parse(pattern, syntax.Perl)
	return err == nil
}

// usesDot reports whether re has a "." that must not match a newline, the
// only construct whose meaning depends on the s flag.
func usesDot(re *syntax.Regexp) bool {
	if re.Op == syntax.OpAnyCharNotNL {
		return true
	}
	for _, s := range re.Sub {
		if usesDot(s) {
			return true
		}
	}
	return false
}

// compileRegexp compiles pattern as cel-go's matches() does (Go's regexp,
// RE2 syntax), or returns a message fit for a user.
func compileRegexp(pattern string) (*regexp.Regexp, string) {
	re, err := regexp.Compile(pattern)
	if err == nil {
		return re, ""
	}
	var serr *syntax.Error
	if errors.As(err, &serr) {
		if serr.Expr == "" || serr.Expr == pattern {
			return nil, "invalid regular expression: " + string(serr.Code)
		}
		return nil, "invalid regular expression: " + string(serr.Code) + ": `" + serr.Expr + "`"
	}
	return nil, "invalid regular expression: " + err.Error()
}

// quoteSet is a regex that matches exactly the strings in set.
func quoteSet(set []string) string {
	var b strings.Builder
	for i, v := range set {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(regexp.QuoteMeta(v))
	}
	return b.String()
}
