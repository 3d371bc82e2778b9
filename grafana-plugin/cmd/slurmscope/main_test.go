package main

import (
	"bytes"
	"strings"
	"testing"
)

func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return code, o.String(), e.String()
}

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string // a substring
	}{
		{[]string{"filter", "--target", "prometheus", `slurm.job.user == "bob" || host.name == "n1"`}, 0,
			"{slurm_job_user=\"bob\"}\n{host_name=\"n1\", slurm_job_user!=\"bob\"}\n", ""},
		{[]string{"filter", `slurm.job.user == "x\"} or {a=\"b"`}, 0, "{slurm_job_user=\"x\\\"} or {a=\\\"b\"}\n", ""},
		{[]string{"filter", "--target=pyroscope", "true"}, 0, "{}\n", ""},
		{[]string{"filter", `slurm.job.user == "a" && slurm.job.user == "b"`}, 0, "", ""},
		{[]string{"filter", "--canonical", `!(slurm.job.user == "a") && slurm.job.id == 7`}, 0,
			"slurm.job.user != \"a\" && slurm.job.id == \"7\"\n", ""},
		{[]string{"filter", "slurm.job.usr == \"a\" &&\n  x < 1"}, 2, "",
			"slurmscope filter: 1:1: unknown attribute slurm.job.usr; did you mean slurm.job.user?\n" +
				"slurmscope filter: 2:5: operator < is not supported"},
		{[]string{"filter", "--target", "loki", "true"}, 2, "", `unknown target "loki"`},
		{[]string{"filter"}, 2, "", "want exactly one filter argument"},
		{[]string{"filter", "true", "false"}, 2, "", "want exactly one filter argument"},
		{[]string{"filter", "--help"}, 0, "", "usage: slurmscope filter"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{}, 2, "", "filter "},
	} {
		code, stdout, stderr := run(tc.args...)
		if code != tc.code || (tc.code == 0 && stdout != tc.stdout) || (tc.code != 0 && !strings.Contains(stdout, tc.stdout)) ||
			!strings.Contains(stderr, tc.stderr) {
			t.Errorf("slurmscope %q = %d\nstdout:\n%s\nstderr:\n%s\nwant %d, stdout %q, stderr containing %q",
				tc.args, code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}

func TestHelpListsCommands(t *testing.T) {
	code, stdout, _ := run("help")
	if code != 0 || !strings.Contains(stdout, "\n  filter ") {
		t.Errorf("slurmscope help = %d, %q", code, stdout)
	}
}
