// Package packaging builds the .deb and .rpm packages a site installs:
// slurmscope-agent for compute nodes (the agent, its systemd unit and
// environment file, the CUDA injection library and the TaskProlog) and
// slurmscope for login and admin hosts (the query CLI). nfpm writes both
// formats in process, so no packaging tool is needed on the build host.
//
// Packages are for the build host's architecture and C library: the agent
// and the injection library are cgo/C builds, and the packages require the
// newest glibc symbol version the binaries import (read from their ELF
// headers), so a package never installs where its binaries cannot run.
package packaging

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

// Where the packages put things on a node. deploy/slurmscope-agent.service
// and deploy/slurmscope-agent.env name these paths; a test holds them to it.
const (
	AgentBinary = "/usr/bin/slurmscope-agent"
	UnitFile    = "/usr/lib/systemd/system/slurmscope-agent.service"
	EnvFile     = "/etc/slurmscope/agent.env"
	InjectLib   = "/usr/lib/slurmscope/libslurmscope_inject.so"
	TaskProlog  = "/usr/lib/slurmscope/taskprolog.sh"
	CLIBinary   = "/usr/bin/slurmscope"
)

// Package names.
const (
	AgentPackage = "slurmscope-agent"
	CLIPackage   = "slurmscope"
)

// Formats are the package formats written, as nfpm names them.
var Formats = []string{"deb", "rpm"}

// Stage holds the paths of the built files the packages are made of.
type Stage struct {
	Agent     string // slurmscope-agent
	CLI       string // slurmscope
	InjectLib string // libslurmscope_inject.so
}

// Compile builds the binaries from the checkout at repo into dir: the two Go
// commands with `go build goFlags...`, and the injection library with its
// build.sh (the C compiler is $CC, default cc). Build output goes to log.
func Compile(ctx context.Context, repo, dir string, goFlags []string, log io.Writer) (Stage, error) {
	st := Stage{
		Agent:     filepath.Join(dir, "slurmscope-agent"),
		CLI:       filepath.Join(dir, "slurmscope"),
		InjectLib: filepath.Join(dir, "libslurmscope_inject.so"),
	}
	steps := [][]string{
		append(append([]string{"go", "build"}, goFlags...), "-o", st.Agent, "./agent/cmd/slurmscope-agent"),
		append(append([]string{"go", "build"}, goFlags...), "-o", st.CLI, "./grafana-plugin/cmd/slurmscope"),
		{"sh", "gpuinject/build.sh", dir},
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, s[0], s[1:]...)
		cmd.Dir = repo
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return Stage{}, fmt.Errorf("%s: %w", strings.Join(s, " "), err)
		}
	}
	return st, nil
}

// Meta is what the packages say about themselves.
type Meta struct {
	// Version as semver (1.2.3, 0.0.0-git20261201.1a2b3c4); a pre-release
	// sorts before its release in both dpkg and rpm.
	Version string
	// Arch is a GOARCH; empty means the build host's.
	Arch string
	// MTime is every file's modification time; zero means now.
	MTime time.Time
}

// Packages describes the two packages in format ("deb" or "rpm"), from the
// built files in st and the deploy/ files of the checkout at repo. Each call
// returns new values, since nfpm rewrites an Info while it writes it.
func Packages(repo string, st Stage, m Meta, format string) ([]*nfpm.Info, error) {
	deploy := func(name string) string { return filepath.Join(repo, "deploy", name) }
	license := filepath.Join(repo, "LICENSE")

	agentLibc, err := MinGlibc(st.Agent, st.InjectLib)
	if err != nil {
		return nil, err
	}
	cliLibc, err := MinGlibc(st.CLI)
	if err != nil {
		return nil, err
	}

	agent := newInfo(m, format, AgentPackage, agentLibc,
		"SLURM-aware CPU and GPU profiling agent for compute nodes",
		"Runs on every compute node: samples CPU stacks with eBPF, places each\n"+
			"process in its SLURM job, traces CUDA kernels through an injection\n"+
			"library, reads GPU metrics through NVML, and ships per-job profiles\n"+
			"to Pyroscope and metrics to Prometheus. Needs Linux 5.8 or later with BTF.",
		files.Contents{
			file(st.Agent, AgentBinary, 0o755),
			file(deploy("slurmscope-agent.service"), UnitFile, 0o644),
			// An admin's edits survive upgrades: a conffile for dpkg,
			// %config(noreplace) for rpm.
			{Source: deploy("slurmscope-agent.env"), Destination: EnvFile, Type: files.TypeConfigNoReplace, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
			file(st.InjectLib, InjectLib, 0o644),
			file(deploy("slurmscope-taskprolog.sh"), TaskProlog, 0o755),
			// Owned, so that rpm -e removes them too.
			dir(filepath.Dir(EnvFile)),
			dir(filepath.Dir(InjectLib)),
		}, license)
	agent.Scripts = nfpm.Scripts{
		PostInstall: deploy("package/postinstall.sh"),
		PreRemove:   deploy("package/preremove.sh"),
		PostRemove:  deploy("package/postremove.sh"),
	}

	cli := newInfo(m, format, CLIPackage, cliLibc,
		"slurmscope command line: filters and per-job reports",
		"Queries Pyroscope and Prometheus with slurmscope's filters, as the\n"+
			"Grafana datasource does: `slurmscope job ID` prints a job's GPU use\n"+
			"and top functions, `slurmscope filter` shows what a filter becomes.",
		files.Contents{file(st.CLI, CLIBinary, 0o755)}, license)
	return []*nfpm.Info{agent, cli}, nil
}

func file(src, dst string, mode os.FileMode) *files.Content {
	return &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: mode}}
}

func dir(dst string) *files.Content {
	return &files.Content{Destination: dst, Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Mode: 0o755}}
}

func newInfo(m Meta, format, name, glibc, summary, description string, contents files.Contents, license string) *nfpm.Info {
	arch := m.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	// Debian wants the license as /usr/share/doc/<name>/copyright, RPM
	// distributions as a %license file.
	contents = append(contents,
		&files.Content{Source: license, Destination: "/usr/share/doc/" + name + "/copyright", Packager: "deb", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
		&files.Content{Source: license, Destination: "/usr/share/licenses/" + name + "/LICENSE", Packager: "rpm", Type: files.TypeRPMLicense, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
	)
	info := &nfpm.Info{
		Name:        name,
		Arch:        arch,
		Platform:    "linux",
		Version:     m.Version,
		Release:     "1",
		Section:     "admin",
		Priority:    "optional",
		Maintainer:  "slurmscope developers",
		Vendor:      "slurmscope",
		Homepage:    "https://github.com/slurmscope/slurmscope",
		License:     "Apache-2.0",
		Description: summary + "\n" + description,
		MTime:       m.MTime,
		Overridables: nfpm.Overridables{
			Contents: contents,
			// gzip: every dpkg and rpm reads it (zstd needs dpkg 1.21.18),
			// and nfpm's xz, pure Go, took 5 to 7 times as long for a
			// package 5% smaller.
			RPM: nfpm.RPM{Summary: summary, Group: "System Environment/Daemons", Compression: "gzip"},
			Deb: nfpm.Deb{Compression: "gzip"},
		},
	}
	// The C library is libc6 on Debian and glibc on RPM distributions.
	switch {
	case glibc == "":
	case format == "deb":
		info.Depends = []string{"libc6 (>= " + glibc + ")"}
	default:
		info.Depends = []string{"glibc >= " + glibc}
	}
	return info
}

// Write writes info as a package of format ("deb" or "rpm") into dir, with
// its conventional file name, and returns the file's path.
func Write(info *nfpm.Info, format, dir string) (string, error) {
	p, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", fmt.Errorf("%s %s: %w", info.Name, format, err)
	}
	path := filepath.Join(dir, p.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := p.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("%s %s: %w", info.Name, format, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
}

// MinGlibc returns the newest glibc symbol version ("2.34") that the ELF
// files at paths import, or "" when none imports any.
func MinGlibc(paths ...string) (string, error) {
	var vers []string
	for _, p := range paths {
		f, err := elf.Open(p)
		if err != nil {
			return "", fmt.Errorf("glibc version of %s: %w", p, err)
		}
		syms, err := f.ImportedSymbols()
		f.Close()
		if err != nil && err != elf.ErrNoSymbols {
			return "", fmt.Errorf("glibc version of %s: %w", p, err)
		}
		for _, s := range syms {
			vers = append(vers, s.Version)
		}
	}
	return newestGlibc(vers), nil
}

// newestGlibc returns the highest of the GLIBC_x.y[.z] versions in vers,
// compared numerically ("2.34" > "2.4"), without the prefix; other names
// are ignored.
func newestGlibc(vers []string) string {
	var best []int
	bestS := ""
	for _, v := range vers {
		s, ok := strings.CutPrefix(v, "GLIBC_")
		if !ok {
			continue
		}
		n, ok := parseDotted(s)
		if ok && (bestS == "" || slices.Compare(n, best) > 0) {
			best, bestS = n, s
		}
	}
	return bestS
}

func parseDotted(s string) ([]int, bool) {
	parts := strings.Split(s, ".")
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

// GitVersion returns a version for the checkout at repo: its tag when HEAD
// is tagged vX.Y.Z, else 0.0.0-git<commit date>.<short hash>, which sorts
// before any release and after earlier commits. The commit time is returned
// too, for reproducible file times.
func GitVersion(ctx context.Context, repo string) (string, time.Time, error) {
	out, err := git(ctx, repo, "log", "-1", "--format=%ct %h")
	if err != nil {
		return "", time.Time{}, err
	}
	ts, hash, _ := strings.Cut(out, " ")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("git log: %q", out)
	}
	mtime := time.Unix(sec, 0).UTC()
	if tag, err := git(ctx, repo, "describe", "--tags", "--exact-match", "--match", "v[0-9]*"); err == nil {
		return strings.TrimPrefix(tag, "v"), mtime, nil
	}
	return "0.0.0-git" + mtime.Format("20060102150405") + "." + hash, mtime, nil
}

func git(ctx context.Context, repo string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = repo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// Options are what Build needs.
type Options struct {
	Repo    string   // the source checkout
	OutDir  string   // where the packages are written (created if missing)
	GoFlags []string // for go build, e.g. -trimpath
	Meta    Meta     // Version empty: GitVersion's
	Formats []string // nil: Formats
	Log     io.Writer
}

// Build compiles the binaries in a temporary directory and writes every
// package in every format to o.OutDir, returning the packages' paths.
func Build(ctx context.Context, o Options) ([]string, error) {
	if o.Meta.Version == "" {
		v, mtime, err := GitVersion(ctx, o.Repo)
		if err != nil {
			return nil, fmt.Errorf("version: %w (pass one)", err)
		}
		o.Meta.Version = v
		if o.Meta.MTime.IsZero() {
			o.Meta.MTime = mtime
		}
	}
	if o.Formats == nil {
		o.Formats = Formats
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp("", "slurmscope-package-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	st, err := Compile(ctx, o.Repo, stage, o.GoFlags, o.Log)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, format := range o.Formats {
		infos, err := Packages(o.Repo, st, o.Meta, format)
		if err != nil {
			return nil, err
		}
		for _, info := range infos {
			p, err := Write(info, format, o.OutDir)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}
