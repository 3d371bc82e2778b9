//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// No program: this object exists for its BTF, from which bpf2go generates
// the Go types of python.h's structs (gen.go). (The build constraint above
// keeps the go tool from taking this file for a cgo source.)

#include "common.h"
#include "stack.h"

const struct py_proc *unused_proc __attribute__((unused));
const enum py_kind *unused_kind __attribute__((unused));
const enum py_proc_flag *unused_flag __attribute__((unused));
const struct py_frame_buf *unused_buf __attribute__((unused));

char LICENSE[] SEC("license") = "Dual BSD/GPL";
