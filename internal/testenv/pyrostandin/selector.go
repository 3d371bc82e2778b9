package pyrostandin

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A small parser for Prometheus label selectors ({a="x", b=~"y.*"}), the
// part of PromQL that Pyroscope's queries take. Hand-written because the
// prometheus/prometheus module is far larger than what this needs. Error
// messages follow PromQL's shape (line:col: parse error: ...), which is what
// Pyroscope passes through.

type matchOp int

const (
	opEq matchOp = iota
	opNeq
	opRe
	opNre
)

type matcher struct {
	name  string
	op    matchOp
	value string
	re    *regexp.Regexp // anchored, for =~ and !~
}

func (m matcher) matches(v string) bool {
	switch m.op {
	case opEq:
		return v == m.value
	case opNeq:
		return v != m.value
	case opRe:
		return m.re.MatchString(v)
	default:
		return !m.re.MatchString(v)
	}
}

type selector []matcher

// matches reports whether a label set matches; a missing label is "".
func (s selector) matches(ls labelSet) bool {
	for _, m := range s {
		if !m.matches(ls.get(m.name)) {
			return false
		}
	}
	return true
}

type parseError struct {
	pos int // byte offset, -1 at end of input
	in  string
	msg string
}

func (e *parseError) Error() string {
	if e.pos < 0 {
		return "unknown position: parse error: " + e.msg
	}
	line, col := 1, 1
	for _, r := range e.in[:e.pos] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("%d:%d: parse error: %s", line, col, e.msg)
}

type selParser struct {
	in  string
	pos int
}

func (p *selParser) skipSpace() {
	for p.pos < len(p.in) && strings.ContainsRune(" \t\r\n", rune(p.in[p.pos])) {
		p.pos++
	}
}

func (p *selParser) errAt(pos int, format string, args ...any) error {
	if pos >= len(p.in) {
		pos = -1
	}
	return &parseError{pos: pos, in: p.in, msg: fmt.Sprintf(format, args...)}
}

func (p *selParser) ident() string {
	start := p.pos
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		if c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || p.pos > start && c >= '0' && c <= '9' {
			p.pos++
			continue
		}
		break
	}
	return p.in[start:p.pos]
}

func (p *selParser) tokenAt() string {
	if p.pos >= len(p.in) {
		return "end of input"
	}
	r, _ := utf8.DecodeRuneInString(p.in[p.pos:])
	return strconv.Quote(string(r))
}

// parseSelector parses `name{...}`, `{...}` or a bare name. Pyroscope
// accepts "{}" for "everything"; the empty string is an error.
func parseSelector(in string) (selector, error) {
	p := &selParser{in: in}
	var sel selector
	p.skipSpace()
	if p.pos >= len(in) {
		return nil, p.errAt(p.pos, "unexpected end of input")
	}
	if name := p.ident(); name != "" {
		sel = append(sel, matcher{name: "__name__", op: opEq, value: name})
		p.skipSpace()
		if p.pos >= len(in) {
			return sel, nil
		}
	}
	if in[p.pos] != '{' {
		return nil, p.errAt(p.pos, "unexpected %s, expected \"{\"", p.tokenAt())
	}
	p.pos++
	for {
		p.skipSpace()
		if p.pos >= len(in) {
			return nil, p.errAt(p.pos, "unexpected end of input inside braces")
		}
		if in[p.pos] == '}' {
			p.pos++
			break
		}
		start := p.pos
		name := p.ident()
		if name == "" {
			return nil, p.errAt(start, "unexpected %s in label matching, expected identifier or \"}\"", p.tokenAt())
		}
		p.skipSpace()
		var op matchOp
		switch {
		case strings.HasPrefix(in[p.pos:], "=~"):
			op, p.pos = opRe, p.pos+2
		case strings.HasPrefix(in[p.pos:], "!~"):
			op, p.pos = opNre, p.pos+2
		case strings.HasPrefix(in[p.pos:], "!="):
			op, p.pos = opNeq, p.pos+2
		case strings.HasPrefix(in[p.pos:], "="):
			op, p.pos = opEq, p.pos+1
		default:
			return nil, p.errAt(p.pos, "unexpected %s in label matching, expected label matching operator", p.tokenAt())
		}
		p.skipSpace()
		vpos := p.pos
		if p.pos >= len(in) || !strings.ContainsRune("\"'`", rune(in[p.pos])) {
			return nil, p.errAt(p.pos, "unexpected %s in label matching, expected string", p.tokenAt())
		}
		value, err := p.str()
		if err != nil {
			return nil, p.errAt(vpos, "%v", err)
		}
		m := matcher{name: name, op: op, value: value}
		if op == opRe || op == opNre {
			// Prometheus anchors regular expressions at both ends.
			re, err := regexp.Compile("^(?s:" + value + ")$")
			if err != nil {
				return nil, p.errAt(vpos, "invalid regular expression %q: %v", value, err)
			}
			m.re = re
		}
		sel = append(sel, m)
		p.skipSpace()
		if p.pos < len(in) && in[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(in) && in[p.pos] == '}' {
			p.pos++
			break
		}
		return nil, p.errAt(p.pos, "unexpected %s in label matching, expected \",\" or \"}\"", p.tokenAt())
	}
	p.skipSpace()
	if p.pos < len(in) {
		return nil, p.errAt(p.pos, "unexpected %s after selector", p.tokenAt())
	}
	return sel, nil
}

// str reads a quoted string: "..." and '...' with Go escapes, `...` raw.
func (p *selParser) str() (string, error) {
	q := p.in[p.pos]
	end := p.pos + 1
	for end < len(p.in) && p.in[end] != q {
		if p.in[end] == '\\' && q != '`' {
			end++
		}
		end++
	}
	if end >= len(p.in) {
		return "", fmt.Errorf("unterminated quoted string")
	}
	raw := p.in[p.pos : end+1]
	p.pos = end + 1
	if q == '`' {
		return raw[1 : len(raw)-1], nil
	}
	if q == '\'' {
		// strconv only unquotes single-character '...'; swap the quotes.
		inner := strings.ReplaceAll(raw[1:len(raw)-1], `"`, `\"`)
		inner = strings.ReplaceAll(inner, `\'`, `'`)
		raw = `"` + inner + `"`
	}
	s, err := strconv.Unquote(raw)
	if err != nil {
		return "", fmt.Errorf("invalid quoted string %s", raw)
	}
	return s, nil
}
