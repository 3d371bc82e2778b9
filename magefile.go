//go:build mage

// Mage targets. The agent needs none of them to build; the datasource
// backend is built with the Grafana plugin SDK's targets, imported as
// create-plugin does, from the repository root:
//
//	mage -v buildAll         # dist/gpx_slurmscope_<os>_<arch> for every platform
//	mage -v sdk:build:linux  # one platform; `mage -l` lists the rest
package main

import (
	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"

	// mage:import sdk
	"github.com/grafana/grafana-plugin-sdk-go/build"
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
