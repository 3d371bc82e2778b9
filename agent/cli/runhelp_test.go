package cli

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// run --help lists every flag once, under a group's title, with the
// common flags first in the order a site sets them.
func TestRunHelpIsGrouped(t *testing.T) {
	var stderr strings.Builder
	if rc := runCmd([]string{"--help"}, io.Discard, &stderr); rc != 0 {
		t.Fatalf("run --help: exit %d", rc)
	}
	help := stderr.String()
	fs, _ := runFlagSet(t)
	seen := map[string]int{}
	var first []string
	group := ""
	for _, line := range strings.Split(help, "\n") {
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			group = strings.TrimSuffix(line, ":")
			continue
		}
		name, ok := strings.CutPrefix(line, "  -")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, " ")
		seen[name]++
		if group == "Common" {
			first = append(first, name)
		}
	}
	n := 0
	fs.VisitAll(func(fl *flag.Flag) {
		n++
		if seen[fl.Name] != 1 {
			t.Errorf("--%s is listed %d times", fl.Name, seen[fl.Name])
		}
	})
	if len(seen) != n {
		t.Errorf("help lists %d flags, run has %d", len(seen), n)
	}
	if want := "node-name pyroscope-url output-dir prometheus-remote-write-url metrics-addr upload-interval log-level"; strings.Join(first, " ") != want {
		t.Errorf("common flags %q, want %q", strings.Join(first, " "), want)
	}
	if i, j := strings.Index(help, "\nCommon:"), strings.Index(help, "\nAdvanced"); i < 0 || j < i {
		t.Errorf("want Common first and Advanced last:\n%s", help)
	}
	for _, want := range []string{"  -upload-interval duration\n", "  -unwind-table-bytes size\n"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
