#!/bin/sh
# Slurm TaskProlog for slurmscope's GPU kernel profiles: each line printed as
# `export NAME=value` enters the task's environment. Use it as the TaskProlog
# (slurm.conf: TaskProlog=/usr/lib/slurmscope/taskprolog.sh), or run it from
# the site's own TaskProlog, which must then print what it prints.
#
# What it puts in every job's environment, and nothing else:
# CUDA_INJECTION64_PATH, so that the CUDA driver loads the injection library
# in processes that use CUDA (a job without CUDA loads nothing), and
# NVTX_INJECTION64_PATH, so that NVTX's headers load it in processes that
# mark ranges (a job without NVTX loads nothing). Slurm runs
# this with the task's environment, so a job decides for itself:
#   SLURMSCOPE_GPU_TRACE=off   loads nothing (and drops ours if an earlier
#                              step's TaskProlog left it in the environment)
#   CUDA_INJECTION64_PATH or   set to another library (Nsight Systems, ...):
#   NVTX_INJECTION64_PATH      kept; CUDA and NVTX load one library each
#
# Opt-in, off unless the site sets python_perf_support=1 below (in its own
# copy or TaskProlog: the package replaces this file on upgrade):
# PYTHONPERFSUPPORT=1, Python 3.12 and later's perf support. Every Python
# process of every job then calls each Python function through a small
# trampoline and writes /tmp/perf-<pid>.map, one line per function it runs,
# which Python leaves behind when it exits; in exchange perf maps name
# Python functions where the agent's own walk of CPython's frames (3.9 to
# 3.13, no variable needed) does not reach, such as Python 3.14.
python_perf_support=0

lib=/usr/lib/slurmscope/libslurmscope_inject.so
# give VAR: the same library serves CUDA (CUDA_INJECTION64_PATH: kernels
# under their launching stacks) and NVTX (NVTX_INJECTION64_PATH: ranges as
# frames). Only where the agent's package is installed (a job on a node
# without it gets nothing to load); a job's own library (Nsight sets both)
# is kept.
give() {
	eval "cur=\${$1:-}"
	case ${SLURMSCOPE_GPU_TRACE:-} in
	[Oo][Ff][Ff])
		if [ "$cur" = "$lib" ]; then
			echo "unset $1"
		fi
		;;
	*)
		if [ -r "$lib" ] && { [ -z "$cur" ] || [ "$cur" = "$lib" ]; }; then
			echo "export $1=$lib"
		fi
		;;
	esac
}
give CUDA_INJECTION64_PATH
give NVTX_INJECTION64_PATH
if [ "$python_perf_support" = 1 ]; then
	echo "export PYTHONPERFSUPPORT=1"
fi
