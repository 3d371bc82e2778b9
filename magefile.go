//go:build mage

// Mage targets. The Grafana plugin SDK's build targets join these when the
// datasource backend lands; the agent needs none of them to build.
package main

import (
	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Bench groups the benchmarks that need root and print ratios.
type Bench mg.Namespace

// Agent profiles a fixed load on every CPU for 60 s and prints the agent's
// overhead, BPF time per sample, peak RSS and payload per interval.
func (Bench) Agent() error {
	return sh.RunV("go", "run", "./e2e/bench/agent", "--duration", "60s")
}

// Test runs the whole suite, as CI does.
func Test() error {
	return sh.RunV("bash", "scripts/test.sh")
}
