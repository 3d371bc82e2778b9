// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The interpreters the stack capture walks (stack.h): each one's header,
// and its line in STACK_INTERPRETERS, X(kind, walk), where walk is
//
//	void walk(struct interp_proc *ip, void *task, __u64 pid_tgid,
//	          __u64 start_boottime_ns, struct interp_stack *out);
//
// called for a process whose interp_procs entry has that kind, with
// out->len, flags and status zeroed. Its Go half registers the same kind
// (agent/interp).

#ifndef SLURMSCOPE_INTERPRETERS_H
#define SLURMSCOPE_INTERPRETERS_H

#include "python.h"

#define STACK_INTERPRETERS(X) X(INTERP_PYTHON, py_walk)

#endif // SLURMSCOPE_INTERPRETERS_H
