# shellcheck shell=bash
# lib.sh: helpers shared by the root-run GPU checks in e2e/gpu
# (device-check.sh, standin-demo.sh, kernel-check.sh).
#
# SOURCED, NOT RUN: `source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"`.
# It only defines functions; sourcing it runs nothing and sets no variable.
#
# The caller sets, before calling them:
#   LOG_NAME  the prefix of every message (the script's name)
#   LOG_FD    where log writes: 1 (stdout, default) or 2 (stderr)
# and the functions read or set these of the caller's globals:
#   agent               set by build_agent: the agent binary
#   cg_base, cg_leaf    set by job_cgroup_create, read by job_cgroup_remove

# log MSG...: "LOG_NAME: MSG" on LOG_FD.
log() { printf '%s: %s\n' "$LOG_NAME" "$*" >&"${LOG_FD:-1}"; }

# die MSG...: "LOG_NAME: MSG" on stderr, then exit 2 (the check could not run).
die() {
	printf '%s: %s\n' "$LOG_NAME" "$*" >&2
	exit 2
}

# stop_pid PID [TENTHS]: SIGCONT (it may be stopped), SIGTERM, then SIGKILL
# after TENTHS tenths of a second (default 300: 30 s), and reap it. Only for
# processes the caller started. An empty PID is a no-op.
stop_pid() {
	local pid=$1 tenths=${2:-300}
	[[ -n $pid ]] || return 0
	kill -CONT "$pid" 2>/dev/null || true
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq "$tenths"); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# build_agent OUT: sets agent to $SLURMSCOPE_AGENT (dies unless it is an
# executable), or builds ./agent/cmd/slurmscope-agent into OUT with no network
# (GOPROXY=off, -mod=readonly; CGO_CFLAGS defaults to
# "-O2 -g -Wno-deprecated-declarations" and is exported) and sets agent to
# OUT. Run from the repository root. Returns non-zero if go build fails: the
# caller says why.
build_agent() {
	if [[ -n ${SLURMSCOPE_AGENT:-} ]]; then
		agent=$SLURMSCOPE_AGENT
		[[ -x $agent ]] || die "SLURMSCOPE_AGENT=$agent is not an executable"
		return 0
	fi
	agent=$1
	log "building the agent"
	export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
	GOPROXY=off GOFLAGS=-mod=readonly go build -o "$agent" ./agent/cmd/slurmscope-agent
}

# cgroup2_mount: prints the first cgroup2 mount point in /proc/self/mountinfo
# (nothing if there is none).
cgroup2_mount() {
	awk '{for (i = 1; i <= NF; i++) if ($i == "-" && $(i + 1) == "cgroup2") { print $5; exit }}' /proc/self/mountinfo
}

# job_cgroup_create BASE JOB_ID: sets cg_base=BASE (a slice directory under
# the cgroup2 mount) and cg_leaf to the simulated SLURM job's task cgroup,
# BASE/slurmstepd.scope/job_JOB_ID/step_0/user/task_0, and creates it. They
# are set first, so job_cgroup_remove also removes a partly created path.
# Returns non-zero if mkdir fails: the caller says why.
job_cgroup_create() {
	cg_base=$1
	cg_leaf=$cg_base/slurmstepd.scope/job_$2/step_0/user/task_0
	mkdir -p "$cg_leaf"
}

# job_cgroup_remove: removes cg_leaf and its parents up to and including
# cg_base, child first (for the caller's EXIT trap, after its processes in
# the cgroup have been stopped). The kernel frees a dead task's cgroup
# lazily, so each rmdir is retried for 5 s; a directory that stays is logged
# as a warning. A no-op if job_cgroup_create was not called.
job_cgroup_remove() {
	local d
	[[ -n ${cg_leaf:-} ]] || return 0
	d=$cg_leaf
	while [[ $d == "$cg_base"* ]]; do
		for _ in $(seq 50); do
			[[ -d $d ]] || break
			rmdir "$d" 2>/dev/null && break
			sleep 0.1
		done
		if [[ -d $d ]]; then log "warning: could not remove cgroup $d"; fi
		[[ $d == "$cg_base" ]] && break
		d=$(dirname "$d")
	done
	return 0
}
