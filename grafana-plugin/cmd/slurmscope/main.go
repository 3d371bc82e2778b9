// Command slurmscope is the datasource side's command line: it runs the
// same code as the Grafana backend, for scripting and debugging. main only
// calls Main, so every subcommand is testable in process.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/slurmscope/slurmscope/internal/version"
)

func main() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) }

// Exit codes every command returns.
const (
	exitOK     = 0
	exitFail   = 1 // a backend or the output failed
	exitUsage  = 2 // bad usage or input
	exitNoData = 3 // the backends hold nothing for what was asked
	// exitPartial is a report from one backend while the other failed:
	// not 0, so that a script does not take half a report for the whole,
	// and not 1, so that it can tell there is a report to read.
	exitPartial = 4
)

// command is one subcommand. run gets the arguments after the command's
// name and returns the exit code: exitOK, exitFail, exitUsage,
// exitNoData or exitPartial.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands holds the subcommands; each file registers its own from init,
// so adding one touches no other file.
var commands = map[string]command{}

func register(name, summary string, run func(args []string, stdout, stderr io.Writer) int) {
	if _, dup := commands[name]; dup {
		panic("slurmscope: command " + name + " registered twice")
	}
	commands[name] = command{summary, run}
}

// Main runs the command line with args (without the program name) and
// returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	case "-version", "--version":
		fmt.Fprintln(stdout, version.Get().String("slurmscope"))
		return 0
	}
	if c, ok := commands[args[0]]; ok {
		return c.run(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "slurmscope: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString("slurmscope: query SLURM-aware profiles and GPU metrics.\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "  %-8s %s\n", name, commands[name].summary)
	}
	b.WriteString(`
Run 'slurmscope <command> --help' for its flags; 'slurmscope --version'
prints the version.

Exit status: 0 success, 1 a failure (a backend's error), 2 bad usage or
input, 3 no data: the backends hold nothing for what was asked (for job,
no profiles or metrics of that job in the range), 4 partial: one backend
failed and the report holds what the other gave, with a note.
`)
	io.WriteString(w, b.String())
}
