# shellcheck shell=bash
# lib.sh: helpers shared by the root-run GPU checks in e2e/gpu
# (device-check.sh, standin-demo.sh, kernel-check.sh).
#
# SOURCED, NOT RUN: `source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"`.
# It only defines functions; sourcing it runs nothing and sets no variable.
#
# A check starts with begin_check, which installs end_check as its EXIT
# trap. The caller sets, before calling them:
#   LOG_NAME     the prefix of every message (the script's name)
#   LOG_FD       where log writes: 1 (stdout, default) or 2 (stderr)
#   STOP_TENTHS  how long end_check waits before SIGKILL (default 300: 30 s)
#   KEEP_WORK    1: end_check keeps the work directory
# and the functions read or set these of the caller's globals:
#   work                set by begin_check: the check's temporary directory
#   enter               set by begin_check: see there
#   agent_pid, job_pid  cleared by begin_check; the caller sets them to the
#                       agent and the job it starts, end_check stops them
#   agent               set by build_agent: the agent binary
#   cg_base, cg_leaf    set by job_cgroup_create, read by job_cgroup_remove

# log MSG...: "LOG_NAME: MSG" on LOG_FD.
log() { printf '%s: %s\n' "$LOG_NAME" "$*" >&"${LOG_FD:-1}"; }

# die MSG...: "LOG_NAME: MSG" on stderr, then exit 2 (the check could not run).
die() {
	printf '%s: %s\n' "$LOG_NAME" "$*" >&2
	exit 2
}

# begin_check TAG WHY: the start of every check. Dies unless run as root
# (WHY says what for), changes to the repository root, makes work
# (/tmp/slurmscope-TAG.XXXXXX), clears agent_pid, job_pid, cg_base and
# cg_leaf, sets enter, a script for `bash -c "$enter" NAME CGROUP CMD...`
# that moves itself into the cgroup directory CGROUP and execs CMD, and
# installs end_check as the EXIT trap (INT and TERM exit 130, which runs it).
begin_check() {
	[[ $(id -u) == 0 ]] || die "run as root: $2"
	cd "$(dirname "${BASH_SOURCE[0]}")/../.." || die "cannot change to the repository root"
	work=$(mktemp -d "/tmp/slurmscope-$1.XXXXXX")
	agent_pid=""
	job_pid=""
	cg_base=""
	cg_leaf=""
	# shellcheck disable=SC2016 # $1 is expanded by the inner bash
	enter='echo $$ >"$1/cgroup.procs" && shift && exec "$@"'
	trap end_check EXIT
	trap 'exit 130' INT TERM
}

# end_check: the EXIT trap of begin_check. Stops job_pid, then agent_pid
# (SIGKILL after STOP_TENTHS), removes the job's cgroup and, unless
# KEEP_WORK=1, the work directory, and exits with the script's status.
end_check() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	stop_pid "$job_pid" "${STOP_TENTHS:-300}"
	stop_pid "$agent_pid" "${STOP_TENTHS:-300}"
	job_cgroup_remove
	if [[ ${KEEP_WORK:-} == 1 ]]; then log "kept $work"; else rm -rf "$work"; fi
	exit "$rc"
}

# wait_profiling LOG: waits up to 60 s until the agent (agent_pid), whose
# output goes to LOG, logs that it is profiling; dies, showing LOG, if it
# exits first or does not.
wait_profiling() {
	for _ in $(seq 120); do
		kill -0 "$agent_pid" 2>/dev/null || {
			cat "$1" >&2
			die "the agent exited at start"
		}
		grep -q 'msg=profiling' "$1" && return 0
		sleep 0.5
	done
	cat "$1" >&2
	die "the agent did not start profiling within 60 s"
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
