package main

import (
	"bytes"
	"strings"
	"testing"
)

// The gate fails on a HIGH finding, names it, and honours #nosec.
func TestHighFindingFails(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-severity", "high", "testdata/bad"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out.String(), errb.String())
	}
	if n := strings.Count(out.String(), "[G115"); n != 1 || !strings.Contains(out.String(), "bad.go:5:") {
		t.Errorf("want the one unsuppressed G115 at bad.go:5, got:\n%s", out.String())
	}
	if !strings.Contains(errb.String(), "1 #nosec") {
		t.Errorf("the #nosec line was not counted: %s", errb.String())
	}
}

func TestBadArguments(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{nil, {"-severity", "urgent", "."}} {
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
