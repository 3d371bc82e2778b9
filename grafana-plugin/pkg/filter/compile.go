package filter

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/parser"

	"github.com/slurmscope/slurmscope/schema"
)

// MaxLength bounds a filter's source, in characters.
const MaxLength = 16 << 10

// env parses filters. Macros are off: has(), all() and the like would only
// expand into constructs a filter cannot use, and as plain calls they get a
// clear "not supported". The variables are declared for callers that check
// or evaluate a filter with cel-go itself (the tests do).
var env = func() *cel.Env {
	opts := []cel.EnvOption{cel.ClearMacros(), cel.ParserExpressionSizeLimit(MaxLength)}
	for _, a := range schema.All {
		opts = append(opts, cel.Variable(a.Name, cel.StringType))
	}
	e, err := cel.NewEnv(opts...)
	if err != nil {
		panic(err)
	}
	return e
}()

// fastParser parses as env does (no macros, the same size limit) with
// cel-go's Pratt parser.
var fastParser = func() *parser.Parser {
	p, err := parser.NewParser(parser.EnablePrattParser(true), parser.ExpressionSizeCodePointLimit(MaxLength))
	if err != nil {
		panic(err)
	}
	return p
}()

// Env returns the CEL environment filters are written for: every attribute
// declared as a string variable under its dotted name.
func Env() *cel.Env { return env }

// Compile parses and checks a CEL filter. The empty filter (or only
// whitespace) is true. Errors are *Error.
//
// Filters are immutable, so Compile remembers recent ones: dashboards send
// the same few filters on every refresh, and cel-go's parser is most of the
// cost of a fresh compile.
func Compile(src string) (*Filter, error) {
	cache.Lock()
	f, ok := cache.m[src]
	cache.Unlock()
	if ok {
		return f, nil
	}
	f, err := compile(src)
	if err != nil {
		return nil, err
	}
	cache.Lock()
	if len(cache.m) >= cacheSize {
		for k := range cache.m { // evict one, at random
			delete(cache.m, k)
			break
		}
	}
	cache.m[src] = f
	cache.Unlock()
	return f, nil
}

const cacheSize = 256

var cache = struct {
	sync.Mutex
	m map[string]*Filter
}{m: map[string]*Filter{}}

func compile(src string) (*Filter, error) {
	if strings.TrimSpace(src) == "" {
		return True(), nil
	}
	c := &compiler{src: src}
	if !utf8.ValidString(src) {
		c.issues = append(c.issues, c.issueAtOffset(firstInvalid(src), "filter is not valid UTF-8"))
		return nil, c.err()
	}
	// cel-go's Pratt parser is several times faster than its ANTLR parser
	// and builds the same tree (TestPrattMatchesANTLR, and the fuzz targets
	// check compiled filters against cel-go's own evaluation). Anything it
	// rejects, and any filter with an issue, goes through the ANTLR parser,
	// whose messages and positions are the ones users and tests know.
	root, _ := compileFast(src)
	if root == nil {
		parsed, iss := env.Parse(src)
		if iss.Err() != nil {
			for _, e := range iss.Errors() {
				c.report(e.Location.Line(), e.Location.Column(), syntaxMessage(e.Message))
			}
			return nil, c.err()
		}
		c.info = parsed.NativeRep().SourceInfo()
		root = c.cond(parsed.NativeRep().Expr())
		if len(c.issues) > 0 {
			return nil, c.err()
		}
	}
	f := newFilter(root)
	if err := f.Err(); err != nil {
		c.issues = append(c.issues, Issue{Line: 1, Column: 1, Message: err.Error()})
		return nil, c.err()
	}
	return f, nil
}

// compileFast compiles src from the Pratt parser's tree; nil if it rejects
// src or the filter has an issue.
func compileFast(src string) (*node, *ast.AST) {
	a, errs := fastParser.Parse(common.NewTextSource(src))
	if len(errs.GetErrors()) > 0 {
		return nil, nil
	}
	c := &compiler{src: src, info: a.SourceInfo()}
	root := c.cond(a.Expr())
	if len(c.issues) > 0 {
		return nil, nil
	}
	return root, a
}

type compiler struct {
	src    string
	info   *ast.SourceInfo
	issues []Issue
}

// cond compiles e, which must be a condition. On error it reports and
// returns a placeholder, so that one pass finds every problem.
func (c *compiler) cond(e ast.Expr) *node {
	switch e.Kind() {
	case ast.LiteralKind:
		if b, ok := e.AsLiteral().(types.Bool); ok {
			return constNode(bool(b))
		}
		c.errorf(e, "expected a condition, got %s value", typeName(e.AsLiteral()))
	case ast.IdentKind, ast.SelectKind:
		if a, ok := c.attr(e); ok {
			c.errorf(e, "%s is a %s, not a condition: compare it, as in %s == %s",
				a.Name, a.Type, a.Name, Quote("..."))
		}
	case ast.CallKind:
		return c.call(e)
	case ast.ListKind:
		c.errorf(e, "expected a condition, got a list")
	case ast.MapKind, ast.StructKind:
		c.errorf(e, "expected a condition, got a map")
	default:
		c.errorf(e, "expected a condition; %s", supported)
	}
	return falseNode
}

func (c *compiler) call(e ast.Expr) *node {
	call := e.AsCall()
	args := call.Args()
	switch fn := call.FunctionName(); fn {
	case "_&&_":
		return andNode(c.cond(args[0]), c.cond(args[1]))
	case "_||_":
		return orNode(c.cond(args[0]), c.cond(args[1]))
	case "!_":
		return notNode(c.cond(args[0]))
	case "_?_:_":
		// cond ? a : b is (cond && a) || (!cond && b), both sides strict
		// booleans here, so no error value can leak through.
		k, a, b := c.cond(args[0]), c.cond(args[1]), c.cond(args[2])
		return orNode(andNode(k, a), andNode(notNode(k), b))
	case "_==_", "_!=_":
		n := c.equality(e, args[0], args[1])
		if fn == "_!=_" {
			return notNode(n)
		}
		return n
	case "@in":
		return c.in(e, args[0], args[1])
	case "matches", "startsWith", "endsWith", "contains":
		return c.textCall(e, fn)
	default:
		c.unsupported(e)
	}
	return falseNode
}

// equality compiles attr == value, either way round.
func (c *compiler) equality(e, l, r ast.Expr) *node {
	lAttr, rAttr := isAttrRef(l), isAttrRef(r)
	switch {
	case isCondition(l) && isCondition(r):
		// Comparing two conditions: == is "both or neither", != is "xor".
		a, b := c.cond(l), c.cond(r)
		return orNode(andNode(a, b), andNode(notNode(a), notNode(b)))
	case isCondition(l) && !rAttr || isCondition(r) && !lAttr:
		c.errorf(e, "a condition can only be compared with another condition")
		return falseNode
	case lAttr && rAttr:
		c.errorf(e, "comparing two attributes is not supported; compare an attribute with a value")
		return falseNode
	case !lAttr && l.Kind() == ast.CallKind:
		c.unsupported(l)
		return falseNode
	case !rAttr && r.Kind() == ast.CallKind:
		c.unsupported(r)
		return falseNode
	case !lAttr && !rAttr:
		c.errorf(e, "compare an attribute with a value, as in %s == %s", schema.JobUser.Name, Quote("bob"))
		return falseNode
	case rAttr:
		l, r = r, l
	}
	a, ok := c.attr(l)
	v, vok := c.value(r, a, ok)
	if !ok || !vok {
		return falseNode
	}
	return atomNode(newSetAtom(a, []string{v}))
}

func (c *compiler) in(e, l, r ast.Expr) *node {
	if l.Kind() == ast.CallKind {
		c.unsupported(l)
		return falseNode
	}
	if !isAttrRef(l) {
		c.errorf(l, "in needs an attribute on its left, as in %s in [%s, %s]",
			schema.HostName.Name, Quote("n1"), Quote("n2"))
		return falseNode
	}
	a, ok := c.attr(l)
	if r.Kind() != ast.ListKind {
		c.errorf(r, "in needs a list of values on its right, as in [%s, %s]", Quote("a"), Quote("b"))
		return falseNode
	}
	var values []string
	for _, el := range r.AsList().Elements() {
		if v, vok := c.value(el, a, ok); vok {
			values = append(values, v)
		} else {
			ok = false
		}
	}
	if len(r.AsList().OptionalIndices()) > 0 {
		c.errorf(r, "optional list elements are not supported")
		ok = false
	}
	if !ok {
		return falseNode
	}
	return atomNode(newSetAtom(a, values))
}

// textCall compiles x.matches(r) (or matches(x, r)), x.startsWith(s),
// x.endsWith(s) and x.contains(s).
func (c *compiler) textCall(e ast.Expr, fn string) *node {
	call := e.AsCall()
	args := call.Args()
	if call.IsMemberFunction() {
		args = append([]ast.Expr{call.Target()}, args...)
	} else if fn != "matches" {
		// cel-go has only the member form of these.
		c.errorAtName(e, "write %s as a method, as in %s.%s(%s)", fn, schema.HostName.Name, fn, Quote("n"))
		return falseNode
	}
	if len(args) != 2 {
		c.errorAtName(e, "%s takes one argument, as in %s.%s(%s)", fn, schema.HostName.Name, fn, Quote("n"))
		return falseNode
	}
	if !isAttrRef(args[0]) {
		c.errorf(args[0], "%s needs an attribute, as in %s.%s(%s)", fn, schema.HostName.Name, fn, Quote("n"))
		return falseNode
	}
	a, ok := c.attr(args[0])
	arg, aok := c.stringLit(args[1], fn)
	if !ok || !aok {
		return falseNode
	}
	switch fn {
	case "matches":
		re, msg := compileRegexp(arg)
		if msg != "" {
			c.errorf(args[1], "%s", msg)
			return falseNode
		}
		return atomNode(newMatchAtom(a, re))
	case "startsWith":
		return atomNode(newTextAtom(a, kindPrefix, arg))
	case "endsWith":
		return atomNode(newTextAtom(a, kindSuffix, arg))
	default:
		return atomNode(newTextAtom(a, kindContains, arg))
	}
}

// isCondition reports expressions that are conditions by their form.
func isCondition(e ast.Expr) bool {
	switch e.Kind() {
	case ast.LiteralKind:
		_, ok := e.AsLiteral().(types.Bool)
		return ok
	case ast.CallKind:
		switch e.AsCall().FunctionName() {
		case "_&&_", "_||_", "!_", "_==_", "_!=_", "_?_:_", "@in", "matches", "startsWith", "endsWith", "contains":
			return true
		}
	}
	return false
}

func isAttrRef(e ast.Expr) bool { return e.Kind() == ast.IdentKind || e.Kind() == ast.SelectKind }

// attr resolves a dotted name. The whole chain is looked up at once, so an
// unknown attribute is reported by its full name, not as an unknown
// variable "slurm".
func (c *compiler) attr(e ast.Expr) (schema.Attribute, bool) {
	var parts []string
	root := e
	for root.Kind() == ast.SelectKind {
		sel := root.AsSelect()
		if sel.IsTestOnly() {
			c.errorf(root, "has() is not supported; %s", supported)
			return schema.Attribute{}, false
		}
		parts = append(parts, sel.FieldName())
		root = sel.Operand()
	}
	if root.Kind() != ast.IdentKind {
		c.errorf(root, "expected an attribute name")
		return schema.Attribute{}, false
	}
	parts = append(parts, root.AsIdent())
	slices.Reverse(parts)
	name := strings.Join(parts, ".")
	if a, ok := schema.ByName(name); ok {
		return a, true
	}
	msg := fmt.Sprintf("unknown attribute %s", name)
	if s := suggest(name); s != "" {
		msg += "; did you mean " + s + "?"
	}
	c.errorf(root, "%s", msg)
	return schema.Attribute{}, false
}

// value compiles a literal compared with attribute a (known: whether a
// resolved). Integers are accepted for int attributes, which are strings on
// the wire, and written in decimal.
func (c *compiler) value(e ast.Expr, a schema.Attribute, known bool) (string, bool) {
	if e.Kind() != ast.LiteralKind {
		c.errorf(e, "expected a literal value")
		return "", false
	}
	switch v := e.AsLiteral().(type) {
	case types.String:
		return string(v), true
	case types.Int, types.Uint:
		if !known {
			return "", false
		}
		if a.Type != schema.Int {
			c.errorf(e, "%s is a string: write the value in quotes, as in %s", a.Name, Quote(fmt.Sprint(v)))
			return "", false
		}
		if i, ok := v.(types.Int); ok {
			return strconv.FormatInt(int64(i), 10), true
		}
		return strconv.FormatUint(uint64(v.(types.Uint)), 10), true
	case types.Null:
		c.errorf(e, "null is not a value here: a missing attribute reads as %s", Quote(""))
	default:
		c.errorf(e, "expected a string value, got %s", typeName(v))
	}
	return "", false
}

func (c *compiler) stringLit(e ast.Expr, fn string) (string, bool) {
	if e.Kind() == ast.LiteralKind {
		if s, ok := e.AsLiteral().(types.String); ok {
			return string(s), true
		}
		c.errorf(e, "%s needs a string, got %s", fn, typeName(e.AsLiteral()))
		return "", false
	}
	c.errorf(e, "%s needs a literal string", fn)
	return "", false
}
