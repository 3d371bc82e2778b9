package filter

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/slurmscope/slurmscope/schema"
)

// How a filter becomes selectors:
//
//  1. The formula goes to disjunctive normal form, negations pushed onto the
//     atoms. Each conjunction is kept per label in a normal form (cons) that
//     drops what is implied and spots most contradictions, so a="x" &&
//     a="y" vanishes and a="x" && a!="y" is just a="x".
//  2. The conjunctions are made disjoint: each one, minus every earlier one,
//     where p \ (l1 ∧ … ∧ lk) = (p ∧ ¬l1) ∨ (p ∧ l1 ∧ ¬l2) ∨ … — itself a
//     disjoint union. Pairs already disjoint are left alone.
//  3. Conjunctions that differ only in the set of values one label may take
//     are merged into one with a =~ "a|b" matcher.
//
// Normalisation is exact wherever it drops or merges; where it cannot decide
// (two arbitrary regexes), it keeps both, which costs a selector that may
// match nothing but never a wrong answer.

// maxTerms bounds the DNF. Its terms that survive subtraction each become
// at least one selector, so a larger DNF is unlikely to fit MaxSelectors,
// and the quadratic subtraction step must not start on one.
const maxTerms = MaxSelectors

// maxWork bounds the conjunctions the subtraction step may build.
const maxWork = 64 * MaxSelectors

var errTooComplex = fmt.Errorf("filter is too complex: it expands to more than %d label selectors", MaxSelectors)

// lit is an atom or its negation.
type lit struct {
	a   *atom
	neg bool
}

// cons is what one conjunction requires of one label's value.
type cons struct {
	attr  schema.Attribute
	hasIn bool
	in    []string // with hasIn, the value is one of these; sorted
	notIn []string // the value is none of these; sorted
	pos   []*atom  // pattern atoms that must hold
	neg   []*atom  // pattern atoms that must not hold
}

// conj is a conjunction, sorted by label; the empty conj is true.
type conj []cons

func selectors(root *node) ([]Selector, error) {
	terms, err := dnf(root, false)
	if err != nil {
		return nil, err
	}
	// Broad terms first: a narrower term subtracted from a broader one has
	// to be split, while one already covered by a broader term disappears.
	slices.SortStableFunc(terms, func(a, b conj) int { return cmp.Compare(a.size(), b.size()) })
	terms = mergeSets(terms)
	var out []conj
	work := 0
	for i, t := range terms {
		pieces := []conj{t}
		for _, prev := range terms[:i] {
			var next []conj
			for _, p := range pieces {
				next = append(next, subtract(p, prev)...)
			}
			pieces = next
			if work += len(pieces); work > maxWork || len(out)+len(pieces) > 2*MaxSelectors {
				return nil, errTooComplex
			}
		}
		out = append(out, pieces...)
	}
	out = mergeSets(out)
	if len(out) > MaxSelectors {
		return nil, errTooComplex
	}
	sels := make([]Selector, len(out))
	for i, c := range out {
		sels[i] = c.selector()
	}
	return sels, nil
}

// dnf returns the disjunctive normal form of n, or of ¬n when neg is set.
func dnf(n *node, neg bool) ([]conj, error) {
	switch n.kind {
	case nodeConst:
		if n.value != neg {
			return []conj{{}}, nil
		}
		return nil, nil
	case nodeAtom:
		if c, ok := conj(nil).with(lit{n.atom, neg}); ok {
			return []conj{c}, nil
		}
		return nil, nil
	case nodeNot:
		return dnf(n.kids[0], !neg)
	}
	if (n.kind == nodeAnd) != neg { // a conjunction, after De Morgan
		acc := []conj{{}}
		for _, k := range n.kids {
			kd, err := dnf(k, neg)
			if err != nil {
				return nil, err
			}
			var next []conj
			for _, a := range acc {
				for _, b := range kd {
					if m, ok := a.and(b); ok {
						next = append(next, m)
					}
				}
				// Bail out before a product of two large operands is built.
				if len(next) > 2*maxTerms {
					if next = dedupe(next); len(next) > maxTerms {
						return nil, errTooComplex
					}
				}
			}
			if acc = dedupe(next); len(acc) > maxTerms {
				return nil, errTooComplex
			}
			if len(acc) == 0 {
				break
			}
		}
		return acc, nil
	}
	var acc []conj
	for _, k := range n.kids {
		kd, err := dnf(k, neg)
		if err != nil {
			return nil, err
		}
		for _, c := range kd {
			if len(c) == 0 {
				return []conj{{}}, nil // one branch is always true
			}
		}
		if acc = dedupe(append(acc, kd...)); len(acc) > maxTerms {
			return nil, errTooComplex
		}
	}
	return acc, nil
}

func dedupe(cs []conj) []conj {
	seen := make(map[string]bool, len(cs))
	out := cs[:0]
	for _, c := range cs {
		k := c.selector().String()
		if !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	return out
}

// subtract returns p ∧ ¬c as disjoint conjunctions.
func subtract(p, c conj) []conj {
	if _, ok := p.and(c); !ok {
		return []conj{p}
	}
	var out []conj
	acc := p
	for _, l := range c.lits() {
		if piece, ok := acc.with(lit{l.a, !l.neg}); ok {
			out = append(out, piece)
		}
		var ok bool
		if acc, ok = acc.with(l); !ok {
			break
		}
	}
	return out
}

// mergeSets merges conjunctions that differ only in one label, where both
// allow a set of values (the union is allowed) or both exclude one (the
// intersection is excluded). The result is their union exactly, so merging
// keeps disjoint terms disjoint.
func mergeSets(cs []conj) []conj {
	for merged := true; merged; {
		merged = false
		for i := 0; i < len(cs) && !merged; i++ {
			for j := i + 1; j < len(cs); j++ {
				if m, ok := mergeTwo(cs[i], cs[j]); ok {
					cs[i] = m
					cs = slices.Delete(cs, j, j+1)
					merged = true
					break
				}
			}
		}
	}
	return cs
}

func mergeTwo(a, b conj) (conj, bool) {
	if len(a) != len(b) {
		return nil, false
	}
	diff := -1
	for i := range a {
		if !a[i].equal(&b[i]) {
			if diff >= 0 || a[i].attr.Label != b[i].attr.Label {
				return nil, false
			}
			diff = i
		}
	}
	if diff < 0 {
		return a, true
	}
	x, y := &a[diff], &b[diff]
	m := slices.Clone(a)
	switch {
	case x.onlySet() && y.onlySet():
		m[diff].in = union(x.in, y.in)
	case x.onlyExcluded() && y.onlyExcluded():
		ex := intersect(x.notIn, y.notIn)
		if len(ex) == 0 {
			return slices.Delete(m, diff, diff+1), true
		}
		m[diff].notIn = ex
	default:
		return nil, false
	}
	return m, true
}

func (c conj) size() int {
	n := 0
	for i := range c {
		n += len(c[i].lits())
	}
	return n
}

func (c conj) lits() []lit {
	var out []lit
	for i := range c {
		out = append(out, c[i].lits()...)
	}
	return out
}

// and returns c ∧ d, false if that is known to be unsatisfiable.
func (c conj) and(d conj) (conj, bool) {
	ok := true
	for _, l := range d.lits() {
		if c, ok = c.with(l); !ok {
			return nil, false
		}
	}
	return c, true
}

// with returns c ∧ l, false if that is known to be unsatisfiable. c is not
// modified.
func (c conj) with(l lit) (conj, bool) {
	i, found := slices.BinarySearchFunc(c, l.a.attr.Label, func(x cons, label string) int {
		return cmp.Compare(x.attr.Label, label)
	})
	var k cons
	if found {
		k = c[i].clone()
	} else {
		k = cons{attr: l.a.attr}
	}
	k.add(l)
	if !k.normalize() {
		return nil, false
	}
	out := make(conj, 0, len(c)+1)
	out = append(out, c[:i]...)
	if !k.empty() {
		out = append(out, k)
	}
	if found {
		i++
	}
	return append(out, c[i:]...), true
}

func (k *cons) clone() cons {
	return cons{attr: k.attr, hasIn: k.hasIn, in: k.in, notIn: k.notIn,
		pos: slices.Clip(k.pos), neg: slices.Clip(k.neg)}
}

func (k *cons) add(l lit) {
	switch {
	case l.a.kind == kindIn && !l.neg:
		if k.hasIn {
			k.in = intersect(k.in, l.a.set)
		} else {
			k.hasIn, k.in = true, l.a.set
		}
	case l.a.kind == kindIn:
		k.notIn = union(k.notIn, l.a.set)
	case !l.neg:
		k.pos = append(k.pos, l.a)
	default:
		k.neg = append(k.neg, l.a)
	}
}

// normalize puts k in normal form and reports whether it may be satisfied.
func (k *cons) normalize() bool {
	if k.hasIn {
		// A finite set: test each value, exactly, and drop the rest.
		var in []string
		for _, v := range k.in {
			if k.allows(v) {
				in = append(in, v)
			}
		}
		k.in, k.notIn, k.pos, k.neg = in, nil, nil, nil
		return len(in) > 0
	}
	k.pos = prune(k.pos, func(a, b *atom) bool { return a.implies(b) })
	// ¬b1 ∧ ¬b2 is ¬b2 when b1 ⊆ b2.
	k.neg = prune(k.neg, func(a, b *atom) bool { return b.implies(a) })
	for i, a := range k.pos {
		for _, b := range k.pos[i+1:] {
			if a.disjoint(b) {
				return false
			}
		}
	}
	k.neg = slices.DeleteFunc(k.neg, func(b *atom) bool {
		for _, a := range k.pos {
			if a.disjoint(b) {
				return true // ¬b already follows from a
			}
		}
		return false
	})
	for _, b := range k.neg {
		for _, a := range k.pos {
			if a.implies(b) {
				return false
			}
		}
	}
	if len(k.notIn) > 0 {
		var notIn []string
		for _, v := range k.notIn {
			if k.patternsAllow(v) { // else excluded already
				notIn = append(notIn, v)
			}
		}
		k.notIn = notIn
	}
	sortAtoms(k.pos)
	sortAtoms(k.neg)
	return true
}

// prune drops duplicates, and each atom x for which covers(y, x) holds for
// another atom y that stays.
func prune(as []*atom, covers func(a, b *atom) bool) []*atom {
	var out []*atom
	for i, x := range as {
		drop := false
		for j, y := range as {
			if i == j {
				continue
			}
			// Of two atoms that cover each other, keep the first.
			if covers(y, x) && !(j > i && covers(x, y)) {
				drop = true
				break
			}
		}
		if !drop {
			out = append(out, x)
		}
	}
	return out
}

func sortAtoms(as []*atom) {
	slices.SortFunc(as, func(a, b *atom) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.arg, b.arg))
	})
}

func (k *cons) allows(v string) bool {
	_, excluded := slices.BinarySearch(k.notIn, v)
	return !excluded && k.patternsAllow(v)
}

func (k *cons) patternsAllow(v string) bool {
	for _, a := range k.pos {
		if !a.eval(v) {
			return false
		}
	}
	for _, a := range k.neg {
		if a.eval(v) {
			return false
		}
	}
	return true
}

func (k *cons) empty() bool {
	return !k.hasIn && len(k.notIn) == 0 && len(k.pos) == 0 && len(k.neg) == 0
}

func (k *cons) onlySet() bool { return k.hasIn } // normalize clears the rest

func (k *cons) onlyExcluded() bool {
	return !k.hasIn && len(k.notIn) > 0 && len(k.pos) == 0 && len(k.neg) == 0
}

func (k *cons) equal(o *cons) bool {
	sameAtoms := func(a, b []*atom) bool {
		return slices.EqualFunc(a, b, func(x, y *atom) bool { return x.same(y) })
	}
	return k.attr.Label == o.attr.Label && k.hasIn == o.hasIn && slices.Equal(k.in, o.in) &&
		slices.Equal(k.notIn, o.notIn) && sameAtoms(k.pos, o.pos) && sameAtoms(k.neg, o.neg)
}

func (k *cons) lits() []lit {
	var out []lit
	if k.hasIn {
		out = append(out, lit{&atom{attr: k.attr, kind: kindIn, set: k.in}, false})
	}
	if len(k.notIn) > 0 {
		out = append(out, lit{&atom{attr: k.attr, kind: kindIn, set: k.notIn}, true})
	}
	for _, a := range k.pos {
		out = append(out, lit{a, false})
	}
	for _, a := range k.neg {
		out = append(out, lit{a, true})
	}
	return out
}

func (c conj) selector() Selector {
	s := Selector{}
	for i := range c {
		k := &c[i]
		label := k.attr.Label
		if k.hasIn {
			s = append(s, setMatcher(label, k.in, OpEqual, OpRegexp))
		}
		if len(k.notIn) > 0 {
			s = append(s, setMatcher(label, k.notIn, OpNotEqual, OpNotRegexp))
		}
		for _, a := range k.pos {
			s = append(s, Matcher{label, OpRegexp, a.wire})
		}
		for _, a := range k.neg {
			s = append(s, Matcher{label, OpNotRegexp, a.wire})
		}
	}
	slices.SortStableFunc(s, func(a, b Matcher) int {
		return cmp.Or(cmp.Compare(a.Label, b.Label), cmp.Compare(a.Op.rank(), b.Op.rank()), cmp.Compare(a.Value, b.Value))
	})
	return s
}

// setMatcher matches (or excludes) a set of values: an exact matcher for
// one, an alternation of quoted literals for more.
func setMatcher(label string, set []string, one, many Op) Matcher {
	if len(set) == 1 {
		return Matcher{label, one, set[0]}
	}
	return Matcher{label, many, quoteSet(set)}
}

func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

func intersect(a, b []string) []string {
	var out []string
	for _, v := range a {
		if _, ok := slices.BinarySearch(b, v); ok {
			out = append(out, v)
		}
	}
	return out
}
