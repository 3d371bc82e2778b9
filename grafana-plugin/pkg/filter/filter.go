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
