// Package filter compiles slurmscope filters, written in CEL over the
// attribute schema, into Pyroscope and Prometheus label selectors.
//
// A filter is a boolean formula over atomic predicates on one attribute each
// (equality, set membership, prefix, suffix, substring, regular expression).
// Selectors turns it into a union of label selectors that are pairwise
// disjoint, so a caller that queries each selector and sums the answers
// counts every series exactly once, however the filter's branches overlap.
//
// Semantics, held by the tests against cel-go's own evaluation:
//   - A missing label reads as the empty string, as in Prometheus:
//     slurm.job.user != "bob" matches series without the label, and
//     slurm.job.user == "" matches series without it or with it empty.
//   - CEL's matches(x, r) is an unanchored RE2 search in which "." does not
//     match a newline unless r says (?s). Prometheus and Pyroscope anchor
//     =~ as ^(?s:v)$ (Prometheus 3; older versions ^(?:v)$). The translation
//     is (?s:.*)(?-s:r)(?s:.*), which means the same under either anchoring:
//     the outer .* may skip any text, newlines included, and r keeps CEL's
//     default flags inside its own group, where its own flags stay confined.
//   - Values are never spliced into regular expressions unescaped, and every
//     value is quoted with Go string escaping, so no value can change the
//     structure of a selector.
package filter

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/slurmscope/slurmscope/schema"
)

// Op is a label matcher operator, spelled as in PromQL.
type Op string

const (
	OpEqual     Op = "="
	OpNotEqual  Op = "!="
	OpRegexp    Op = "=~"
	OpNotRegexp Op = "!~"
)

// rank orders operators within one label of a selector.
func (o Op) rank() int {
	switch o {
	case OpEqual:
		return 0
	case OpNotEqual:
		return 1
	case OpRegexp:
		return 2
	}
	return 3
}

// Matcher is one label matcher. Label is the wire label; Value is the
// unquoted value (a regular expression for =~ and !~, anchored by the
// backend at both ends).
type Matcher struct {
	Label string
	Op    Op
	Value string
}

func (m Matcher) String() string { return m.Label + string(m.Op) + strconv.Quote(m.Value) }

// Selector is one conjunction of matchers, sorted by label, then operator,
// then value. The empty selector matches every series.
type Selector []Matcher

// String renders the selector as {a="x", b=~"y"}, or {} when it is empty.
// Values use Go string escaping, which PromQL and Pyroscope's selector
// parser read back verbatim.
func (s Selector) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, m := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(m.String())
	}
	b.WriteByte('}')
	return b.String()
}

// Target is the backend a selector is meant for. Pyroscope and Prometheus
// share the matcher syntax today; the distinction keeps call sites honest
// should that change.
type Target int

const (
	Pyroscope Target = iota
	Prometheus
)

func (t Target) String() string {
	if t == Prometheus {
		return "prometheus"
	}
	return "pyroscope"
}

// ParseTarget maps "pyroscope" or "prometheus" to a Target.
func ParseTarget(s string) (Target, bool) {
	switch s {
	case "pyroscope":
		return Pyroscope, true
	case "prometheus":
		return Prometheus, true
	}
	return 0, false
}

// MaxSelectors bounds how many selectors one filter may expand to. DNF and
// the disjoint union can grow exponentially with the filter; past this the
// filter is refused rather than sent as a flood of queries.
const MaxSelectors = 256

// Filter is a compiled filter: a boolean formula over atomic predicates.
// A Filter is immutable and safe for concurrent use.
type Filter struct {
	root *node

	once sync.Once
	sels []Selector
	err  error
}

func newFilter(n *node) *Filter { return &Filter{root: n} }

// True returns the filter that matches everything.
func True() *Filter { return newFilter(constNode(true)) }

// False returns the filter that matches nothing.
func False() *Filter { return newFilter(constNode(false)) }

// Equal returns the filter a == value.
func Equal(a schema.Attribute, value string) *Filter {
	return newFilter(atomNode(&atom{attr: a, kind: kindIn, set: []string{value}}))
}

// And returns the conjunction of fs; a nil Filter counts as True. Use it to
// impose a constraint (job ownership) on a user's filter: the user's filter
// becomes one operand, so nothing in it, `|| true` included, can widen the
// result past the other operands.
func And(fs ...*Filter) *Filter {
	kids := make([]*node, 0, len(fs))
	for _, f := range fs {
		if f != nil {
			kids = append(kids, f.root)
		}
	}
	return newFilter(andNode(kids...))
}

// Or returns the disjunction of fs; a nil Filter counts as False.
func Or(fs ...*Filter) *Filter {
	kids := make([]*node, 0, len(fs))
	for _, f := range fs {
		if f != nil {
			kids = append(kids, f.root)
		}
	}
	return newFilter(orNode(kids...))
}

// Not returns the negation of f.
func Not(f *Filter) *Filter { return newFilter(notNode(f.root)) }

// Selectors returns label selectors that are pairwise disjoint and whose
// union is exactly f. A filter that is always true yields one empty
// selector; one that can never be true yields none. If f expands to more
// than MaxSelectors (only possible for filters built with And or Or, since
// Compile refuses such filters), Selectors returns nil, which selects
// nothing: failing closed is the safe side for an ownership constraint. Err
// tells the two cases apart.
func (f *Filter) Selectors(t Target) []Selector {
	f.once.Do(f.expand)
	if f.err != nil {
		return nil
	}
	// Both targets share the matcher syntax today. Callers may keep the
	// slice but must not modify it.
	return f.sels
}

// Err reports whether f expands to too many selectors.
func (f *Filter) Err() error {
	f.once.Do(f.expand)
	return f.err
}

func (f *Filter) expand() { f.sels, f.err = selectors(f.root) }

// Matches evaluates f on a series' wire labels. It is the reference
// semantics: a missing label reads as "", and regular expressions use CEL's
// unanchored search.
func (f *Filter) Matches(labels map[string]string) bool { return f.root.eval(labels) }

// String renders f as canonical CEL, for logs; it compiles back to an
// equivalent filter. Integer literals come back as strings.
func (f *Filter) String() string {
	var b strings.Builder
	f.root.write(&b, precOr)
	return b.String()
}

// Quote renders s as a CEL string literal, for interpolating a value into a
// filter. Invalid UTF-8 becomes U+FFFD, since a CEL string holds only
// Unicode text (and so does a label value).
func Quote(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for _, r := range s {
		switch r {
		case '"':
			b = append(b, `\"`...)
		case '\\':
			b = append(b, `\\`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			switch {
			case strconv.IsPrint(r):
				b = utf8.AppendRune(b, r)
			case r < 0x10000:
				b = appendHex(append(b, `\u`...), r, 4)
			default:
				b = appendHex(append(b, `\U`...), r, 8)
			}
		}
	}
	return string(append(b, '"'))
}

func appendHex(b []byte, r rune, digits int) []byte {
	for shift := 4 * (digits - 1); shift >= 0; shift -= 4 {
		b = append(b, "0123456789abcdef"[r>>shift&0xf])
	}
	return b
}

// ---- the formula ----

type nodeKind uint8

const (
	nodeConst nodeKind = iota
	nodeAtom
	nodeNot
	nodeAnd
	nodeOr
)

type node struct {
	kind  nodeKind
	value bool // nodeConst
	atom  *atom
	kids  []*node
}

var trueNode, falseNode = &node{kind: nodeConst, value: true}, &node{kind: nodeConst}

func constNode(v bool) *node {
	if v {
		return trueNode
	}
	return falseNode
}

func atomNode(a *atom) *node {
	if v, ok := a.constant(); ok {
		return constNode(v)
	}
	return &node{kind: nodeAtom, atom: a}
}

func notNode(n *node) *node {
	switch n.kind {
	case nodeConst:
		return constNode(!n.value)
	case nodeNot:
		return n.kids[0]
	}
	return &node{kind: nodeNot, kids: []*node{n}}
}

func andNode(kids ...*node) *node { return junction(nodeAnd, kids) }
func orNode(kids ...*node) *node  { return junction(nodeOr, kids) }

// junction flattens nested operators of the same kind and folds constants,
// so trivial filters (true, `x || true`) cost nothing later.
func junction(kind nodeKind, kids []*node) *node {
	identity := kind == nodeAnd // true for &&, false for ||
	var flat []*node
	for _, k := range kids {
		switch {
		case k.kind == nodeConst && k.value == identity:
			continue
		case k.kind == nodeConst:
			return k // the absorbing element
		case k.kind == kind:
			flat = append(flat, k.kids...)
		default:
			flat = append(flat, k)
		}
	}
	switch len(flat) {
	case 0:
		return constNode(identity)
	case 1:
		return flat[0]
	}
	return &node{kind: kind, kids: flat}
}

func (n *node) eval(labels map[string]string) bool {
	switch n.kind {
	case nodeConst:
		return n.value
	case nodeAtom:
		return n.atom.eval(labels[n.atom.attr.Label])
	case nodeNot:
		return !n.kids[0].eval(labels)
	case nodeAnd:
		for _, k := range n.kids {
			if !k.eval(labels) {
				return false
			}
		}
		return true
	default:
		for _, k := range n.kids {
			if k.eval(labels) {
				return true
			}
		}
		return false
	}
}

// Operator precedence for String, loosest first.
const (
	precOr = iota
	precAnd
	precUnary
)

func (n *node) write(b *strings.Builder, prec int) {
	switch n.kind {
	case nodeConst:
		b.WriteString(strconv.FormatBool(n.value))
	case nodeAtom:
		n.atom.write(b)
	case nodeNot:
		if a := n.kids[0].atom; a != nil && a.kind == kindIn && len(a.set) == 1 {
			b.WriteString(a.attr.Name + " != " + Quote(a.set[0]))
			return
		}
		// Always parenthesised: !a == "x" would parse as (!a) == "x".
		b.WriteString("!(")
		n.kids[0].write(b, precOr)
		b.WriteByte(')')
	default:
		p, sep := precOr, " || "
		if n.kind == nodeAnd {
			p, sep = precAnd, " && "
		}
		if p < prec {
			b.WriteByte('(')
		}
		for i, k := range n.kids {
			if i > 0 {
				b.WriteString(sep)
			}
			k.write(b, p+1)
		}
		if p < prec {
			b.WriteByte(')')
		}
	}
}

// ---- atoms ----

type atomKind uint8

const (
	kindIn       atomKind = iota // value is one of set
	kindPrefix                   // startsWith(arg)
	kindSuffix                   // endsWith(arg)
	kindContains                 // contains(arg)
	kindMatch                    // matches(arg): unanchored RE2 search
)

// atom is a predicate on one attribute's value.
type atom struct {
	attr schema.Attribute
	kind atomKind
	set  []string // kindIn: sorted, without duplicates
	arg  string
	re   *regexp.Regexp // kindMatch: arg compiled, for eval
	wire string         // all but kindIn: the anchored regex for =~
}

func newSetAtom(a schema.Attribute, values []string) *atom {
	set := slices.Clone(values)
	slices.Sort(set)
	return &atom{attr: a, kind: kindIn, set: slices.Compact(set)}
}

// newTextAtom builds a prefix, suffix or substring atom.
func newTextAtom(a schema.Attribute, kind atomKind, arg string) *atom {
	q := regexp.QuoteMeta(arg)
	var wire string
	switch kind {
	case kindPrefix:
		wire = q + anyText
	case kindSuffix:
		wire = anyText + q
	default:
		wire = anyText + q + anyText
	}
	return &atom{attr: a, kind: kind, arg: arg, wire: wire}
}

// newMatchAtom builds a matches() atom from its compiled pattern.
func newMatchAtom(a schema.Attribute, re *regexp.Regexp) *atom {
	return &atom{attr: a, kind: kindMatch, arg: re.String(), re: re, wire: anchorSearch(re.String())}
}

// constant reports atoms whose value does not depend on the label.
func (a *atom) constant() (value, ok bool) {
	switch {
	case a.kind == kindIn && len(a.set) == 0:
		return false, true
	case a.kind != kindIn && a.arg == "":
		return true, true // every string starts with, ends with, contains, matches ""
	}
	return false, false
}

func (a *atom) eval(v string) bool {
	switch a.kind {
	case kindIn:
		_, ok := slices.BinarySearch(a.set, v)
		return ok
	case kindPrefix:
		return strings.HasPrefix(v, a.arg)
	case kindSuffix:
		return strings.HasSuffix(v, a.arg)
	case kindContains:
		return strings.Contains(v, a.arg)
	default:
		return a.re.MatchString(v)
	}
}

func (a *atom) write(b *strings.Builder) {
	name := a.attr.Name
	switch a.kind {
	case kindIn:
		if len(a.set) == 1 {
			b.WriteString(name + " == " + Quote(a.set[0]))
			return
		}
		b.WriteString(name + " in [")
		for i, v := range a.set {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(Quote(v))
		}
		b.WriteByte(']')
	case kindPrefix:
		b.WriteString(name + ".startsWith(" + Quote(a.arg) + ")")
	case kindSuffix:
		b.WriteString(name + ".endsWith(" + Quote(a.arg) + ")")
	case kindContains:
		b.WriteString(name + ".contains(" + Quote(a.arg) + ")")
	default:
		b.WriteString(name + ".matches(" + Quote(a.arg) + ")")
	}
}

// same reports whether a and b are the same predicate on the same label.
func (a *atom) same(b *atom) bool {
	return a == b || a.attr.Label == b.attr.Label && a.kind == b.kind && a.arg == b.arg && slices.Equal(a.set, b.set)
}

// implies reports a ⊆ b for two pattern atoms (not kindIn), where it can
// tell; false means "not known".
func (a *atom) implies(b *atom) bool {
	if a.same(b) {
		return true
	}
	switch b.kind {
	case kindPrefix:
		return a.kind == kindPrefix && strings.HasPrefix(a.arg, b.arg)
	case kindSuffix:
		return a.kind == kindSuffix && strings.HasSuffix(a.arg, b.arg)
	case kindContains:
		return a.kind != kindMatch && strings.Contains(a.arg, b.arg)
	}
	return false
}

// disjoint reports a ∩ b = ∅ for two pattern atoms, where it can tell.
func (a *atom) disjoint(b *atom) bool {
	switch {
	case a.kind == kindPrefix && b.kind == kindPrefix:
		return !strings.HasPrefix(a.arg, b.arg) && !strings.HasPrefix(b.arg, a.arg)
	case a.kind == kindSuffix && b.kind == kindSuffix:
		return !strings.HasSuffix(a.arg, b.arg) && !strings.HasSuffix(b.arg, a.arg)
	}
	return false
}
