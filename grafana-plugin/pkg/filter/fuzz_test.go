package filter

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"cel.dev/cel-go/cel"

	"github.com/slurmscope/slurmscope/schema"
)

// The fuzz tests hold three things to agree on every label set they try:
// cel-go evaluating the filter's source (missing attributes bound to ""),
// Filter.Matches, and the selectors evaluated as Prometheus does (anchored
// RE2, missing label = ""), where a matching label set must match exactly
// one selector. Selectors are evaluated under both the Prometheus 3 and the
// Prometheus 2 anchoring.

// Attributes, values and patterns the generator draws from: few enough
// that random label sets often hit the filter's literals, awkward enough to
// catch escaping, newline and anchoring mistakes.
var (
	fuzzAttrs  = []schema.Attribute{schema.JobUser, schema.HostName, schema.JobID, schema.GPUName}
	fuzzValues = []string{"", "a", "b", "ab", "ba", "a.b", "A", "x\ny", "\n", "é", `"`, `a\`, "}", "a|b", "abab"}
	fuzzRegexs = []string{"", "a", "^a", "b$", "^$", "a|b", ".", "^.$", "(?i)a", "(?s)x.y", "x.y", `\.`,
		"^(a|b)$", "é", `\n`, `\Qa.`, `(?m)^y`, `[^a]`, `\bab\b`, "a*", "^a+$", `\A\z`, "(?U)a+b", "b|^$"}
)

// gen turns fuzz bytes into choices; past the end every choice is 0.
type gen struct{ data []byte }

func (g *gen) pick(n int) int {
	if len(g.data) == 0 || n <= 1 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return int(b) % n
}

func (g *gen) attr() string   { return fuzzAttrs[g.pick(len(fuzzAttrs))].Name }
func (g *gen) value() string  { return Quote(fuzzValues[g.pick(len(fuzzValues))]) }
func (g *gen) regex() string  { return Quote(fuzzRegexs[g.pick(len(fuzzRegexs))]) }
func (g *gen) expr() string   { return g.exprDepth(0) }
func (g *gen) leaf() string   { return g.exprDepth(4) }
func (g *gen) more() bool     { return g.pick(3) != 0 }
func (g *gen) values() string { return g.list(g.pick(4)) }

func (g *gen) list(n int) string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = g.value()
	}
	return "[" + strings.Join(vs, ", ") + "]"
}

func (g *gen) exprDepth(depth int) string {
	choice := g.pick(16)
	if depth >= 4 && choice >= 11 {
		choice %= 11
	}
	switch choice {
	case 0:
		return g.attr() + " == " + g.value()
	case 1:
		return g.attr() + " != " + g.value()
	case 2:
		return g.value() + " == " + g.attr()
	case 3:
		return g.attr() + " in " + g.values()
	case 4:
		return g.attr() + ".matches(" + g.regex() + ")"
	case 5:
		return "matches(" + g.attr() + ", " + g.regex() + ")"
	case 6:
		return g.attr() + ".startsWith(" + g.value() + ")"
	case 7:
		return g.attr() + ".endsWith(" + g.value() + ")"
	case 8:
		return g.attr() + ".contains(" + g.value() + ")"
	case 9:
		if g.pick(4) == 0 {
			return "true"
		}
		return g.attr() + " == " + g.value()
	case 10:
		if g.pick(4) == 0 {
			return "false"
		}
		return g.attr() + " != " + g.value()
	case 11, 12:
		return "(" + g.exprDepth(depth+1) + " && " + g.exprDepth(depth+1) + ")"
	case 13, 14:
		return "(" + g.exprDepth(depth+1) + " || " + g.exprDepth(depth+1) + ")"
	default:
		switch g.pick(6) {
		case 0:
			return "((" + g.exprDepth(depth+1) + ") == (" + g.exprDepth(depth+1) + "))"
		case 1:
			return "((" + g.exprDepth(depth+1) + ") != (" + g.exprDepth(depth+1) + "))"
		}
		if g.pick(4) == 0 {
			return "(" + g.exprDepth(depth+1) + " ? " + g.exprDepth(depth+1) + " : " + g.exprDepth(depth+1) + ")"
		}
		return "!(" + g.exprDepth(depth+1) + ")"
	}
}

// labelSet draws one series' labels: each attribute absent or one of the
// values, now and then with a character added.
func (g *gen) labelSet() map[string]string {
	ls := map[string]string{}
	for _, a := range fuzzAttrs {
		i := g.pick(len(fuzzValues) + 3)
		if i >= len(fuzzValues) {
			continue
		}
		v := fuzzValues[i]
		switch g.pick(6) {
		case 0:
			v += "x"
		case 1:
			v = "a" + v
		}
		ls[a.Label] = v
	}
	return ls
}

func FuzzSelectors(f *testing.F) {
	for _, seed := range []string{"", "\x00", "\x0b\x00\x01\x0d\x04\x02", "\x0f\x0b\x04\x05\x06\x0e\x03\x03\x01\x02"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &gen{data: data}
		src := g.expr()
		sets := []map[string]string{{}}
		for range 24 {
			sets = append(sets, g.labelSet())
		}
		checkFilter(t, src, sets, true)
	})
}

// FuzzCompile feeds arbitrary source: Compile must not panic, must place
// every issue inside the source, and what it accepts must hold the same
// properties as FuzzSelectors, on label sets made of the filter's strings.
func FuzzCompile(f *testing.F) {
	for _, seed := range []string{
		`slurm.job.user == "bob" && matches(slurm.job.name, "train.*") && !(host.name in ["n1","n2"])`,
		`host.name.startsWith("n") || slurm.job.id == 4242`, "a <", `"\u00e9" == host.name`,
		`gpu.name.matches("(?i)a100|h100") ? host.name != "" : false`, "x\n  && y", `size(gpu.name) > 0`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		flt, err := compile(src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Issues) == 0 {
				t.Fatalf("Compile(%q): error %v is not an *Error with issues", src, err)
			}
			for _, is := range e.Issues {
				checkPosition(t, src, is)
			}
			return
		}
		// Label sets from the string literals in src, so that branches fire.
		lits := append(regexp.MustCompile(`"(?:[^"\\\n]|\\.)*"`).FindAllString(src, 8), `""`)
		var vals []string
		for _, l := range lits {
			if v, ok := celUnquote(l); ok {
				vals = append(vals, v, v+"x", "a"+v)
			}
		}
		sets := []map[string]string{{}}
		for i := range 16 {
			ls := map[string]string{}
			for j, a := range schema.All {
				if k := (i*7 + j*3) % (len(vals) + 1); k < len(vals) {
					ls[a.Label] = vals[k]
				}
			}
			sets = append(sets, ls)
		}
		checkFilter(t, src, sets, false)
		_ = flt
	})
}

// checkPosition checks that an issue's line, column and offset agree.
func checkPosition(t *testing.T, src string, is Issue) {
	t.Helper()
	if is.Offset < 0 || is.Offset > len(src) || is.Line < 1 || is.Column < 1 {
		t.Fatalf("%q: issue %+v out of range", src, is)
	}
	before := src[:is.Offset]
	line := 1 + strings.Count(before, "\n")
	col := 1 + utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:])
	if utf8.ValidString(src) && (line != is.Line || col != is.Column) {
		t.Fatalf("%q: issue %+v: offset is at %d:%d", src, is, line, col)
	}
}

func celUnquote(lit string) (string, bool) {
	ast, iss := env.Parse(lit)
	if iss.Err() != nil {
		return "", false
	}
	v, ok := ast.NativeRep().Expr().AsLiteral().Value().(string)
	return v, ok
}

// checkFilter compiles src and checks it on each label set. With mustCompile
// unset, a filter cel-go itself rejects (an integer compared with an int
// attribute, which this package accepts) skips the cel-go comparison.
func checkFilter(t *testing.T, src string, sets []map[string]string, mustCompile bool) {
	t.Helper()
	f, err := compile(src)
	if err != nil {
		if mustCompile {
			t.Fatalf("Compile(%q): %v", src, err)
		}
		return
	}
	var prg cel.Program
	if ast, iss := env.Compile(src); iss.Err() == nil {
		if prg, err = env.Program(ast); err != nil {
			t.Fatalf("cel-go Program(%q): %v", src, err)
		}
	} else if mustCompile {
		t.Fatalf("cel-go rejects %q: %v", src, iss.Err())
	}
	sels := f.Selectors(Prometheus)
	again, err := Compile(f.String())
	if err != nil {
		t.Fatalf("canonical form %q of %q does not compile: %v", f.String(), src, err)
	}
	for _, ls := range sets {
		want := f.Matches(ls)
		if prg != nil {
			vars := map[string]any{}
			for _, a := range schema.All {
				vars[a.Name] = ls[a.Label] // "" when missing
			}
			out, _, err := prg.Eval(vars)
			if err != nil {
				t.Fatalf("cel-go Eval(%q, %q): %v", src, ls, err)
			}
			if out.Value() != want {
				t.Fatalf("filter %q on %q: Matches = %v, cel-go = %v", src, ls, want, out.Value())
			}
		}
		if got := again.Matches(ls); got != want {
			t.Fatalf("filter %q on %q: Matches = %v, canonical form %q = %v", src, ls, want, f.String(), got)
		}
		n := 0
		for _, s := range sels {
			if selectorMatches(t, s, ls) {
				n++
			}
		}
		if want && n != 1 || !want && n != 0 {
			t.Fatalf("filter %q on %q: Matches = %v but %d of its selectors match:\n%s",
				src, ls, want, n, dumpSelectors(sels))
		}
	}
}

func dumpSelectors(sels []Selector) string {
	var b strings.Builder
	for _, s := range sels {
		fmt.Fprintln(&b, "\t"+s.String())
	}
	return b.String()
}

var anchored sync.Map // "^(?s:v)$" and "^(?:v)$" -> *regexp.Regexp

// selectorMatches evaluates s as Prometheus does, under both anchorings,
// and fails the test if they disagree.
func selectorMatches(t *testing.T, s Selector, ls map[string]string) bool {
	t.Helper()
	ok := true
	for _, m := range s {
		v := ls[m.Label]
		var r bool
		switch m.Op {
		case OpEqual:
			r = v == m.Value
		case OpNotEqual:
			r = v != m.Value
		default:
			r3 := compileAnchored(t, "^(?s:"+m.Value+")$").MatchString(v)
			r2 := compileAnchored(t, "^(?:"+m.Value+")$").MatchString(v)
			if r2 != r3 {
				t.Fatalf("matcher %s on %q: the Prometheus 2 and 3 anchorings disagree", m, v)
			}
			r = r3 == (m.Op == OpRegexp)
		}
		ok = ok && r
	}
	return ok
}

func compileAnchored(t *testing.T, expr string) *regexp.Regexp {
	if re, ok := anchored.Load(expr); ok {
		return re.(*regexp.Regexp)
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		t.Fatalf("selector regex %q does not compile: %v", expr, err)
	}
	anchored.Store(expr, re)
	return re
}
