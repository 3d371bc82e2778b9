package query

import (
	"errors"
	"fmt"
	"slices"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/schema"
)

// Scope is what a query may see: the user's filter, and when job ownership
// applies, the login every selector must pin slurm.job.user to.
type Scope struct {
	Filter *filter.Filter // nil means everything
	Owner  string         // "" means no ownership restriction
	// Restricted with an empty Owner sees nothing (a user with no login).
	Restricted bool
}

// ErrNoLogin is the answer to a restricted request without a login.
var ErrNoLogin = errors.New("job ownership is on and the request carries no Grafana login")

// Selectors returns the scope's disjoint selectors for t. With ownership
// on, the owner's equality is ANDed in, and every selector is checked to
// carry it before anything is sent: a user's filter cannot widen past it.
func (s Scope) Selectors(t filter.Target) ([]filter.Selector, error) {
	f := s.Filter
	if f == nil {
		f = filter.True()
	}
	if !s.Restricted {
		sels := f.Selectors(t)
		return sels, f.Err()
	}
	if s.Owner == "" {
		return nil, ErrNoLogin
	}
	f = filter.And(f, filter.Equal(schema.JobUser, s.Owner))
	sels := f.Selectors(t)
	if err := f.Err(); err != nil {
		return nil, err
	}
	for _, sel := range sels {
		if !slices.Contains(sel, filter.Matcher{Label: schema.JobUser.Label, Op: filter.OpEqual, Value: s.Owner}) {
			// Fail closed: this would be a bug in the filter package.
			return nil, fmt.Errorf("internal error: selector %s escapes job ownership", sel)
		}
	}
	return sels, nil
}

// narrowed is s with f ANDed into its filter; ownership stays as it is.
func (s Scope) narrowed(f *filter.Filter) Scope {
	s.Filter = filter.And(s.Filter, f)
	return s
}
