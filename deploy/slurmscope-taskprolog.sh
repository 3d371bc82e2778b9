#!/bin/sh
# Slurm TaskProlog for slurmscope's GPU kernel profiles: each line printed as
# `export NAME=value` enters the task's environment. Use it as the TaskProlog
# (slurm.conf: TaskProlog=/usr/lib/slurmscope/taskprolog.sh), or run it from
# the site's own TaskProlog, which must then print what it prints.
lib=/usr/lib/slurmscope/libslurmscope_inject.so
# Only where the agent's package is installed: a job on a node without it
# gets nothing to load.
if [ -r "$lib" ]; then
	echo "export CUDA_INJECTION64_PATH=$lib"
fi
# Python 3.12+: name Python frames in GPU and CPU profiles.
echo "export PYTHONPERFSUPPORT=1"
