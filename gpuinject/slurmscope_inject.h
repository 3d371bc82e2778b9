/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slurmscope_inject.h: the marker ABI of libslurmscope_inject.so.
 *
 * The library is loaded into a CUDA job through CUDA_INJECTION64_PATH. It
 * never talks to the slurmscope agent directly: it calls the exported,
 * empty "marker" functions below, and the agent attaches uprobes to them by
 * symbol name, reading the arguments from registers (and, for records, the
 * array they point to). A process without the agent pays one call per
 * marker and nothing else.
 *
 * Stability rules (ABI version SLURMSCOPE_INJECT_ABI_VERSION):
 *   - symbol names, argument order and types below never change within an
 *     ABI version; a change bumps the version, which the library also
 *     exports as the data symbol `slurmscope_inject_abi_version` (uint32_t)
 *     so the agent can check it before attaching;
 *   - struct slurmscope_kernel_record has the fixed little-endian layout
 *     documented at its definition; new fields are only ever added by a new
 *     ABI version;
 *   - all markers are called with no lock of the library held;
 *   - markers may be added within an ABI version (slurmscope_trace_state
 *     was): an agent that does not know one simply does not probe it, and
 *     an agent that probes one checks the library exports it.
 *
 * Call order guarantees the agent can rely on:
 *   - slurmscope_kernel_name(id, ...) is called before the first launch
 *     marker or record batch that carries that id, on whichever thread
 *     meets the name first. It is called again later, so the agent must
 *     deduplicate: every flush period (SLURMSCOPE_INJECT_FLUSH_MS, 1 s) the
 *     library's housekeeping thread re-announces up to 256 names that have
 *     completed a kernel (round robin: each such name at least every
 *     ceil(names / 256) periods), so an agent started after the first
 *     announcement learns them; and when the name table (16384 names) is
 *     full, names outside it are announced on every use.
 *   - slurmscope_kernel_launch runs on the thread that launches the kernel,
 *     inside the CUDA API call, before the launch is submitted, so a uprobe
 *     there sees the launching call stack. Only sampled launches call it.
 *   - slurmscope_kernel_records runs on a CUPTI-owned thread, the library's
 *     housekeeping thread (periodic flush) or the thread calling the flush at
 *     exit, after the kernels completed, in batches of at most
 *     SLURMSCOPE_RECORDS_MAX records, normally within about one flush period
 *     of completion. Every completed kernel is reported, sampled or not.
 *   - slurmscope_trace_state runs on the thread that made the transition
 *     (the other CUPTI client's cuptiSubscribe or cuptiUnsubscribe call),
 *     after every record of the kernels traced before a step-aside and
 *     before any marker of the kernels traced after a resume.
 *
 * Nothing in the library runs in a signal handler, and the markers are not
 * async-signal-safe contracts: they are ordinary functions whose only job is
 * to exist at a stable address.
 */
#ifndef SLURMSCOPE_INJECT_H
#define SLURMSCOPE_INJECT_H

#include <stdint.h>

#if defined(__cplusplus)
extern "C" {
#endif

#define SLURMSCOPE_INJECT_ABI_VERSION 1u

/* At most this many records per slurmscope_kernel_records call. */
#define SLURMSCOPE_RECORDS_MAX 64u

/* name_id 0 means "no name": graph launches, or a launch without a symbol. */
#define SLURMSCOPE_NAME_ID_NONE 0ull

/* gpu_instance_id when the device is not a MIG instance (or is unknown). */
#define SLURMSCOPE_GPU_INSTANCE_NONE 0xffffffffu

/* flags of slurmscope_kernel_launch */
#define SLURMSCOPE_LAUNCH_GRAPH       0x1u /* cudaGraphLaunch / cuGraphLaunch: name_id is 0,
                                              every kernel of the graph carries this
                                              correlation id in its record */
#define SLURMSCOPE_LAUNCH_COOPERATIVE 0x2u /* cooperative launch */
#define SLURMSCOPE_LAUNCH_DRIVER_API  0x4u /* a cu* driver entry point, not cuda* runtime */
#define SLURMSCOPE_LAUNCH_NESTED      0x8u /* issued while the same thread was already inside
                                              another launch API (e.g. runtime -> driver):
                                              same stack as the enclosing launch, which is
                                              always reported first; alias the ids */

/*
 * One completed kernel. Fixed layout, 56 bytes, 8-byte aligned:
 *
 *   offset size field
 *        0    8 correlation_id   CUPTI correlation id; equals the launch marker's
 *        8    8 start_ns         GPU start timestamp, ns (CUPTI clock)
 *       16    8 end_ns           GPU end timestamp, ns; start=end=0: not collected
 *       24    8 name_id          FNV-1a 64 of the kernel name (never 0 for a name)
 *       32    4 device_id        CUDA device ordinal as CUPTI reports it
 *       36    4 context_id
 *       40    4 stream_id
 *       44    4 gpu_instance_id  MIG GPU-instance id, SLURMSCOPE_GPU_INSTANCE_NONE if none
 *       48    4 sampled          1: this launch called slurmscope_kernel_launch
 *       52    4 _pad             zero
 */
struct slurmscope_kernel_record {
	uint64_t correlation_id;
	uint64_t start_ns;
	uint64_t end_ns;
	uint64_t name_id;
	uint32_t device_id;
	uint32_t context_id;
	uint32_t stream_id;
	uint32_t gpu_instance_id;
	uint32_t sampled;
	uint32_t _pad;
};

#if !defined(__cplusplus)
_Static_assert(sizeof(struct slurmscope_kernel_record) == 56, "record size is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_kernel_record, name_id) == 24, "name_id offset is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_kernel_record, device_id) == 32, "device_id offset is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_kernel_record, gpu_instance_id) == 44, "gpu_instance_id offset is ABI");
_Static_assert(__builtin_offsetof(struct slurmscope_kernel_record, sampled) == 48, "sampled offset is ABI");
#endif

/*
 * noinline + noipa keep every call a real call to this very symbol (no
 * inlining, no .constprop/.isra clones that a uprobe on the name would
 * miss); used keeps an unreferenced marker; default visibility exports it
 * from a library otherwise built with -fvisibility=hidden.
 */
#if defined(__has_attribute)
#if __has_attribute(noipa)
#define SLURMSCOPE_NOIPA __attribute__((noipa))
#endif
#endif
#ifndef SLURMSCOPE_NOIPA
#define SLURMSCOPE_NOIPA
#endif
/*
 * The probed first instruction of each marker is its frame setup (see
 * inject.c). Under -fcf-protection (the default of some distributions'
 * compilers) every function would start with `endbr64` instead, which the
 * kernel cannot emulate cheaply; nocf_check leaves it out of the markers.
 * In GCC it is part of the function type, hence here, on the declarations.
 * The markers are only called directly (through the PLT) and Linux does not
 * enforce indirect-branch tracking in user space.
 */
#if defined(__x86_64__) && defined(__CET__)
#if (__CET__ & 1)
#define SLURMSCOPE_NOCF __attribute__((nocf_check))
#endif
#endif
#ifndef SLURMSCOPE_NOCF
#define SLURMSCOPE_NOCF
#endif
#define SLURMSCOPE_MARKER \
	__attribute__((noinline, used, visibility("default"))) SLURMSCOPE_NOIPA SLURMSCOPE_NOCF

/* A new kernel name: name points to len bytes (no NUL needed), valid only
 * for the duration of the call. */
SLURMSCOPE_MARKER void slurmscope_kernel_name(uint64_t name_id, const char *name, uint32_t len);

/* A sampled launch, on the launching thread. device is the CUDA device
 * ordinal, or 0xffffffff when CUPTI could not tell. */
SLURMSCOPE_MARKER void slurmscope_kernel_launch(uint64_t correlation_id, uint64_t name_id,
                                                uint32_t device, uint32_t flags);

/* n (1..SLURMSCOPE_RECORDS_MAX) completed kernels; recs is valid only for
 * the duration of the call. */
SLURMSCOPE_MARKER void slurmscope_kernel_records(const struct slurmscope_kernel_record *recs,
                                                 uint32_t n);

/*
 * Tracing stepped aside (state SLURMSCOPE_TRACE_ASIDE) or started again
 * (SLURMSCOPE_TRACE_ON). CUPTI admits one subscriber per process; when
 * another client (torch.profiler, TensorFlow's profiler, ...) subscribes
 * while the library traces, the library hands its records over, gives CUPTI
 * up and lets the other client's cuptiSubscribe succeed; when that client
 * unsubscribes, the library subscribes again. Kernels run in between are
 * not in the records: GPU time totals of the process are low by them. Not
 * called at start-up, nor when CUPTI was already taken at start-up (then
 * nothing is traced at all).
 */
#define SLURMSCOPE_TRACE_ASIDE 0u
#define SLURMSCOPE_TRACE_ON    1u
/* reason of slurmscope_trace_state */
#define SLURMSCOPE_TRACE_REASON_CLIENT_SUBSCRIBED 1u /* ASIDE: another CUPTI subscriber took CUPTI */
#define SLURMSCOPE_TRACE_REASON_CLIENT_LEFT       2u /* ON: that subscriber released it */
#define SLURMSCOPE_TRACE_REASON_CLIENT_FAILED     3u /* ON: the other client's cuptiSubscribe failed,
                                                        so CUPTI was taken back at once */
#define SLURMSCOPE_TRACE_REASON_RESUME_FAILED     4u /* ASIDE (again): taking CUPTI back failed;
                                                        retried when a client unsubscribes */
SLURMSCOPE_MARKER void slurmscope_trace_state(uint32_t state, uint32_t reason);

#if defined(__cplusplus)
}
#endif
#endif /* SLURMSCOPE_INJECT_H */
