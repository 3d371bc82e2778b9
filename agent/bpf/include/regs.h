// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The registers of the probed user thread, for programs compiled per target
// architecture (bpf2go -target amd64,arm64 defines __TARGET_ARCH_*), and
// libbpf's PT_REGS_* accessors for them. Include after common.h.
//
// bpf_user_pt_regs_t, the context of a uprobe program (and the registers in
// a perf event's), is UAPI: on x86-64 it is struct pt_regs of
// <asm/ptrace.h> (these field names are the UAPI ones that bpf_tracing.h
// uses outside the kernel), on arm64 struct user_pt_regs.

#ifndef SLURMSCOPE_BPF_REGS_H
#define SLURMSCOPE_BPF_REGS_H

#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8;
	unsigned long rax, rcx, rdx, rsi, rdi, orig_rax, rip, cs, eflags, rsp, ss;
};
#elif defined(__TARGET_ARCH_arm64)
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
struct pt_regs;
#else
#error "unsupported target architecture"
#endif

#include <bpf/bpf_tracing.h>

#endif
