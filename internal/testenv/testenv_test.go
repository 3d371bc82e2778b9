package testenv

import (
	"errors"
	"strings"
	"testing"
)

// fakeTB records what the gate did. Its Skip and Fatal return instead of
// stopping the goroutine, which the gate allows for.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Skip(args ...any)  { f.skipped = strings.TrimSpace(sprint(args)) }
func (f *fakeTB) Fatal(args ...any) { f.failed = strings.TrimSpace(sprint(args)) }

func sprint(args []any) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString(a.(string))
	}
	return b.String()
}

var (
	met    = Func("met thing", func() error { return nil })
	absent = Func("absent thing", func() error { return errors.New("not here") })
)

func TestGate(t *testing.T) {
	for _, tc := range []struct {
		name        string
		integration bool
		gate        func(testing.TB, ...Requirement)
		reqs        []Requirement
		skip, fail  string // substrings; "" means none
	}{
		{"integration off: skipped, naming its needs", false, RequireIntegration, []Requirement{met, absent},
			"set SLURMSCOPE_INTEGRATION=1; it needs met thing, absent thing", ""},
		{"integration off, nothing named", false, RequireIntegration, nil, "set SLURMSCOPE_INTEGRATION=1", ""},
		{"integration on, all met: runs", true, RequireIntegration, []Requirement{met}, "", ""},
		{"integration on, one missing: fails", true, RequireIntegration, []Requirement{met, absent},
			"", "SLURMSCOPE_INTEGRATION=1, but the test needs absent thing: not here"},
		{"tool test, met: runs without the variable", false, Require, []Requirement{met}, "", ""},
		{"tool test, missing: skipped", false, Require, []Requirement{absent}, "needs absent thing: not here", ""},
		{"tool test, missing under integration: fails", true, Require, []Requirement{absent},
			"", "needs absent thing: not here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := ""
			if tc.integration {
				v = "1"
			}
			t.Setenv(Env, v)
			f := &fakeTB{}
			tc.gate(f, tc.reqs...)
			if tc.skip == "" && f.skipped != "" || tc.skip != "" && !strings.Contains(f.skipped, tc.skip) {
				t.Errorf("skipped %q, want %q", f.skipped, tc.skip)
			}
			if tc.fail == "" && f.failed != "" || tc.fail != "" && !strings.Contains(f.failed, tc.fail) {
				t.Errorf("failed %q, want %q", f.failed, tc.fail)
			}
		})
	}
}

func TestTools(t *testing.T) {
	if err := Tools("sh").Check(); err != nil {
		t.Errorf("sh: %v", err)
	}
	err := Tools("sh", "slurmscope-no-such-tool").Check()
	if err == nil || !strings.Contains(err.Error(), "slurmscope-no-such-tool not on PATH") || strings.Contains(err.Error(), "sh,") {
		t.Errorf("a missing tool: %v", err)
	}
}
