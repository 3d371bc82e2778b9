// Command testsum reads `go test -json` on stdin and prints what a CI log
// needs: each package's result line, the whole output of every test that
// failed (or never finished: a timeout or a panic), and then the slowest
// top-level tests, so that the next engineer sees where CI's minutes go
// without rerunning it. It exits 1 when any test or build failed.
//
//	go test -json ./... | go run ./tools/testsum [-slowest 25]
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	slowest := flag.Int("slowest", 25, "how many of the slowest top-level tests to list (0: none)")
	flag.Parse()
	failed, err := summarize(os.Stdin, os.Stdout, *slowest)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}
