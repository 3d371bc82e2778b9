// Command tsgen writes the front end's files generated from the query
// type registry (querytype.TypeScript) under the repository root given as
// its argument: go generate ./grafana-plugin/pkg/query/querytype.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/querytype"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tsgen REPOSITORY-ROOT")
		os.Exit(2)
	}
	files, err := querytype.TypeScript()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tsgen:", err)
		os.Exit(1)
	}
	for path, b := range files {
		if err := os.WriteFile(filepath.Join(os.Args[1], path), b, 0o644); err != nil { // #nosec G306 -- a source file, world-readable like the rest
			fmt.Fprintln(os.Stderr, "tsgen:", err)
			os.Exit(1)
		}
	}
}
