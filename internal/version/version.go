// Package version names the build of every slurmscope binary: what
// `--version` prints. A release sets Version and Commit at link time
// (-ldflags "-X github.com/slurmscope/slurmscope/internal/version.Version=v0.2.0
// -X ...Commit=<sha>"); a `go build` or `go install` from a checkout or the
// module proxy falls back to what the Go toolchain embedded.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at link time by a release build.
var (
	Version = ""
	Commit  = ""
)

// Info is the build's identity.
type Info struct {
	Version, Commit, Go string
	Modified            bool // built from a checkout with uncommitted changes
}

// Get returns the build's identity: the link-time values, else the
// module version and VCS revision the toolchain recorded, else "devel".
func Get() Info {
	return get(Version, Commit, debug.ReadBuildInfo)
}

func get(v, c string, read func() (*debug.BuildInfo, bool)) Info {
	in := Info{Version: v, Commit: c, Go: runtime.Version()}
	if bi, ok := read(); ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.modified":
				in.Modified = in.Modified || s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	return in
}

// String is the line `prog --version` prints, as node_exporter's first
// line does: "slurmscope-agent version v0.2.0 (commit 1a2b3c4d5e6f, go1.26.8)".
func (i Info) String(prog string) string {
	c := i.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if c == "" {
		c = "unknown"
	}
	if i.Modified {
		c += "+modified"
	}
	return fmt.Sprintf("%s version %s (commit %s, %s)", prog, i.Version, c, i.Go)
}
