// Command slurmscope-agent is the per-node slurmscope agent.
package main

import (
	"os"

	"github.com/slurmscope/slurmscope/agent/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
