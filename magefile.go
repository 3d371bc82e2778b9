//go:build mage

// Mage targets. The agent needs none of them to build; the datasource
// backend is built with the Grafana plugin SDK's targets, imported as
// create-plugin does, from the repository root:
//
//	mage -v buildAll         # dist/gpx_slurmscope_<os>_<arch> for every platform
//	mage -v sdk:build:linux  # one platform; `mage -l` lists the rest
//	mage -v release:plugin   # bin/plugin/slurmscope-slurm-datasource-<version>.zip
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"

	// mage:import sdk
	"github.com/grafana/grafana-plugin-sdk-go/build"

	"github.com/slurmscope/slurmscope/internal/pluginzip"
)

// The SDK reads src/plugin.json and writes into dist/, beside the front
// end's build; the backend's main package is in grafana-plugin/, not ./pkg.
func init() {
	err := build.SetBeforeBuildCallback(func(cfg build.Config) (build.Config, error) {
		cfg.RootPackagePath = "./grafana-plugin/cmd/slurmscope-datasource"
		return cfg, nil
	})
	if err != nil {
		panic(err)
	}
}

// BuildAll builds the datasource backend for every platform Grafana runs on.
func BuildAll() { mg.Deps(build.BuildAll) }

// Package builds the .deb and .rpm packages into bin/packages. They are for
// this host's architecture and glibc: slurmscope-agent (the agent, its
// systemd unit and environment file, the CUDA injection library, the
// TaskProlog) for compute nodes, and slurmscope (the query CLI) for login
// and admin hosts.
func Package() error {
	return sh.RunV("go", "run", "./tools/package", "--out", "bin/packages")
}

// Release groups the release artifacts.
type Release mg.Namespace

// Plugin builds the plugin archive Grafana installs, bin/plugin/<id>-<version>.zip.
// Beside it go its .sha1 and .sha256. It holds one folder named for the
// plugin id: the front end (npm ci where node_modules is missing, then npm
// run build) and the backend for linux/amd64 and linux/arm64. With GRAFANA_ACCESS_POLICY_TOKEN set it is signed first
// (npm run sign: @grafana/sign-plugin; GRAFANA_ROOT_URLS set: a private
// signature for those URLs); without, it is unsigned, and Grafana loads it
// only where allow_loading_unsigned_plugins names it. Only this build needs
// Node.js, not the sites that install the archive.
func (Release) Plugin() error {
	if _, err := os.Stat("node_modules"); err != nil {
		if err := sh.RunV("npm", "ci"); err != nil {
			return err
		}
	}
	if err := sh.RunV("npm", "run", "build"); err != nil {
		return err
	}
	p, err := pluginzip.Read("dist")
	if err != nil {
		return err
	}
	// The archive holds the two Linux backends only, never another
	// platform's left by buildAll, nor a manifest signed for other files.
	stale, _ := filepath.Glob(filepath.Join("dist", p.Executable+"_*"))
	for _, f := range append(stale, filepath.Join("dist", "MANIFEST.txt")) {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	b := build.Build{}
	mg.SerialDeps(b.Linux, b.LinuxARM64)
	if os.Getenv("GRAFANA_ACCESS_POLICY_TOKEN") != "" {
		args := []string{"run", "sign"}
		if urls := os.Getenv("GRAFANA_ROOT_URLS"); urls != "" {
			args = append(args, "--", "--rootUrls", urls)
		}
		if err := sh.RunV("npm", args...); err != nil {
			return err
		}
	} else {
		fmt.Printf("GRAFANA_ACCESS_POLICY_TOKEN is not set: the plugin is unsigned, and Grafana loads it only with allow_loading_unsigned_plugins = %s\n", p.ID)
	}
	zip, err := pluginzip.Pack("dist", filepath.Join("bin", "plugin"))
	if err != nil {
		return err
	}
	fmt.Println(zip)
	return nil
}

// Bench groups the benchmarks that need root and print ratios.
type Bench mg.Namespace

// Agent profiles a fixed load on every CPU for 60 s and prints the agent's
// overhead, BPF time per sample, peak RSS and payload per interval.
func (Bench) Agent() error {
	return sh.RunV("go", "run", "./tools/bench/agent", "--duration", "60s")
}

// Test runs the whole suite, as CI does.
func Test() error {
	return sh.RunV("bash", "scripts/test.sh")
}
