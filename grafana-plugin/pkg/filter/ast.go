package filter

// The tree a filter compiles to: a boolean formula (node) over atomic
// predicates on one attribute each (atom). Nodes are simplified as they are
// built; selectors.go turns a tree into disjoint label selectors.

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/slurmscope/slurmscope/schema"
)

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
