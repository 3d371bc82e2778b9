// Command package builds slurmscope's .deb and .rpm packages for this
// host's architecture: slurmscope-agent (the agent, its systemd unit and
// environment file, the CUDA injection library, the TaskProlog) and
// slurmscope (the query CLI). See package packaging.
//
//	go run ./tools/package --out bin/packages   # or: mage package
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/slurmscope/slurmscope/internal/packaging"
)

func main() {
	repo := flag.String("repo", ".", "the source checkout")
	out := flag.String("out", "bin/packages", "where the packages are written")
	version := flag.String("version", "", "package version as semver (default: the vX.Y.Z tag at HEAD, else 0.0.0-git<commit time>.<hash>)")
	formats := flag.String("formats", strings.Join(packaging.Formats, ","), "package formats")
	goFlags := flag.String("go-flags", "-trimpath", "flags for go build, space separated")
	flag.Parse()
	paths, err := packaging.Build(context.Background(), packaging.Options{
		Repo: *repo, OutDir: *out, GoFlags: strings.Fields(*goFlags),
		Meta: packaging.Meta{Version: *version}, Formats: strings.Split(*formats, ","), Log: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "package:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "package:", err)
			os.Exit(1)
		}
		fmt.Printf("%s\t%d bytes\n", p, fi.Size())
	}
}
