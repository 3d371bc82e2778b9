// Package cli is the slurmscope-agent command line. main only calls Main,
// so every subcommand is testable in process. run wires the agent from
// lists of kinds, one line each: profile sources and sinks (pipeline.go),
// services (services.go) and interpreters (interpreters.go).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/slurmscope/slurmscope/internal/version"
)

// Main runs the agent with args (without the program name) and returns the
// exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "jobs":
		return jobsCmd(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, version.Get().String("slurmscope-agent"))
		return 0
	default:
		if fn, ok := extraCommands[args[0]]; ok {
			return fn(args[1:], stdout, stderr)
		}
		fmt.Fprintf(stderr, "slurmscope-agent: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
}

// extraCommands lets other files of this package add subcommands;
// summaries holds their one-line help.
var (
	extraCommands = map[string]func([]string, io.Writer, io.Writer) int{}
	summaries     = map[string]string{}
)

func usage(w io.Writer) {
	fmt.Fprint(w, `slurmscope-agent: SLURM-aware profiling agent for one compute node.

Commands:
  jobs    list the processes that belong to SLURM jobs, with their job attributes
  version print the agent's version (also --version)
`)
	names := make([]string, 0, len(extraCommands))
	for name := range extraCommands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-7s %s\n", name, summaries[name])
	}
	fmt.Fprintln(w, "\nRun 'slurmscope-agent <command> --help' for its flags.")
}

// shortHostname is the default node name: Slurm's NodeName is the short
// hostname on almost every cluster.
func shortHostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	h, _, _ = strings.Cut(h, ".")
	return h
}

// parseArgs parses a subcommand's flags. --help prints its help (exit
// 0); a bad flag or a stray argument is one line pointing at --help, not
// the whole help into a journal at every restart (exit 2). done is false
// when the command goes on.
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (rc int, done bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stderr)
		fs.Usage()
		return 0, true
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v (see %s --help)\n", fs.Name(), err, fs.Name())
		return 2, true
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, true
	}
	return 0, false
}
