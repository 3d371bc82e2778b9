package filter

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"

	"github.com/slurmscope/slurmscope/schema"
)

// Diagnostics: how a filter's problems are located and worded. Every
// problem is collected with its line, column and byte offset, so that one
// pass reports them all and the editor can underline each where it is.

// maxIssues bounds how many problems one error reports.
const maxIssues = 10

// Issue is one problem in a filter's source. Line and Column are 1-based,
// Column counted in characters (Unicode code points, as CEL counts);
// Offset is the 0-based byte offset into the source.
type Issue struct {
	Line, Column, Offset int
	Message              string
}

func (i Issue) String() string { return fmt.Sprintf("%d:%d: %s", i.Line, i.Column, i.Message) }

// Error is an invalid filter: every problem found, in source order.
type Error struct{ Issues []Issue }

func (e *Error) Error() string {
	lines := make([]string, len(e.Issues))
	for i, is := range e.Issues {
		lines[i] = is.String()
	}
	return strings.Join(lines, "\n")
}

// supported lists what a filter may use, for error messages.
const supported = "a filter may use ==, !=, in [...], matches(), startsWith(), endsWith(), contains(), &&, ||, !, true and false"

// syntaxMessage trims the parser's wording where a plainer one helps.
func syntaxMessage(msg string) string {
	msg = strings.TrimPrefix(msg, "Syntax error: ")
	switch {
	case strings.HasPrefix(msg, "mismatched input '<EOF>'"):
		return "syntax error: unexpected end of filter"
	case strings.HasPrefix(msg, "token recognition error at: '="):
		return "syntax error: unexpected =; compare with =="
	}
	return "syntax error: " + msg
}

func (c *compiler) err() error {
	slices.SortStableFunc(c.issues, func(a, b Issue) int { return a.Offset - b.Offset })
	if len(c.issues) > maxIssues {
		c.issues = c.issues[:maxIssues]
	}
	return &Error{Issues: c.issues}
}

// report records an issue at a CEL location: 1-based line, 0-based column
// in code points.
func (c *compiler) report(line, col int, msg string) {
	if line < 1 {
		line, col = 1, 0
	}
	off := 0
	for l := 1; l < line; l++ {
		i := strings.IndexByte(c.src[off:], '\n')
		if i < 0 {
			break
		}
		off += i + 1
	}
	for i := 0; i < col && off < len(c.src); i++ {
		_, n := utf8.DecodeRuneInString(c.src[off:])
		off += n
	}
	c.issues = append(c.issues, Issue{Line: line, Column: col + 1, Offset: off, Message: msg})
}

func (c *compiler) issueAtOffset(off int, msg string) Issue {
	before := c.src[:off]
	line := 1 + strings.Count(before, "\n")
	lineStart := strings.LastIndexByte(before, '\n') + 1
	return Issue{Line: line, Column: 1 + utf8.RuneCountInString(before[lineStart:]), Offset: off, Message: msg}
}

// errorf reports a problem at expression e; at the start of its name if it
// is a dotted name, which CEL records at its last dot.
func (c *compiler) errorf(e ast.Expr, format string, args ...any) {
	for e.Kind() == ast.SelectKind {
		e = e.AsSelect().Operand()
	}
	loc := c.info.GetStartLocation(e.ID())
	c.report(loc.Line(), loc.Column(), fmt.Sprintf(format, args...))
}

// errorAtName reports a problem with call e at the function's name: CEL
// records a call at its opening parenthesis.
func (c *compiler) errorAtName(e ast.Expr, format string, args ...any) {
	c.errorf(e, format, args...)
	is := &c.issues[len(c.issues)-1]
	if is.Offset >= len(c.src) || c.src[is.Offset] != '(' {
		return
	}
	off := is.Offset
	for off > 0 && (c.src[off-1] == ' ' || c.src[off-1] == '\t') {
		off--
	}
	for off > 0 && isIdentByte(c.src[off-1]) {
		off--
	}
	*is = c.issueAtOffset(off, is.Message)
}

func isIdentByte(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

func firstInvalid(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return i
			}
		}
	}
	return 0
}

// unsupported reports call e as an operator or function filters lack.
func (c *compiler) unsupported(e ast.Expr) {
	fn := e.AsCall().FunctionName()
	if op, ok := operators[fn]; ok {
		c.errorf(e, "%s is not supported; %s", op, supported)
	} else {
		c.errorAtName(e, "function %s() is not supported; %s", fn, supported)
	}
}

var operators = map[string]string{
	"_<_": "operator <", "_<=_": "operator <=", "_>_": "operator >", "_>=_": "operator >=",
	"_+_": "operator +", "_-_": "operator -", "_*_": "operator *", "_/_": "operator /",
	"_%_": "operator %", "-_": "unary -", "_[_]": "indexing", "_[?_]": "optional indexing",
	"_?._": "optional field selection",
}

// typeName names a literal's type with its article.
func typeName(v any) string {
	switch v.(type) {
	case types.String:
		return "a string"
	case types.Int:
		return "an int"
	case types.Uint:
		return "a uint"
	case types.Double:
		return "a double"
	case types.Bool:
		return "a bool"
	case types.Bytes:
		return "bytes"
	case types.Null:
		return "null"
	}
	return fmt.Sprintf("a %T", v)
}

// suggest names the attributes a mistyped name probably meant: those it is
// a prefix of, those whose last part it equals, or the nearest by edit
// distance.
func suggest(name string) string {
	var out []string
	for _, a := range schema.All {
		if strings.HasPrefix(a.Name, name+".") || strings.HasSuffix(a.Name, "."+name) {
			out = append(out, a.Name)
		}
	}
	if len(out) == 0 {
		best := 3 // at most two edits away
		for _, a := range schema.All {
			if d := editDistance(name, a.Name); d < best {
				best, out = d, []string{a.Name}
			} else if d == best {
				out = append(out, a.Name)
			}
		}
	}
	switch len(out) {
	case 0:
		return ""
	case 1:
		return out[0]
	}
	return strings.Join(out[:len(out)-1], ", ") + " or " + out[len(out)-1]
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
