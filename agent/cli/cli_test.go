package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/internal/version"
)

// TestVersion: --version and the version command print the build's one
// line to stdout and exit 0, as a package's postinstall or an admin's
// check expects.
func TestVersion(t *testing.T) {
	want := version.Get().String("slurmscope-agent") + "\n"
	for _, arg := range []string{"--version", "-version", "version"} {
		var stdout, stderr bytes.Buffer
		if code := Main([]string{arg}, &stdout, &stderr); code != 0 {
			t.Errorf("%s: exit %d, stderr %q", arg, code, stderr.String())
		}
		if stdout.String() != want {
			t.Errorf("%s: stdout %q, want %q", arg, stdout.String(), want)
		}
		if !strings.HasPrefix(stdout.String(), "slurmscope-agent version ") {
			t.Errorf("%s: stdout %q does not name the program", arg, stdout.String())
		}
		if stderr.Len() != 0 {
			t.Errorf("%s: stderr %q", arg, stderr.String())
		}
	}
}

// TestHelpExitsZero: asking for help, of the agent or of a command, is no
// error; no arguments and an unknown command are.
func TestHelpExitsZero(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{[]string{"-h"}, 0, "Commands:"},
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"help"}, 0, "Commands:"},
		{[]string{"run", "-h"}, 0, "-metrics-addr"},
		{[]string{"run", "--help"}, 0, "-upload-interval"},
		{[]string{"jobs", "--help"}, 0, "-json"},
		{[]string{"top", "-h"}, 0, "usage: slurmscope-agent top"},
		{nil, 2, "Commands:"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"run", "--nope"}, 2, "flag provided but not defined"},
		{[]string{"check", "-h"}, 0, "usage: slurmscope-agent check"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(tc.args, &stdout, &stderr)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d", tc.args, code, tc.code)
		}
		if out := stdout.String() + stderr.String(); !strings.Contains(out, tc.out) {
			t.Errorf("%q: output does not contain %q:\n%s", tc.args, tc.out, out)
		}
	}
	// A typo is one line that points at --help, whichever the command.
	for _, cmd := range []string{"run", "check", "jobs", "top"} {
		for _, args := range [][]string{{cmd, "--nope"}, {cmd, "stray"}} {
			var stderr bytes.Buffer
			if code := Main(args, io.Discard, &stderr); code != 2 || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 ||
				!strings.HasPrefix(stderr.String(), cmd+": ") {
				t.Errorf("%q: exit %d, stderr %q; want exit 2 and one line naming %s", args, code, stderr.String(), cmd)
			}
		}
	}
	var stdout bytes.Buffer
	Main([]string{"--help"}, &stdout, &bytes.Buffer{})
	for _, cmd := range []string{"jobs", "run", "top", "version"} {
		if !strings.Contains(stdout.String(), "\n  "+cmd+" ") {
			t.Errorf("--help does not list %s:\n%s", cmd, stdout.String())
		}
	}
}
