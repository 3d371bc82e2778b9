package filter

import (
	"fmt"
	"strings"
	"testing"

	"cel.dev/cel-go/common/ast"
)

// dump renders a parsed expression's structure, without ids or positions.
func dump(e ast.Expr) string {
	switch e.Kind() {
	case ast.CallKind:
		c := e.AsCall()
		args := make([]string, len(c.Args()))
		for i, a := range c.Args() {
			args[i] = dump(a)
		}
		t := ""
		if c.IsMemberFunction() {
			t = dump(c.Target()) + "."
		}
		return fmt.Sprintf("%s%s(%s)", t, c.FunctionName(), strings.Join(args, ", "))
	case ast.IdentKind:
		return "ident:" + e.AsIdent()
	case ast.SelectKind:
		s := e.AsSelect()
		return fmt.Sprintf("select(%s, %q, test=%v)", dump(s.Operand()), s.FieldName(), s.IsTestOnly())
	case ast.LiteralKind:
		v := e.AsLiteral()
		return fmt.Sprintf("lit:%s:%#v", v.Type(), v.Value())
	case ast.ListKind:
		l := e.AsList()
		elems := make([]string, len(l.Elements()))
		for i, x := range l.Elements() {
			elems[i] = dump(x)
		}
		return fmt.Sprintf("list[%s]opt%v", strings.Join(elems, ", "), l.OptionalIndices())
	default:
		return fmt.Sprintf("kind%d:%v", e.Kind(), e)
	}
}

// prattAgrees checks the fast path on src: a filter compiled from the Pratt
// parser's tree must be one the ANTLR parser accepts, with the same tree.
// (The Pratt parser accepts a little more, such as 0X0, but nothing a
// filter can be made of.)
func prattAgrees(t *testing.T, src string) (accepted bool) {
	t.Helper()
	root, fast := compileFast(src)
	if root == nil {
		return false // compile falls back to the ANTLR parser
	}
	ref, iss := env.Parse(src)
	if iss.Err() != nil {
		t.Fatalf("%q: the Pratt parser accepts what the ANTLR parser rejects: %v", src, iss.Err())
	}
	if a, b := dump(fast.Expr()), dump(ref.NativeRep().Expr()); a != b {
		t.Fatalf("%q: trees differ\nPratt: %s\nANTLR: %s", src, a, b)
	}
	return true
}

func TestPrattMatchesANTLR(t *testing.T) {
	// Filters as users write them must take the fast path.
	for _, src := range []string{
		typical,
		`slurm.job.user == "bob" && (host.name.startsWith("n") || gpu.name.contains("H100")) || slurm.job.id in ["1", "2"]`,
		`!(slurm.job.name.matches("^train")) && slurm.job.account != ""`,
		`slurm.job.name == "train \"llama\" ✓\n"`,
	} {
		if !prattAgrees(t, src) {
			t.Errorf("%q: the Pratt parser rejects a plain filter", src)
		}
	}
	for _, src := range []string{
		typical,
		`slurm.job.user == "bob"`,
		`a && b && c && d && e || f || g`,
		`!(x == "1") && !!y && !!!z`,
		`host.name in ["a", "b",]`,
		`host.name.startsWith("n") || matches(slurm.job.name, 'x\'y') || gpu.name.contains("""tri"ple""")`,
		`r"raw\d" == x && b"bytes" == y`,
		`"\u00e9\x41\101\n\t\\\"" == x`,
		`has(x.y) && x.all(v, v) && size(x) > 0`,
		`x.?y == "a" || x[0] == "b" || {"a": 1}.a == 1 || T{f: 1} == x`,
		`1 + 2 * 3 == -4 && 1.5e3 < 2u && null == x ? y : z`,
		"x == \"a\" // comment\n&& y",
		"`quoted`.a == x",
		`.x == y`,
		`x in y in z`,
		`a == b == c`,
		`true && false || !true`,
		`((((x))))`,
		"",
		"(",
		`"unterminated`,
		`x ==`,
		`in == x`,
		`slurm.job.user == "bob" && slurm.job.usr == "x"`,
	} {
		_ = prattAgrees(t, src)
	}
}

// FuzzPrattMatchesANTLR holds the two parsers to the same trees on
// arbitrary text.
func FuzzPrattMatchesANTLR(f *testing.F) {
	for _, s := range []string{typical, `a || b && !c`, `x in ["a",]`, `f(x).g(y)[0]`, `'\''`, "r'''x'''"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		_ = prattAgrees(t, src)
	})
}
