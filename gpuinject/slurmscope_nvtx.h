/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slurmscope_nvtx.h: the NVTX-range ABI of libslurmscope_inject.so
 * (nvtx.c). NORMATIVE: the agent reads what is described here out of a
 * job's memory, so every offset, size and rule below is part of ABI
 * version SLURMSCOPE_NVTX_ABI_VERSION and changes only with a new version.
 *
 * The library is the NVTX tool of the process (NVTX_INJECTION64_PATH names
 * it; it may be the same file as CUDA_INJECTION64_PATH). It does not send
 * an event per push: it keeps, for every thread that used NVTX, one
 * struct slurmscope_nvtx_thread holding the thread's open ranges, and the
 * agent reads that struct when it samples the thread (CPU samples) or when
 * the thread launches a kernel (the launch marker of slurmscope_inject.h).
 * Range names and struct addresses are announced through the two markers
 * below, which follow the marker rules of slurmscope_inject.h (exported,
 * noinline, noipa, frame setup first, called with no lock held).
 *
 * Range ids. A range's id is FNV-1a 64 (offset basis 0xcbf29ce484222325,
 * prime 0x100000001b3) over the bytes
 *     domain name, one 0x00 byte, message
 * where the domain name is empty for NVTX's default domain and both parts
 * are taken after the library's truncation (domain names to
 * SLURMSCOPE_NVTX_DOMAIN_NAME_MAX bytes, messages to
 * SLURMSCOPE_NVTX_MESSAGE_MAX bytes; wide messages are first converted to
 * UTF-8, invalid code points becoming U+FFFD). A hash of 0 or 1 becomes 2:
 * 0 is SLURMSCOPE_NVTX_ID_NONE, 1 is SLURMSCOPE_NVTX_ID_OTHER. Narrow
 * messages are passed through as bytes: they are not guaranteed UTF-8
 * (the agent sanitises before display).
 *
 * Markers and their order:
 *   slurmscope_nvtx_range_name(id, text, len, domain_len)
 *     text is the len bytes that were hashed (domain, 0x00, message; no
 *     trailing NUL needed), domain_len the length of the domain part, so
 *     text[domain_len] == 0. Called before the id's first store into any
 *     thread struct, on the storing thread; called again later (two
 *     threads may meet a name at once, and the library's housekeeping
 *     thread re-announces up to 256 names every SLURMSCOPE_INJECT_FLUSH_MS,
 *     1 s by default, round robin), so the agent deduplicates. The agent
 *     should recompute the hash and drop an announcement that does not
 *     match. Beyond SLURMSCOPE_NVTX_NAMES_MAX names, new names share
 *     SLURMSCOPE_NVTX_ID_OTHER, announced with domain "" and message
 *     "(other NVTX ranges)".
 *   slurmscope_nvtx_thread(addr, tid)
 *     the struct of thread tid (a thread of the calling process) is at
 *     addr. Called on that thread before its first range is stored, and
 *     re-announced by the housekeeping thread (up to 256 threads per
 *     period, round robin), which is why tid is an argument: the agent
 *     keys the mapping by (its own pid of the caller, tid) and must not
 *     take tid as a thread of any other process.
 *
 * Reading a thread's ranges (at a sample of thread tid):
 *   1. read SLURMSCOPE_NVTX_THREAD_SIZE bytes at addr; drop the struct
 *      unless magic == SLURMSCOPE_NVTX_MAGIC, version ==
 *      SLURMSCOPE_NVTX_ABI_VERSION and tid == the sampled tid (structs are
 *      pooled and reused after a thread exits; a reused one carries its
 *      new owner's tid, a free one tid 0);
 *   2. root-most first: every nonzero started[i], i < started_cap, in
 *      index order (start/end ranges, see below); then stack[i] for
 *      i < min(depth, stack_cap), skipping zeros, outermost first;
 *   3. depth > stack_cap means depth - stack_cap ranges were pushed above
 *      the cap and are counted, not stored (the agent may show one
 *      "deeper" frame).
 * Consistency: entries are 8-byte aligned and written with single 8-byte
 * stores; a push stores stack[depth] before it stores depth + 1, a pop
 * only lowers depth (or zeroes an entry in place). A probe that interrupts
 * the owning thread therefore sees exactly the state between two of its
 * instructions; a concurrent reader (another CPU) sees a consistent prefix
 * in which each entry is either the old or the new range id.
 *
 * Domains: NVTX gives every domain its own push/pop nesting, but a sample
 * shows one stack per thread, so all domains of a thread share stack[] in
 * push order. A pop of domain D closes D's innermost open range: when that
 * is the top entry, depth drops (past any zeros below it); when a range of
 * another domain is above it, its entry is set to 0 in place and stays
 * until the ranges above it are popped. Pops with no open range of that
 * domain on the thread are ignored (depth never goes below 0).
 *
 * Start/end ranges (nvtxRangeStart*, nvtxDomainRangeStartEx) are not
 * nested and may end on another thread. They appear on the thread that
 * started them, in started[], from the start until the end (on whatever
 * thread the end is called) or until the starting thread exits. At most
 * started_cap of them are open per thread; further starts are counted and
 * return an id that their end ignores.
 *
 * Marks and category/thread naming are accepted and ignored.
 */
#ifndef SLURMSCOPE_NVTX_H
#define SLURMSCOPE_NVTX_H

#include <stdint.h>

#include "slurmscope_inject.h" /* SLURMSCOPE_MARKER */

#if defined(__cplusplus)
extern "C" {
#endif

#define SLURMSCOPE_NVTX_ABI_VERSION 1u
#define SLURMSCOPE_NVTX_MAGIC 0x564e5353u /* "SSNV" in memory */

#define SLURMSCOPE_NVTX_STACK_CAP 32u    /* stored push/pop entries per thread */
#define SLURMSCOPE_NVTX_STARTED_CAP 8u   /* open start/end ranges per thread */

#define SLURMSCOPE_NVTX_ID_NONE 0ull     /* empty entry / closed range */
#define SLURMSCOPE_NVTX_ID_OTHER 1ull    /* a range whose name did not fit the name table */

/* Caps (per process). */
#define SLURMSCOPE_NVTX_NAMES_MAX 4096u        /* distinct (domain, message) names */
#define SLURMSCOPE_NVTX_MESSAGE_MAX 256u       /* bytes of a message kept and hashed */
#define SLURMSCOPE_NVTX_DOMAIN_NAME_MAX 64u    /* bytes of a domain name kept and hashed */
#define SLURMSCOPE_NVTX_DOMAINS_MAX 64u        /* created domains; beyond: domain "(other)" */
#define SLURMSCOPE_NVTX_THREADS_MAX 4096u      /* thread structs alive at once */
#define SLURMSCOPE_NVTX_REGISTERED_MAX 4096u   /* registered strings */

/*
 * One thread's open ranges. Fixed layout, little endian, 344 bytes, 8-byte
 * aligned (the library keeps private bookkeeping after it; the agent reads
 * only these bytes):
 *
 *   offset size field
 *        0    4 magic        SLURMSCOPE_NVTX_MAGIC
 *        4    2 version      SLURMSCOPE_NVTX_ABI_VERSION
 *        6    2 stack_cap    number of stack[] entries (32)
 *        8    4 tid          owning thread (Linux tid); 0 while the struct is free
 *       12    4 depth        open push/pop ranges, may exceed stack_cap
 *       16    2 started_cap  number of started[] entries (8)
 *       18    2 _reserved0   zero
 *       20    4 _reserved1   zero
 *       24   64 started[8]   ids of open start/end ranges, 0 = free slot
 *       88  256 stack[32]    ids of open push/pop ranges, outermost first; 0 = closed
 */
struct slurmscope_nvtx_thread {
	uint32_t magic;
	uint16_t version;
	uint16_t stack_cap;
	uint32_t tid;
	uint32_t depth;
	uint16_t started_cap;
	uint16_t _reserved0;
	uint32_t _reserved1;
	uint64_t started[SLURMSCOPE_NVTX_STARTED_CAP];
	uint64_t stack[SLURMSCOPE_NVTX_STACK_CAP];
};

#define SLURMSCOPE_NVTX_THREAD_SIZE 344u
#define SLURMSCOPE_NVTX_OFF_TID 8u
#define SLURMSCOPE_NVTX_OFF_DEPTH 12u
#define SLURMSCOPE_NVTX_OFF_STARTED 24u
#define SLURMSCOPE_NVTX_OFF_STACK 88u

#if !defined(__cplusplus)
_Static_assert(sizeof(struct slurmscope_nvtx_thread) == SLURMSCOPE_NVTX_THREAD_SIZE, "thread struct size is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_nvtx_thread, version) == 4, "version offset is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_nvtx_thread, stack_cap) == 6, "stack_cap offset is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_nvtx_thread, tid) == SLURMSCOPE_NVTX_OFF_TID, "tid offset is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_nvtx_thread, depth) == SLURMSCOPE_NVTX_OFF_DEPTH, "depth offset is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_nvtx_thread, started_cap) == 16, "started_cap offset is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_nvtx_thread, started) == SLURMSCOPE_NVTX_OFF_STARTED, "started offset is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_nvtx_thread, stack) == SLURMSCOPE_NVTX_OFF_STACK, "stack offset is ABI");
#endif

/* A range name: text is len bytes (domain, 0x00, message), valid only for
 * the duration of the call; text[domain_len] == 0. */
SLURMSCOPE_MARKER void slurmscope_nvtx_range_name(uint64_t id, const char *text, uint32_t len,
                                                  uint32_t domain_len);

/* Thread tid of the calling process keeps its ranges at addr. */
SLURMSCOPE_MARKER void slurmscope_nvtx_thread(uint64_t addr, uint32_t tid);

#if defined(__cplusplus)
}
#endif
#endif /* SLURMSCOPE_NVTX_H */
