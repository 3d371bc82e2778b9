package cli

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEDocumentsEveryRunFlag keeps the README's `run` flags table and
// `slurmscope-agent run --help` in step, from the flag set run builds:
// every flag has a row (named in the table's first column), and every
// flag the table names is one run accepts.
func TestREADMEDocumentsEveryRunFlag(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	_, section, ok := strings.Cut(readme, "\n### `run` flags\n")
	if !ok {
		t.Fatal("README has no \"### `run` flags\" section")
	}
	if i := strings.Index(section, "\n### "); i >= 0 {
		section = section[:i]
	}
	flagRE := regexp.MustCompile("`--([a-z0-9][a-z0-9.-]*)`")
	rows, named := map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 {
			continue
		}
		for _, m := range flagRE.FindAllStringSubmatch(cells[1], -1) {
			rows[m[1]] = true
		}
		for _, m := range flagRE.FindAllStringSubmatch(line, -1) {
			named[m[1]] = true
		}
	}
	fs, _ := runFlagSet(t)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !rows[f.Name] {
			t.Errorf("--%s (%s) has no row in the README's `run` flags table", f.Name, f.Usage)
		}
	})
	if n < 40 || len(rows) < 40 {
		t.Fatalf("%d flags, %d rows: the flag set or the table is not what this test reads", n, len(rows))
	}
	for name := range named {
		if fs.Lookup(name) == nil {
			t.Errorf("the README's `run` flags table names --%s, which run does not accept", name)
		}
	}
}
