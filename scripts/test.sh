#!/usr/bin/env bash
# Runs slurmscope's whole test suite: unit tests (no root), then the
# integration tier as root: real eBPF, a real SLURM (slurmctld + two slurmd,
# cgroup v1 and v2), a real Prometheus; and the datasource front end: type
# checks, jest, the plugin build and a browser test in Debian's Chromium.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
SLURMSCOPE_DEPS_FRONTEND=1 source scripts/deps.sh
# go-nvml's cgo preamble warns about every deprecated NVML call; not ours.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
[[ $(id -u) == 0 ]] || { echo "test.sh: the integration tier needs root" >&2; exit 1; }

# Each step says how long the run has taken so far: CI keeps under 15 min.
step() { printf '\n=== %s (at %dm%02ds)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

trap 'step "finished: exit $?"' EXIT

# The front end (npm ci, type checks, jest, what Grafana loads, and the
# browser test) runs in the background from the start, beside the Go
# checks and the unit and integration tests, which wait on real clocks
# (SLURM, timers, workloads) for much of their time; its log is printed
# after them. The e2e tests still run alone: load beside them moved their
# shares. What Grafana loads is module.js and plugin.json (webpack), and
# the backend for linux/amd64 and arm64 (the SDK's mage targets; `mage
# buildAll` also builds macOS and Windows, which CI skips for time).
# TestPluginDist checks it.
frontend_log=$(mktemp)
(
	set -e
	step "front end: npm ci, type check, jest"
	npm ci --no-audit --no-fund --loglevel=error
	npx tsc --noEmit -p tsconfig.json
	npm run test:ci
	step "plugin build: dist/"
	npm run build
	go run github.com/magefile/mage -v sdk:build:linux sdk:build:linuxARM64
	step "browser test: the real editors and flame graph in Chromium"
	npm run build:harness
	npm run e2e:browser
	step "front end built and tested"
) >"$frontend_log" 2>&1 &
frontend=$!

step "generated eBPF objects are reproducible (clang-14)"
agent/bpf/regen-check.sh
agent/python/regen-check.sh
agent/cpu/regen-check.sh
agent/gputrace/regen-check.sh
agent/stackwalk/regen-check.sh
agent/unwind/unwindtest/regen-check.sh
agent/offcpu/regen-check.sh
agent/nvtx/regen-check.sh

step "go vet"
go vet ./...

# Zero HIGH findings allowed, at any confidence (test files are not
# scanned). A value from a file, a process or a peer gets a range check; a
# conversion that provably cannot overflow, or a deliberate opt-in, carries
# `// #nosec RULE -- why` on its line (gosec does not read one on an if
# condition: convert before the if). tools/gosec runs gosec's own rules
# over the packages loaded once (its module pins the version).
step "gosec: no HIGH severity findings"
(cd tools/gosec && go vet . && go test -count=1 . && go run . -severity high -confidence low ../..)

# go test -json through tools/testsum: each package's line, the whole
# output of failed tests, then the slowest tests (the e2e lanes' queueing
# taken off), so that a CI log says where its minutes went.
testsum=$(mktemp)
go build -o "$testsum" ./tools/testsum
gotest() {
	SLURMSCOPE_INTEGRATION=1 go test -json -count=1 -timeout 25m "$@" | "$testsum" -slowest 20
}

# One pass: unit tests need nothing. Integration tests (root, eBPF, a real
# SLURM or Prometheus) pass one gate, internal/testenv's RequireIntegration:
# without SLURMSCOPE_INTEGRATION=1 they skip; with it a missing prerequisite
# fails rather than skips. Test clusters take a host-wide lock, so packages
# still run in parallel. e2e runs last, on its own: its tests run in two
# lanes that keep both CPUs busy (e2e/helpers_test.go), and the other
# packages' load beside them made its share checks fail.
step "unit and integration tests (the front end runs beside them)"
rc=0
gotest $(go list ./... | grep -v '/e2e$') || rc=1
wait "$frontend" || { echo "front end: FAILED"; rc=1; }
sed 's/^/front end: /' "$frontend_log"
step "end-to-end tests"
gotest ./e2e || rc=1
exit $rc
