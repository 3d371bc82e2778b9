package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/internal/printable"
)

func init() {
	register("filter", "compile a CEL filter into label selectors", filterCmd)
}

func filterCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("slurmscope filter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "pyroscope", "selector syntax to print: pyroscope or prometheus")
	canonical := fs.Bool("canonical", false, "print the filter's canonical CEL form instead of selectors")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: slurmscope filter [--target pyroscope|prometheus] [--canonical] 'CEL filter'

Prints the label selectors the filter compiles to, one per line. They are
pairwise disjoint and their union is exactly the filter, so answers summed
over them count each series once. A filter that is always true prints {};
one that can never be true prints nothing. An invalid filter exits 2 with
the problems, as line:column, on stderr.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	t, ok := filter.ParseTarget(*target)
	if !ok {
		fmt.Fprintf(stderr, "slurmscope filter: unknown target \"%s\": want pyroscope or prometheus\n", printable.String(*target, ""))
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "slurmscope filter: want exactly one filter argument (quote it)")
		fs.Usage()
		return 2
	}
	f, err := filter.Compile(fs.Arg(0))
	if err != nil {
		for _, line := range printable.Lines(err.Error()) {
			fmt.Fprintln(stderr, "slurmscope filter: "+line)
		}
		return 2
	}
	var b strings.Builder
	if *canonical {
		b.WriteString(f.String() + "\n")
	} else {
		for _, s := range f.Selectors(t) {
			b.WriteString(s.String() + "\n")
		}
	}
	if _, err := io.WriteString(stdout, b.String()); err != nil {
		fmt.Fprintln(stderr, "slurmscope filter:", err)
		return 1
	}
	return 0
}
