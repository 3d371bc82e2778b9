//go:build ignore

// The constraint above keeps the go tool, which runs this directory's tests,
// from taking this file for a cgo source.

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libslurmscope_inject.so: the CUDA injection library of slurmscope.
 *
 * The CUDA driver dlopens the file named by CUDA_INJECTION64_PATH during
 * cuInit and calls InitializeInjection once. From there the library
 *   - dlopens CUPTI (it links nothing from CUDA, so it loads anywhere),
 *   - subscribes to the callbacks of the kernel-launch APIs and, on API
 *     entry, calls slurmscope_kernel_launch on the launching thread for a
 *     rate-limited sample of launches (the agent's uprobe there takes the
 *     CPU stack, which is the expensive part),
 *   - enables concurrent-kernel activity records and hands every completed
 *     kernel to slurmscope_kernel_records in batches, so GPU time per kernel
 *     name stays exact however few launches were sampled.
 * The marker ABI is documented in slurmscope_inject.h.
 *
 * Ground rules, because this code runs inside someone else's training job:
 *   - it never fails the job: every problem (no CUPTI, another profiler,
 *     an unknown CUPTI version, a CUPTI error) logs one line prefixed
 *     "slurmscope-inject:" to stderr and the library steps aside, returning
 *     success from InitializeInjection; a CUPTI client that subscribes
 *     later (the user's own profiler) makes it step aside until that client
 *     unsubscribes, and a job with SLURMSCOPE_GPU_TRACE=off is left alone;
 *   - it takes no locks at all. Shared state is atomics and fixed-size
 *     tables, so no lock can be held across a CUPTI call or a marker, and a
 *     thread interrupted anywhere cannot block another;
 *   - nothing here runs in a signal handler and nothing is registered as one,
 *     so async-signal-safety is not required; the launch path is still kept
 *     malloc-free (it runs inside the application's CUDA call, possibly under
 *     the application's own locks), and only the CUPTI buffer thread
 *     allocates (buffers, one copy of each kernel name);
 *   - a low-priority housekeeping thread flushes CUPTI every
 *     SLURMSCOPE_INJECT_FLUSH_MS (default 1000 ms) so records reach the agent
 *     within about that period, and re-announces known kernel names so an
 *     agent that (re)started after a name's first announcement learns it;
 *   - at exit it flushes CUPTI (atexit + cuptiActivityFlushAll) so the last
 *     kernels are reported.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cupti_abi.h"
#include "slurmscope_inject.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- markers: the ABI the agent's uprobes attach to -------------------- */

/*
 * The empty asm with the arguments as inputs and a memory clobber is the
 * compiler barrier: the call cannot be dropped or folded, and the record
 * array is fully written before the call.
 *
 * The frame address as a further input makes the compiler set up a frame,
 * so each marker starts with `push %rbp; mov %rsp,%rbp` on x86-64 and
 * `stp x29, x30, [sp, #-16]!; mov x29, sp` on arm64 instead of a bare `ret`.
 * That first instruction is where the agent's uprobe sits: the kernel
 * emulates `push %rbp` but has to single-step a `ret` out of line (two
 * traps, measured 19.4 us against 5.5 us per probed call on a VM).
 * -fno-omit-frame-pointer alone does not do it: GCC and clang both still
 * compile an empty leaf function to `ret`. TestInjectMarkersStartWithFrameSetup
 * checks the instruction bytes of the built library.
 * (Under -fcf-protection, SLURMSCOPE_MARKER also keeps `endbr64` out of
 * the markers; see slurmscope_inject.h.)
 */
#define MARKER_BODY(...) \
	__asm__ __volatile__("" : : __VA_ARGS__, "r"(__builtin_frame_address(0)) : "memory")

SLURMSCOPE_MARKER void slurmscope_kernel_name(uint64_t name_id, const char *name,
                                                                      uint32_t len)
{
	MARKER_BODY("r"(name_id), "r"(name), "r"(len));
}

SLURMSCOPE_MARKER void slurmscope_kernel_launch(uint64_t correlation_id,
                                                                        uint64_t name_id, uint32_t device,
                                                                        uint32_t flags)
{
	MARKER_BODY("r"(correlation_id), "r"(name_id), "r"(device), "r"(flags));
}

SLURMSCOPE_MARKER void slurmscope_kernel_records(
	const struct slurmscope_kernel_record *recs, uint32_t n)
{
	MARKER_BODY("r"(recs), "r"(n));
}

SLURMSCOPE_MARKER void slurmscope_trace_state(uint32_t state, uint32_t reason)
{
	MARKER_BODY("r"(state), "r"(reason));
}

EXPORT __attribute__((used)) const uint32_t slurmscope_inject_abi_version =
	SLURMSCOPE_INJECT_ABI_VERSION;

/* ---- logging ----------------------------------------------------------- */

/* One write(2) per line so concurrent lines never interleave. */
static void ss_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void ss_log(const char *fmt, ...)
{
	char buf[512];
	int n = snprintf(buf, sizeof buf, "slurmscope-inject: ");
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	n += m;
	if (n > (int)sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
	(void)w;
}

/* Each condition is logged at most once per process. */
static atomic_int g_logged_dropped, g_logged_names_full, g_logged_flush;

/* ---- CUPTI entry points ------------------------------------------------ */

static struct {
	ss_fn_cuptiGetVersion GetVersion;
	ss_fn_cuptiGetResultString GetResultString;
	ss_fn_cuptiSubscribe Subscribe;
	ss_fn_cuptiUnsubscribe Unsubscribe;
	ss_fn_cuptiEnableCallback EnableCallback;
	ss_fn_cuptiActivityEnable ActivityEnable;
	ss_fn_cuptiActivityDisable ActivityDisable;
	ss_fn_cuptiActivityRegisterCallbacks ActivityRegisterCallbacks;
	ss_fn_cuptiActivityGetNextRecord ActivityGetNextRecord;
	ss_fn_cuptiActivityGetNumDroppedRecords ActivityGetNumDroppedRecords;
	ss_fn_cuptiActivityFlushAll ActivityFlushAll;
	ss_fn_cuptiActivityFlushPeriod ActivityFlushPeriod; /* optional (CUDA 11.x+) */
	ss_fn_cuptiGetDeviceId GetDeviceId;
} cupti;

static const char *result_string(ss_cupti_result r)
{
	const char *s = NULL;
	if (cupti.GetResultString == NULL || cupti.GetResultString(r, &s) != SS_CUPTI_SUCCESS || s == NULL)
		return "unknown CUPTI error";
	return s;
}

/* ---- state ------------------------------------------------------------- */

/* 1 while tracing: the only state the launch path reads. Set once
 * everything is enabled; cleared when the library steps aside. */
static atomic_int g_active;
/* Ours; touched only by whoever holds a transition (see g_state). */
static ss_cupti_subscriber_handle g_subscriber;
/* 1 once tracing started (at exit: totals are written even while aside). */
static atomic_int g_started;

static int g_trace_fd = -1;        /* SLURMSCOPE_INJECT_TRACE_FILE, tests only */
static uint32_t g_flush_ms;        /* SLURMSCOPE_INJECT_FLUSH_MS; 0: no housekeeping thread */
static const char *g_totals_path;  /* SLURMSCOPE_INJECT_TOTALS_FILE */

static atomic_ullong g_launch_markers, g_records, g_dropped;
static atomic_ullong g_stepped_aside, g_resumed;
static void *g_cupti_handle;
static int g_symbol_hooks;      /* libcupti's symbols pointed at our hooks (0-2) */
static atomic_uint g_got_hooks; /* other objects' GOT slots pointed at our hooks */

/* Per-thread nesting of launch APIs (a runtime launch may enter a driver
 * launch): the inner one reuses the outer sampling decision. A launch in
 * flight while tracing stepped aside never sees its exit callback, so the
 * depth is only trusted within one tracing epoch (bumped at each resume). */
static __thread int t_depth;
static __thread int t_outer_sampled;
static __thread unsigned t_epoch;
static atomic_uint g_epoch;

/* ---- launch sampling: a lock-free token bucket (GCRA) ------------------ */

/*
 * g_tat is the "theoretical arrival time": each admitted launch pushes it
 * one interval forward; a launch is admitted while tat - now stays within
 * the burst tolerance. One CAS per sampled launch, one clock read per launch.
 * Bound: over T seconds at most rate*T + burst + 1 launches are sampled.
 */
static uint64_t g_rate;          /* samples per second; 0 disables launch markers */
static uint64_t g_interval_ns;   /* 1e9 / rate */
static uint64_t g_burst_ns;      /* (burst - 1) * interval, burst = rate (one second) */
static atomic_ullong g_tat;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int take_sample_token(void)
{
	if (g_rate == 0)
		return 0;
	uint64_t now = mono_ns();
	unsigned long long tat = atomic_load_explicit(&g_tat, memory_order_relaxed);
	for (;;) {
		uint64_t base = tat > now ? tat : now;
		if (base - now > g_burst_ns)
			return 0;
		if (atomic_compare_exchange_weak_explicit(&g_tat, &tat, base + g_interval_ns,
		                                          memory_order_relaxed, memory_order_relaxed))
			return 1;
	}
}

/*
 * Correlation ids of sampled launches, direct-mapped. A record is flagged
 * sampled when its slot still holds its id. With more than SAMPLED_SLOTS
 * launches in flight a sampled record can read as unsampled (never the
 * reverse); the agent then just lacks a stack for it. Records are handed
 * over at least every flush period (1 s), so "in flight" is about one to
 * two periods of launches: 65536 slots (256 KiB) cover 32768 launches/s.
 */
#define SAMPLED_SLOTS 65536u
static atomic_uint g_sampled[SAMPLED_SLOTS];

/* ---- kernel names: ids, announcement, exact totals --------------------- */

static uint64_t fnv1a64(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ull;
	}
	return h == SLURMSCOPE_NAME_ID_NONE ? 1 : h; /* 0 is reserved for "no name" */
}

#define NAME_SLOTS 16384u /* power of two */
#define NAME_MAX_LEN (1u << 20)

struct name_entry {
	atomic_ullong id;         /* 0: free */
	_Atomic(char *) name;     /* copy for the totals file; set by the record path */
	atomic_int announced;     /* 0 no, 1 in progress, 2 done */
	atomic_ullong ns;         /* exact GPU time */
	atomic_ullong count;      /* completed kernels */
};
static struct name_entry g_names[NAME_SLOTS];
static atomic_ullong g_other_ns, g_other_count; /* when the table is full */

static struct name_entry *name_slot(uint64_t id)
{
	for (uint32_t i = 0; i < NAME_SLOTS; i++) {
		struct name_entry *e = &g_names[(id + i) & (NAME_SLOTS - 1)];
		unsigned long long cur = atomic_load_explicit(&e->id, memory_order_acquire);
		if (cur == id)
			return e;
		if (cur == 0) {
			if (atomic_compare_exchange_strong_explicit(&e->id, &cur, id, memory_order_acq_rel,
			                                            memory_order_acquire))
				return e;
			if (cur == id)
				return e;
		}
	}
	if (!atomic_exchange(&g_logged_names_full, 1))
		ss_log("more than %u distinct kernel names; further names are announced on every use "
		       "and totalled as (other)", NAME_SLOTS);
	return NULL;
}

static void trace_write(const char *buf, size_t n)
{
	if (g_trace_fd >= 0) {
		ssize_t w = write(g_trace_fd, buf, n);
		(void)w;
	}
}

/* The name marker plus its trace line. */
static void announce_raw(uint64_t id, const char *name, size_t len)
{
	slurmscope_kernel_name(id, name, (uint32_t)len);
	if (g_trace_fd >= 0) {
		char buf[512];
		int n = snprintf(buf, sizeof buf, "name id=%016llx len=%zu name=%.*s\n",
		                 (unsigned long long)id, len, (int)(len > 400 ? 400 : len), name);
		if (n > 0)
			trace_write(buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
	}
}

static void announce(struct name_entry *e, uint64_t id, const char *name, size_t len)
{
	/* Whoever moves 0 -> 1 announces. A thread that sees 1 (another thread
	 * is announcing right now) announces too rather than wait, so the name
	 * always precedes its first use on every thread; the agent dedupes. */
	if (e != NULL) {
		int st = atomic_load_explicit(&e->announced, memory_order_acquire);
		if (st == 2)
			return;
		if (st == 0) {
			int zero = 0;
			atomic_compare_exchange_strong(&e->announced, &zero, 1);
		}
	}
	announce_raw(id, name, len);
	if (e != NULL)
		atomic_store_explicit(&e->announced, 2, memory_order_release);
}

/* ---- launch callbacks -------------------------------------------------- */

/* Launch flags for the callback ids we enable; -1: not a launch API. */
static int launch_flags(ss_cupti_callback_domain domain, ss_cupti_callback_id cbid)
{
	if (domain == SS_CUPTI_CB_DOMAIN_RUNTIME_API) {
		switch (cbid) {
		case SS_CBID_RT_cudaLaunchKernel_v7000:
		case SS_CBID_RT_cudaLaunchKernel_ptsz_v7000:
		case SS_CBID_RT_cudaLaunchKernelExC_v11060:
		case SS_CBID_RT_cudaLaunchKernelExC_ptsz_v11060:
			return 0;
		case SS_CBID_RT_cudaLaunchCooperativeKernel_v9000:
		case SS_CBID_RT_cudaLaunchCooperativeKernel_ptsz_v9000:
			return SLURMSCOPE_LAUNCH_COOPERATIVE;
		case SS_CBID_RT_cudaGraphLaunch_v10000:
		case SS_CBID_RT_cudaGraphLaunch_ptsz_v10000:
			return SLURMSCOPE_LAUNCH_GRAPH;
		}
	} else if (domain == SS_CUPTI_CB_DOMAIN_DRIVER_API) {
		switch (cbid) {
		case SS_CBID_DRV_cuLaunchKernel:
		case SS_CBID_DRV_cuLaunchKernel_ptsz:
		case SS_CBID_DRV_cuLaunchKernelEx:
		case SS_CBID_DRV_cuLaunchKernelEx_ptsz:
			return SLURMSCOPE_LAUNCH_DRIVER_API;
		case SS_CBID_DRV_cuLaunchCooperativeKernel:
		case SS_CBID_DRV_cuLaunchCooperativeKernel_ptsz:
			return SLURMSCOPE_LAUNCH_DRIVER_API | SLURMSCOPE_LAUNCH_COOPERATIVE;
		case SS_CBID_DRV_cuGraphLaunch:
		case SS_CBID_DRV_cuGraphLaunch_ptsz:
			return SLURMSCOPE_LAUNCH_DRIVER_API | SLURMSCOPE_LAUNCH_GRAPH;
		}
	}
	return -1;
}

static const struct {
	ss_cupti_callback_domain domain;
	ss_cupti_callback_id cbid;
} k_launch_cbids[] = {
	{SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaLaunchKernel_v7000},
	{SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaLaunchKernel_ptsz_v7000},
	{SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaLaunchCooperativeKernel_v9000},
	{SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaLaunchCooperativeKernel_ptsz_v9000},
	{SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaLaunchKernelExC_v11060},
	{SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaLaunchKernelExC_ptsz_v11060},
	{SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaGraphLaunch_v10000},
	{SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaGraphLaunch_ptsz_v10000},
	{SS_CUPTI_CB_DOMAIN_DRIVER_API, SS_CBID_DRV_cuLaunchKernel},
	{SS_CUPTI_CB_DOMAIN_DRIVER_API, SS_CBID_DRV_cuLaunchKernel_ptsz},
	{SS_CUPTI_CB_DOMAIN_DRIVER_API, SS_CBID_DRV_cuLaunchCooperativeKernel},
	{SS_CUPTI_CB_DOMAIN_DRIVER_API, SS_CBID_DRV_cuLaunchCooperativeKernel_ptsz},
	{SS_CUPTI_CB_DOMAIN_DRIVER_API, SS_CBID_DRV_cuLaunchKernelEx},
	{SS_CUPTI_CB_DOMAIN_DRIVER_API, SS_CBID_DRV_cuLaunchKernelEx_ptsz},
	{SS_CUPTI_CB_DOMAIN_DRIVER_API, SS_CBID_DRV_cuGraphLaunch},
	{SS_CUPTI_CB_DOMAIN_DRIVER_API, SS_CBID_DRV_cuGraphLaunch_ptsz},
};

static void on_callback(void *userdata, ss_cupti_callback_domain domain, ss_cupti_callback_id cbid,
                        const void *cbdata)
{
	(void)userdata;
	if (!atomic_load_explicit(&g_active, memory_order_relaxed) || cbdata == NULL)
		return;
	int flags = launch_flags(domain, cbid);
	if (flags < 0)
		return;
	unsigned epoch = atomic_load_explicit(&g_epoch, memory_order_relaxed);
	if (t_epoch != epoch) {
		t_epoch = epoch;
		t_depth = 0;
	}
	const ss_cupti_callback_data *cd = cbdata;
	if (cd->callback_site != SS_CUPTI_API_ENTER) {
		if (t_depth > 0)
			t_depth--;
		return;
	}

	int nested = t_depth > 0;
	t_depth++;
	int sampled;
	if (nested) {
		sampled = t_outer_sampled;
		flags |= SLURMSCOPE_LAUNCH_NESTED;
	} else {
		sampled = take_sample_token();
		t_outer_sampled = sampled;
	}
	if (!sampled)
		return; /* the common case under load: one clock read, nothing else */

	uint32_t cid = cd->correlation_id;
	if (cid != 0)
		atomic_store_explicit(&g_sampled[cid & (SAMPLED_SLOTS - 1)], cid, memory_order_relaxed);

	uint64_t name_id = SLURMSCOPE_NAME_ID_NONE;
	if (!(flags & SLURMSCOPE_LAUNCH_GRAPH) && cd->symbol_name != NULL && cd->symbol_name[0] != '\0') {
		size_t len = strnlen(cd->symbol_name, NAME_MAX_LEN);
		name_id = fnv1a64(cd->symbol_name, len);
		announce(name_slot(name_id), name_id, cd->symbol_name, len);
	}
	uint32_t device = 0xffffffffu;
	if (cupti.GetDeviceId != NULL && cd->context != NULL &&
	    cupti.GetDeviceId(cd->context, &device) != SS_CUPTI_SUCCESS)
		device = 0xffffffffu;

	slurmscope_kernel_launch(cid, name_id, device, (uint32_t)flags);
	atomic_fetch_add_explicit(&g_launch_markers, 1, memory_order_relaxed);

	if (g_trace_fd >= 0) {
		char buf[160];
		int n = snprintf(buf, sizeof buf, "launch cid=%u name_id=%016llx device=%u flags=%d tid=%ld\n",
		                 cid, (unsigned long long)name_id, device, flags, (long)syscall(SYS_gettid));
		if (n > 0)
			trace_write(buf, (size_t)n);
	}
}

/* ---- activity buffers -------------------------------------------------- */

#define BUFFER_BYTES (1u << 20)

/*
 * Buffers we handed to CUPTI and not yet got back. Buffer callbacks are
 * process-wide: after a resume, CUPTI may complete a buffer that the other
 * client allocated (with its own allocator) in our callback. Such a buffer
 * is neither parsed nor freed (it is leaked: freeing it could corrupt the
 * other client's heap). Bound: OWN_SLOTS buffers of ours in flight; beyond
 * that CUPTI gets no buffer and drops records, which it counts.
 */
#define OWN_SLOTS 1024u
static _Atomic(uintptr_t) g_own[OWN_SLOTS];
static atomic_ullong g_foreign_buffers;
static atomic_int g_logged_foreign;

static int own_add(void *p)
{
	for (uint32_t i = 0; i < OWN_SLOTS; i++) {
		uintptr_t zero = 0;
		if (atomic_load_explicit(&g_own[i], memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_strong(&g_own[i], &zero, (uintptr_t)p))
			return 1;
	}
	return 0;
}

static int own_take(void *p)
{
	for (uint32_t i = 0; i < OWN_SLOTS; i++) {
		uintptr_t want = (uintptr_t)p;
		if (atomic_load_explicit(&g_own[i], memory_order_relaxed) == want &&
		    atomic_compare_exchange_strong(&g_own[i], &want, 0))
			return 1;
	}
	return 0;
}

static void on_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_num_records)
{
	/* CUPTI requires 8-byte alignment. On failure CUPTI drops records and
	 * counts them, which the completion path reports. */
	void *p = aligned_alloc(8, BUFFER_BYTES);
	if (p != NULL && !own_add(p)) {
		free(p);
		p = NULL;
	}
	*buffer = p;
	*size = p != NULL ? BUFFER_BYTES : 0;
	*max_num_records = 0; /* as many as fit */
}

/* A tiny per-call cache: CUPTI shares one name pointer among all records of
 * a kernel, so a buffer rarely hashes a name twice. */
#define NAME_CACHE 64u
struct name_cache {
	const char *ptr[NAME_CACHE];
	uint64_t id[NAME_CACHE];
	struct name_entry *e[NAME_CACHE];
};

static uint64_t record_name(struct name_cache *c, const char *name, struct name_entry **out)
{
	size_t h = ((uintptr_t)name >> 3) & (NAME_CACHE - 1);
	if (c->ptr[h] == name) {
		*out = c->e[h];
		return c->id[h];
	}
	size_t len = strnlen(name, NAME_MAX_LEN);
	uint64_t id = fnv1a64(name, len);
	struct name_entry *e = name_slot(id);
	if (e != NULL && atomic_load_explicit(&e->name, memory_order_acquire) == NULL) {
		char *copy = strndup(name, len);
		char *expected = NULL;
		if (copy != NULL && !atomic_compare_exchange_strong(&e->name, &expected, copy))
			free(copy);
	}
	announce(e, id, name, len);
	c->ptr[h] = name;
	c->id[h] = id;
	c->e[h] = e;
	*out = e;
	return id;
}

static void emit_records(const struct slurmscope_kernel_record *recs, uint32_t n)
{
	slurmscope_kernel_records(recs, n);
	atomic_fetch_add_explicit(&g_records, n, memory_order_relaxed);
	if (g_trace_fd < 0)
		return;
	char buf[8192];
	size_t used = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct slurmscope_kernel_record *r = &recs[i];
		int m = snprintf(buf + used, sizeof buf - used,
		                 "record cid=%llu name_id=%016llx start=%llu end=%llu device=%u context=%u "
		                 "stream=%u gi=%u sampled=%u\n",
		                 (unsigned long long)r->correlation_id, (unsigned long long)r->name_id,
		                 (unsigned long long)r->start_ns, (unsigned long long)r->end_ns, r->device_id,
		                 r->context_id, r->stream_id, r->gpu_instance_id, r->sampled);
		if (m < 0)
			break;
		if ((size_t)m >= sizeof buf - used) { /* flush and redo this line */
			trace_write(buf, used);
			used = 0;
			i--;
			continue;
		}
		used += (size_t)m;
	}
	trace_write(buf, used);
}

static void on_buffer_completed(ss_cu_context ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                size_t valid_size)
{
	(void)size;
	if (buffer == NULL)
		return;
	if (!own_take(buffer)) {
		atomic_fetch_add(&g_foreign_buffers, 1);
		if (!atomic_exchange(&g_logged_foreign, 1))
			ss_log("CUPTI completed an activity buffer that another CUPTI client allocated; "
			       "left alone (its records are not reported)");
		return;
	}
	struct slurmscope_kernel_record batch[SLURMSCOPE_RECORDS_MAX];
	uint32_t n = 0;
	struct name_cache cache;
	memset(&cache, 0, sizeof cache);

	ss_cupti_activity *rec = NULL;
	while (valid_size > 0 &&
	       cupti.ActivityGetNextRecord(buffer, valid_size, &rec) == SS_CUPTI_SUCCESS && rec != NULL) {
		/* We enable only kernel activity, but CUPTI may also deliver
		 * records enabled by nobody else in this process; the kind tells
		 * the layout, the version check at init told its field offsets. */
		if (rec->kind != SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
		    rec->kind != SS_CUPTI_ACTIVITY_KIND_KERNEL)
			continue;
		const ss_cupti_kernel9 *k = (const ss_cupti_kernel9 *)(const void *)rec;
		struct slurmscope_kernel_record *r = &batch[n];
		struct name_entry *e = NULL;
		uint64_t name_id = SLURMSCOPE_NAME_ID_NONE;
		if (k->name != NULL && k->name[0] != '\0')
			name_id = record_name(&cache, k->name, &e);

		uint64_t start = k->start, end = k->end;
		uint64_t dur = end > start ? end - start : 0;
		if (e != NULL) {
			atomic_fetch_add_explicit(&e->ns, dur, memory_order_relaxed);
			atomic_fetch_add_explicit(&e->count, 1, memory_order_relaxed);
		} else {
			atomic_fetch_add_explicit(&g_other_ns, dur, memory_order_relaxed);
			atomic_fetch_add_explicit(&g_other_count, 1, memory_order_relaxed);
		}

		uint32_t cid = k->correlation_id;
		r->correlation_id = cid;
		r->start_ns = start;
		r->end_ns = end;
		r->name_id = name_id;
		r->device_id = k->device_id;
		r->context_id = k->context_id;
		r->stream_id = k->stream_id;
		/* Kernel records do not carry the MIG instance; see README. */
		r->gpu_instance_id = SLURMSCOPE_GPU_INSTANCE_NONE;
		r->sampled = cid != 0 &&
		             atomic_load_explicit(&g_sampled[cid & (SAMPLED_SLOTS - 1)], memory_order_relaxed) == cid;
		r->_pad = 0;
		if (++n == SLURMSCOPE_RECORDS_MAX) {
			emit_records(batch, n);
			n = 0;
		}
	}
	if (n > 0)
		emit_records(batch, n);

	size_t dropped = 0;
	if (cupti.ActivityGetNumDroppedRecords != NULL &&
	    cupti.ActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == SS_CUPTI_SUCCESS && dropped > 0) {
		atomic_fetch_add(&g_dropped, dropped);
		if (!atomic_exchange(&g_logged_dropped, 1))
			ss_log("CUPTI dropped %zu kernel records (buffers exhausted); GPU time totals of this "
			       "process are low by those kernels", dropped);
	}
	free(buffer);
}

/* ---- housekeeping: periodic flush, name re-announcement ---------------- */

/*
 * One thread, started only when tracing is on and SLURMSCOPE_INJECT_FLUSH_MS
 * is not 0. Every period it
 *   1. calls cuptiActivityFlushAll(0): CUPTI hands over every buffer whose
 *      records are all complete, full or not, so a kernel reaches the agent
 *      within about one period instead of when its 1 MiB buffer fills (or
 *      at exit). cuptiActivityFlushPeriod, set as well where CUPTI has it,
 *      only makes CUPTI's own worker return *full* buffers on that period
 *      (NVIDIA's documentation), so it cannot replace this call;
 *   2. re-announces up to REANNOUNCE_PER_TICK known names (round robin over
 *      the name table), so an agent that started after a name's first
 *      announcement learns it.
 * The thread holds no lock of ours, ever; it runs at nice 19 (not
 * SCHED_IDLE: inside cuptiActivityFlushAll it may hold CUPTI's internal
 * locks, and a thread that a busy machine never schedules must not hold
 * those); all signals are blocked in it, so the application's handlers
 * never run there.
 *
 * Re-announcement bound: per period at most REANNOUNCE_PER_TICK name marker
 * calls (about 1.4 ms of probe time per second with the agent attached, at
 * 5.5 us per call; nothing without it) and one pass over the 16384-slot
 * table; every name that has completed a kernel is re-announced at least
 * once every ceil(names / 256) periods, i.e. every period for up to 256
 * names and within 64 periods for a full table. Names only ever seen at a
 * launch (never in a record) are not re-announced: the launch path keeps no
 * copy of the name.
 */
#define REANNOUNCE_PER_TICK 256u

static atomic_int g_hk_stop, g_hk_busy, g_hk_started;
static void hooks_rescan(void);
static int g_hk_wake_fd = -1;
static uint32_t g_reannounce_cursor; /* housekeeping thread only */
static atomic_ullong g_reannounced;

static void reannounce_names(void)
{
	uint32_t done = 0;
	for (uint32_t scanned = 0; scanned < NAME_SLOTS && done < REANNOUNCE_PER_TICK; scanned++) {
		struct name_entry *e = &g_names[g_reannounce_cursor];
		g_reannounce_cursor = (g_reannounce_cursor + 1) & (NAME_SLOTS - 1);
		unsigned long long id = atomic_load_explicit(&e->id, memory_order_acquire);
		char *name = atomic_load_explicit(&e->name, memory_order_acquire);
		/* Only names already announced once: the first announcement keeps
		 * its place before the name's first use. */
		if (id == 0 || name == NULL || atomic_load_explicit(&e->announced, memory_order_acquire) != 2)
			continue;
		announce_raw(id, name, strlen(name));
		done++;
	}
	atomic_fetch_add_explicit(&g_reannounced, done, memory_order_relaxed);
}

static void *housekeeping(void *arg)
{
	(void)arg;
	/* Per-thread nice on Linux; failure only means normal priority. */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19) != 0) {
		/* keep going */
	}
	for (;;) {
		struct pollfd p = {.fd = g_hk_wake_fd, .events = POLLIN};
		(void)poll(&p, 1, g_flush_ms > (uint32_t)INT32_MAX ? INT32_MAX : (int)g_flush_ms);
		/* busy before stop is read, stop before busy is read at exit
		 * (both seq_cst): exit either sees us busy and waits, or we see
		 * the stop and never call CUPTI again. */
		atomic_store(&g_hk_busy, 1);
		if (atomic_load(&g_hk_stop)) {
			atomic_store(&g_hk_busy, 0);
			return NULL;
		}
		/* seq_cst: a step-aside clears g_active and then waits while we
		 * are busy, so no flush of ours runs once CUPTI is handed over. */
		if (atomic_load(&g_active)) {
			ss_cupti_result r = cupti.ActivityFlushAll(0);
			if (r != SS_CUPTI_SUCCESS && !atomic_exchange(&g_logged_flush, 1))
				ss_log("periodic cuptiActivityFlushAll: %s; records may arrive late", result_string(r));
			reannounce_names();
		}
		hooks_rescan();
		atomic_store(&g_hk_busy, 0);
	}
}

static void start_housekeeping(void)
{
	if (g_flush_ms == 0)
		return;
	if (cupti.ActivityFlushPeriod != NULL) {
		ss_cupti_result r = cupti.ActivityFlushPeriod(g_flush_ms);
		if (r != SS_CUPTI_SUCCESS)
			ss_log("cuptiActivityFlushPeriod(%u): %s; flushing from our own thread only", g_flush_ms,
			       result_string(r));
	}
	g_hk_wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (g_hk_wake_fd < 0) {
		ss_log("eventfd: %s; no periodic flush (records arrive when buffers fill, and at exit)",
		       strerror(errno));
		return;
	}
	pthread_attr_t attr;
	pthread_t th;
	sigset_t all, old;
	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited by the new thread */
	int err = pthread_create(&th, &attr, housekeeping, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (err != 0) {
		ss_log("cannot start the flush thread: %s; records arrive when buffers fill, and at exit",
		       strerror(err));
		close(g_hk_wake_fd);
		g_hk_wake_fd = -1;
		return;
	}
	pthread_setname_np(th, "slurmscope-hk");
	atomic_store(&g_hk_started, 1);
}

/* At exit: no new housekeeping round, and wait (bounded) for one in
 * progress, so CUPTI is not flushed from two threads while it is being torn
 * down. The thread is detached and simply stays asleep afterwards. */
static void stop_housekeeping(void)
{
	if (!atomic_load(&g_hk_started))
		return;
	atomic_store(&g_hk_stop, 1);
	uint64_t one = 1;
	ssize_t w = write(g_hk_wake_fd, &one, sizeof one);
	(void)w;
	for (int i = 0; i < 2000 && atomic_load(&g_hk_busy); i++) {
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

/* ---- exit -------------------------------------------------------------- */

static void write_totals(void)
{
	if (g_totals_path == NULL)
		return;
	FILE *f = fopen(g_totals_path, "we");
	if (f == NULL) {
		ss_log("cannot write totals file %s: %s", g_totals_path, strerror(errno));
		return;
	}
	for (uint32_t i = 0; i < NAME_SLOTS; i++) {
		struct name_entry *e = &g_names[i];
		unsigned long long count = atomic_load(&e->count);
		char *name = atomic_load(&e->name);
		if (atomic_load(&e->id) == 0 || count == 0 || name == NULL)
			continue;
		fprintf(f, "kernel=%s ns=%llu launches=%llu\n", name, (unsigned long long)atomic_load(&e->ns),
		        count);
	}
	if (atomic_load(&g_other_count) > 0)
		fprintf(f, "kernel=(other) ns=%llu launches=%llu\n", (unsigned long long)atomic_load(&g_other_ns),
		        (unsigned long long)atomic_load(&g_other_count));
	fprintf(f, "# launch_markers=%llu records=%llu dropped=%llu reannounced=%llu stepped_aside=%llu "
	        "resumed=%llu foreign_buffers=%llu symbol_hooks=%d got_hooks=%u\n",
	        (unsigned long long)atomic_load(&g_launch_markers), (unsigned long long)atomic_load(&g_records),
	        (unsigned long long)atomic_load(&g_dropped), (unsigned long long)atomic_load(&g_reannounced),
	        (unsigned long long)atomic_load(&g_stepped_aside), (unsigned long long)atomic_load(&g_resumed),
	        (unsigned long long)atomic_load(&g_foreign_buffers), g_symbol_hooks, atomic_load(&g_got_hooks));
	fclose(f);
}

static void at_exit(void)
{
	if (!atomic_load(&g_started))
		return;
	stop_housekeeping();
	/* Forced flush: also hands over buffers that are not full, on this
	 * thread, so the last kernels reach the agent and the totals. Not while
	 * aside: CUPTI's buffers then belong to the other client. */
	if (atomic_load(&g_active)) {
		ss_cupti_result r = cupti.ActivityFlushAll(SS_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		if (r != SS_CUPTI_SUCCESS)
			ss_log("cuptiActivityFlushAll at exit: %s", result_string(r));
	}
	write_totals();
}

/* ---- initialisation ---------------------------------------------------- */

static void *load_symbol(void *h, const char *name, int required, int *missing)
{
	void *p = dlsym(h, name);
	if (p == NULL && required)
		*missing = 1;
	return p;
}

static int load_cupti(void)
{
	static const char *const defaults[] = {"libcupti.so", "libcupti.so.12", "libcupti.so.13"};
	const char *explicit_path = getenv("SLURMSCOPE_CUPTI_PATH");
	void *h = NULL;
	const char *err = NULL;
	/* An explicit path is the only one tried: falling back would hide a
	 * misconfiguration behind whatever CUPTI happens to be installed. */
	if (explicit_path != NULL && explicit_path[0] != '\0') {
		h = dlopen(explicit_path, RTLD_NOW | RTLD_LOCAL);
		if (h == NULL)
			err = dlerror();
	} else {
		for (size_t i = 0; h == NULL && i < sizeof defaults / sizeof defaults[0]; i++) {
			h = dlopen(defaults[i], RTLD_NOW | RTLD_LOCAL);
			if (h == NULL)
				err = dlerror();
		}
	}
	if (h == NULL) {
		ss_log("CUPTI not found (%s%s: %s); GPU kernels of this process are not traced",
		       explicit_path && explicit_path[0] ? "SLURMSCOPE_CUPTI_PATH=" : "tried libcupti.so, .so.12, .so.13",
		       explicit_path && explicit_path[0] ? explicit_path : "", err ? err : "?");
		return 0;
	}
	g_cupti_handle = h;
	int missing = 0;
	cupti.GetVersion = (ss_fn_cuptiGetVersion)load_symbol(h, "cuptiGetVersion", 1, &missing);
	cupti.GetResultString = (ss_fn_cuptiGetResultString)load_symbol(h, "cuptiGetResultString", 0, &missing);
	cupti.Subscribe = (ss_fn_cuptiSubscribe)load_symbol(h, "cuptiSubscribe", 1, &missing);
	cupti.Unsubscribe = (ss_fn_cuptiUnsubscribe)load_symbol(h, "cuptiUnsubscribe", 0, &missing);
	cupti.EnableCallback = (ss_fn_cuptiEnableCallback)load_symbol(h, "cuptiEnableCallback", 1, &missing);
	cupti.ActivityEnable = (ss_fn_cuptiActivityEnable)load_symbol(h, "cuptiActivityEnable", 1, &missing);
	cupti.ActivityDisable = (ss_fn_cuptiActivityDisable)load_symbol(h, "cuptiActivityDisable", 0, &missing);
	cupti.ActivityRegisterCallbacks = (ss_fn_cuptiActivityRegisterCallbacks)load_symbol(
		h, "cuptiActivityRegisterCallbacks", 1, &missing);
	cupti.ActivityGetNextRecord =
		(ss_fn_cuptiActivityGetNextRecord)load_symbol(h, "cuptiActivityGetNextRecord", 1, &missing);
	cupti.ActivityGetNumDroppedRecords = (ss_fn_cuptiActivityGetNumDroppedRecords)load_symbol(
		h, "cuptiActivityGetNumDroppedRecords", 0, &missing);
	cupti.ActivityFlushAll = (ss_fn_cuptiActivityFlushAll)load_symbol(h, "cuptiActivityFlushAll", 1, &missing);
	cupti.ActivityFlushPeriod =
		(ss_fn_cuptiActivityFlushPeriod)load_symbol(h, "cuptiActivityFlushPeriod", 0, &missing);
	cupti.GetDeviceId = (ss_fn_cuptiGetDeviceId)load_symbol(h, "cuptiGetDeviceId", 0, &missing);
	if (missing) {
		ss_log("the CUPTI library found lacks required entry points; GPU kernels of this process are not traced");
		return 0;
	}
	return 1;
}

static void config_from_env(void)
{
	g_rate = 1000;
	const char *s = getenv("SLURMSCOPE_LAUNCH_SAMPLES_PER_SEC");
	if (s != NULL && s[0] != '\0') {
		char *end = NULL;
		errno = 0;
		unsigned long long v = strtoull(s, &end, 10);
		if (errno != 0 || end == s || *end != '\0')
			ss_log("SLURMSCOPE_LAUNCH_SAMPLES_PER_SEC=%s is not a number; using %llu", s,
			       (unsigned long long)g_rate);
		else
			g_rate = v > 1000000000ull ? 1000000000ull : v;
	}
	if (g_rate > 0) {
		g_interval_ns = 1000000000ull / g_rate;
		g_burst_ns = (g_rate - 1) * g_interval_ns;
	}
	g_flush_ms = 1000;
	s = getenv("SLURMSCOPE_INJECT_FLUSH_MS");
	if (s != NULL && s[0] != '\0') {
		char *end = NULL;
		errno = 0;
		unsigned long long v = strtoull(s, &end, 10);
		if (errno != 0 || end == s || *end != '\0')
			ss_log("SLURMSCOPE_INJECT_FLUSH_MS=%s is not a number; using %u", s, g_flush_ms);
		else
			g_flush_ms = v > 3600000ull ? 3600000u : (uint32_t)v;
	}
	g_totals_path = getenv("SLURMSCOPE_INJECT_TOTALS_FILE");
	if (g_totals_path != NULL && g_totals_path[0] == '\0')
		g_totals_path = NULL;
	const char *trace = getenv("SLURMSCOPE_INJECT_TRACE_FILE");
	if (trace != NULL && trace[0] != '\0') {
		g_trace_fd = open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (g_trace_fd < 0)
			ss_log("cannot open trace file %s: %s", trace, strerror(errno));
	}
}

/* ---- starting tracing -------------------------------------------------- */

/* Undo a partial start. CUPTI is called with nothing of ours locked. */
static void undo_start(int activity_enabled)
{
	atomic_store(&g_active, 0);
	if (activity_enabled && cupti.ActivityDisable != NULL)
		cupti.ActivityDisable(SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (g_subscriber != NULL && cupti.Unsubscribe != NULL)
		cupti.Unsubscribe(g_subscriber);
	g_subscriber = NULL;
}

/*
 * Subscribe, enable the launch callbacks, register our buffers, enable
 * kernel activity. Subscribe first: activity callbacks are process-wide,
 * and registering ours while another client owns CUPTI would steal its
 * buffers. On failure, undo, describe the failed call in err and return its
 * result; *at_subscribe says whether it was cuptiSubscribe. Used at start
 * and to resume.
 */
static ss_cupti_result start_tracing(char *err, size_t errlen, int *at_subscribe)
{
	*at_subscribe = 0;
	ss_cupti_result r = cupti.Subscribe(&g_subscriber, on_callback, NULL);
	if (r != SS_CUPTI_SUCCESS) {
		g_subscriber = NULL;
		*at_subscribe = 1;
		snprintf(err, errlen, "cuptiSubscribe: %s", result_string(r));
		return r;
	}
	for (size_t i = 0; i < sizeof k_launch_cbids / sizeof k_launch_cbids[0]; i++) {
		r = cupti.EnableCallback(1, g_subscriber, k_launch_cbids[i].domain, k_launch_cbids[i].cbid);
		if (r != SS_CUPTI_SUCCESS) {
			snprintf(err, errlen, "cuptiEnableCallback(%d, %u): %s", (int)k_launch_cbids[i].domain,
			         k_launch_cbids[i].cbid, result_string(r));
			undo_start(0);
			return r;
		}
	}
	r = cupti.ActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed);
	if (r != SS_CUPTI_SUCCESS) {
		snprintf(err, errlen, "cuptiActivityRegisterCallbacks: %s", result_string(r));
		undo_start(0);
		return r;
	}
	r = cupti.ActivityEnable(SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (r != SS_CUPTI_SUCCESS) {
		snprintf(err, errlen, "cuptiActivityEnable(CONCURRENT_KERNEL): %s", result_string(r));
		undo_start(0);
		return r;
	}
	return SS_CUPTI_SUCCESS;
}

/* ---- stepping aside for another CUPTI client, and coming back ---------- */

/*
 * CUPTI admits one subscriber per process. When another client (Kineto,
 * i.e. torch.profiler; TensorFlow's profiler) calls cuptiSubscribe while we
 * trace, our hook (see the next section for how its calls reach us) hands
 * our records to the agent, gives CUPTI up and lets that call succeed; when
 * the client unsubscribes, the hook takes CUPTI back. A cluster-wide
 * profiler must never break the user's own profiling.
 *
 * g_state serialises transitions without a lock: a thread moves TRACING ->
 * LEAVING or ASIDE -> RESUMING by CAS and alone makes that transition's
 * CUPTI calls. A thread that loses the CAS passes its own call straight to
 * CUPTI, which answers as it would have without us (of two clients racing
 * to subscribe, one gets MULTIPLE_SUBSCRIBERS either way).
 *
 * A launch on another thread racing the step-aside either sees g_active
 * set and calls its launch marker before the state marker, or sees it
 * clear and calls nothing; it never uses our subscriber handle, which only
 * the transition's thread touches.
 */
enum { ST_OFF, ST_TRACING, ST_LEAVING, ST_ASIDE, ST_RESUMING };
static atomic_int g_state;
/* The handle the other client got; NULL: not known, so any successful
 * unsubscribe while aside means CUPTI may be free. */
static _Atomic(ss_cupti_subscriber_handle) g_client_sub;
/* A successful unsubscribe seen while LEAVING (the client left before the
 * step-aside finished recording its handle). */
static atomic_int g_client_left;
static atomic_int g_logged_aside, g_logged_resume, g_logged_resume_failed, g_logged_leave_failed;

static void trace_state(uint32_t state, uint32_t reason)
{
	slurmscope_trace_state(state, reason);
	if (g_trace_fd >= 0) {
		char buf[64];
		int n = snprintf(buf, sizeof buf, "state state=%u reason=%u\n", state, reason);
		if (n > 0)
			trace_write(buf, (size_t)n);
	}
}

/* Wait (at most 2 s) for a housekeeping round that may have read g_active
 * before it was cleared, so none of its flushes follows ours. */
static void wait_housekeeping_round(void)
{
	if (!atomic_load(&g_hk_started))
		return;
	for (int i = 0; i < 2000 && atomic_load(&g_hk_busy); i++) {
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

/* TRACING -> aside, on the thread that won the CAS. Returns 0 (still
 * tracing) if CUPTI would not let us go. */
static int leave_for_client(void)
{
	atomic_store(&g_client_left, 0);
	atomic_store(&g_active, 0); /* no launch marker from here on */
	wait_housekeeping_round();
	/* Disable before the forced flush: a kernel recorded after the flush
	 * would sit in a buffer of ours that CUPTI completes in the other
	 * client's callbacks once it registers them. */
	cupti.ActivityDisable(SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	ss_cupti_result r = cupti.ActivityFlushAll(SS_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	if (r != SS_CUPTI_SUCCESS && !atomic_exchange(&g_logged_flush, 1))
		ss_log("cuptiActivityFlushAll before stepping aside: %s; the last kernels may be missing",
		       result_string(r));
	r = cupti.Unsubscribe(g_subscriber);
	if (r != SS_CUPTI_SUCCESS) {
		/* Still subscribed: carry on; the other client's cuptiSubscribe
		 * fails as it would have without our hook. */
		cupti.ActivityEnable(SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
		atomic_store(&g_active, 1);
		if (!atomic_exchange(&g_logged_leave_failed, 1))
			ss_log("another CUPTI client subscribed, but cuptiUnsubscribe failed (%s); tracing goes on "
			       "and that client finds CUPTI taken", result_string(r));
		return 0;
	}
	g_subscriber = NULL;
	atomic_fetch_add(&g_stepped_aside, 1);
	trace_state(SLURMSCOPE_TRACE_ASIDE, SLURMSCOPE_TRACE_REASON_CLIENT_SUBSCRIBED);
	if (!atomic_exchange(&g_logged_aside, 1))
		ss_log("another CUPTI client (a profiler such as torch.profiler) subscribed; GPU kernel tracing "
		       "stepped aside for it until it unsubscribes");
	return 1;
}

/* ASIDE -> TRACING, if CUPTI can be had again. */
static void try_resume(uint32_t reason)
{
	int expect = ST_ASIDE;
	if (!atomic_compare_exchange_strong(&g_state, &expect, ST_RESUMING))
		return;
	char err[256];
	int at_subscribe;
	ss_cupti_result r = start_tracing(err, sizeof err, &at_subscribe);
	atomic_store(&g_client_sub, NULL); /* whoever holds CUPTI now, it is not known */
	if (r != SS_CUPTI_SUCCESS) {
		atomic_store(&g_state, ST_ASIDE);
		trace_state(SLURMSCOPE_TRACE_ASIDE, SLURMSCOPE_TRACE_REASON_RESUME_FAILED);
		if (!atomic_exchange(&g_logged_resume_failed, 1))
			ss_log("could not take CUPTI back after the other client (%s); GPU kernels stay untraced "
			       "until a CUPTI client unsubscribes again", err);
		return;
	}
	/* The other client may have set its own period. */
	if (cupti.ActivityFlushPeriod != NULL && g_flush_ms != 0)
		cupti.ActivityFlushPeriod(g_flush_ms);
	atomic_fetch_add(&g_epoch, 1);
	atomic_fetch_add(&g_resumed, 1);
	trace_state(SLURMSCOPE_TRACE_ON, reason); /* before any launch marker of this epoch */
	atomic_store(&g_active, 1);
	atomic_store(&g_state, ST_TRACING);
	if (!atomic_exchange(&g_logged_resume, 1))
		ss_log("the other CUPTI client %s; GPU kernel tracing resumed",
		       reason == SLURMSCOPE_TRACE_REASON_CLIENT_FAILED ? "failed to subscribe" : "unsubscribed");
}

/* What the other client's cuptiSubscribe calls. */
static ss_cupti_result hook_subscribe(ss_cupti_subscriber_handle *sub, ss_cupti_callback_func cb, void *ud)
{
	int expect = ST_TRACING;
	int mine = atomic_compare_exchange_strong(&g_state, &expect, ST_LEAVING);
	if (mine && !leave_for_client()) {
		atomic_store(&g_state, ST_TRACING);
		mine = 0;
	}
	ss_cupti_result r = cupti.Subscribe(sub, cb, ud);
	if (mine) {
		atomic_store(&g_client_sub, r == SS_CUPTI_SUCCESS && sub != NULL ? *sub : NULL);
		atomic_store(&g_state, ST_ASIDE);
		if (r != SS_CUPTI_SUCCESS)
			try_resume(SLURMSCOPE_TRACE_REASON_CLIENT_FAILED);
		else if (atomic_exchange(&g_client_left, 0))
			try_resume(SLURMSCOPE_TRACE_REASON_CLIENT_LEFT);
	}
	return r;
}

/* What the other client's cuptiUnsubscribe calls. */
static ss_cupti_result hook_unsubscribe(ss_cupti_subscriber_handle h)
{
	ss_cupti_result r = cupti.Unsubscribe(h);
	if (r != SS_CUPTI_SUCCESS)
		return r;
	int st = atomic_load(&g_state);
	if (st == ST_LEAVING) {
		atomic_store(&g_client_left, 1);
	} else if (st == ST_ASIDE) {
		ss_cupti_subscriber_handle c = atomic_load(&g_client_sub);
		if (c == NULL || c == h)
			try_resume(SLURMSCOPE_TRACE_REASON_CLIENT_LEFT);
	}
	return r;
}

/* ---- routing the other client's calls to the hooks --------------------- */

/*
 * CUDA loads this library RTLD_LOCAL, so it cannot interpose cuptiSubscribe
 * by symbol: the other client binds to libcupti's own (libtorch through
 * DT_NEEDED, TensorFlow through dlsym). Two patches redirect it:
 *   1. in every object already loaded, except ours and libcupti, the GOT
 *      slots (JUMP_SLOT, GLOB_DAT relocations) importing cuptiSubscribe and
 *      cuptiUnsubscribe; at start, and on each housekeeping tick for objects
 *      loaded since (glibc's dlpi_adds changed);
 *   2. the values of those two symbols in libcupti's dynamic symbol table,
 *      so every later binding (a library dlopened later, a lazy PLT slot,
 *      dlsym) resolves to the hooks before its first call.
 * Patch 2 rather than wrapping dlopen to rescan after each load: a wrapper
 * changes the caller glibc's dlopen sees, whose DT_RUNPATH and namespace
 * decide what a bare name loads, so the job's own dlopen calls could fail.
 * A word is written only where /proc/self/maps says the page is readable
 * and not executable (made writable for the store if read-only, as a
 * full-RELRO GOT or .dynsym is, then restored). Every table read is checked
 * to lie inside the object's PT_LOAD segments; an object without dynamic
 * section or tables (the vDSO, a static executable) is skipped.
 * Bounds: each object is scanned once (remembered by base and name, 4096
 * objects), at most 1<<24 relocations per table, at most 256 slots patched.
 */
#if (defined(__x86_64__) || defined(__aarch64__)) && defined(__GLIBC__)
#define SS_HOOKS 1
#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <sys/mman.h>
#if defined(__x86_64__)
#define SS_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define SS_R_GLOB_DAT R_X86_64_GLOB_DAT
#else
#define SS_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define SS_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

#define SEEN_MAX 4096u
#define RELOCS_MAX (1u << 24)
#define PATCHED_MAX 256u

static const char *const k_hooked[2] = {"cuptiSubscribe", "cuptiUnsubscribe"};
static uintptr_t g_real[2], g_hook[2];
static atomic_int g_hooks_on;
static struct { uintptr_t base; uint64_t name; } g_seen[SEEN_MAX]; /* scanner only */
static uint32_t g_nseen;
static unsigned long long g_last_adds;
static atomic_int g_logged_patch, g_logged_seen;

struct obj {
	uintptr_t base;
	const ElfW(Phdr) *ph;
	size_t phnum;
	const char *name;
};

/* [p, p+n) lies inside one PT_LOAD segment of o. */
static int obj_has(const struct obj *o, uintptr_t p, size_t n)
{
	for (size_t i = 0; i < o->phnum; i++) {
		const ElfW(Phdr) *ph = &o->ph[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t lo = o->base + ph->p_vaddr, hi = lo + ph->p_memsz;
		if (hi >= lo && p >= lo && p <= hi && n <= hi - p)
			return 1;
	}
	return 0;
}

/* A d_ptr of the dynamic section: glibc relocates them in place, musl and
 * the vDSO do not, so take whichever reading lands inside the object. */
static uintptr_t dyn_addr(const struct obj *o, uintptr_t v, size_t n)
{
	if (v != 0 && obj_has(o, v, n))
		return v;
	if (v <= UINTPTR_MAX - o->base && obj_has(o, o->base + v, n))
		return o->base + v;
	return 0;
}

/* Protection of the page holding addr, from /proc/self/maps; -1: unknown. */
static int page_prot(uintptr_t addr)
{
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char buf[4096];
	size_t len = 0;
	int prot = -1;
	while (prot < 0) {
		ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		buf[len] = '\0';
		char *line = buf, *nl;
		while (prot < 0 && (nl = strchr(line, '\n')) != NULL) {
			*nl = '\0';
			char *end;
			unsigned long long lo = strtoull(line, &end, 16);
			if (*end == '-') {
				unsigned long long hi = strtoull(end + 1, &end, 16);
				if (*end == ' ' && addr >= lo && addr < hi && strlen(end + 1) >= 3)
					prot = (end[1] == 'r' ? PROT_READ : 0) | (end[2] == 'w' ? PROT_WRITE : 0) |
					       (end[3] == 'x' ? PROT_EXEC : 0);
			}
			line = nl + 1;
		}
		len = (size_t)(buf + len - line);
		memmove(buf, line, len);
		if (len >= sizeof buf - 1)
			len = 0; /* a line longer than the buffer (a long path): not ours */
	}
	close(fd);
	return prot;
}

/* Store one aligned word, making a read-only, non-executable page writable
 * for the store. */
static int write_word(uintptr_t addr, uintptr_t val)
{
	int prot = page_prot(addr);
	if (prot < 0 || !(prot & PROT_READ))
		return 0;
	if (prot & PROT_WRITE) {
		__atomic_store_n((uintptr_t *)addr, val, __ATOMIC_SEQ_CST);
		return 1;
	}
	if (prot & PROT_EXEC)
		return 0; /* never a writable code page */
	long pg = sysconf(_SC_PAGESIZE);
	if (pg <= 0)
		return 0;
	void *page = (void *)(addr & ~((uintptr_t)pg - 1));
	if (mprotect(page, (size_t)pg, prot | PROT_WRITE) != 0)
		return 0;
	__atomic_store_n((uintptr_t *)addr, val, __ATOMIC_SEQ_CST);
	(void)mprotect(page, (size_t)pg, prot);
	return 1;
}

static void patch_slot(const struct obj *o, uintptr_t slot, int which)
{
	uintptr_t cur = __atomic_load_n((uintptr_t *)slot, __ATOMIC_ACQUIRE);
	if (cur == g_hook[which])
		return;
	/* Bound to the CUPTI we use, or not bound yet (lazy binding: the slot
	 * points back into the object's own PLT). Anything else, another CUPTI
	 * copy or another tool's hook, is left alone. */
	if (cur != g_real[which] && !obj_has(o, cur, 1))
		return;
	if (atomic_load(&g_got_hooks) >= PATCHED_MAX)
		return;
	if (write_word(slot, g_hook[which]))
		atomic_fetch_add(&g_got_hooks, 1);
	else if (!atomic_exchange(&g_logged_patch, 1))
		ss_log("cannot redirect %s in %s; a profiler there finds CUPTI taken while tracing is on",
		       k_hooked[which], o->name[0] ? o->name : "the executable");
}

static void scan_relocs(const struct obj *o, uintptr_t rela, size_t bytes, uintptr_t symtab, uintptr_t strtab,
                        size_t strsz)
{
	size_t n = bytes / sizeof(ElfW(Rela));
	if (n > RELOCS_MAX)
		n = RELOCS_MAX;
	const ElfW(Rela) *r = (const ElfW(Rela) *)rela;
	for (size_t i = 0; i < n; i++) {
		unsigned long type = ELF64_R_TYPE(r[i].r_info);
		if (type != SS_R_JUMP_SLOT && type != SS_R_GLOB_DAT)
			continue;
		uintptr_t si = ELF64_R_SYM(r[i].r_info);
		uintptr_t sp = symtab + si * sizeof(ElfW(Sym));
		if (si == 0 || !obj_has(o, sp, sizeof(ElfW(Sym))))
			continue;
		const ElfW(Sym) *sym = (const ElfW(Sym) *)sp;
		if (sym->st_shndx != SHN_UNDEF || sym->st_name >= strsz)
			continue;
		const char *name = (const char *)strtab + sym->st_name;
		size_t room = strsz - sym->st_name;
		for (int k = 0; k < 2; k++) {
			size_t l = strlen(k_hooked[k]);
			if (room <= l || memcmp(name, k_hooked[k], l + 1) != 0)
				continue;
			uintptr_t slot = o->base + r[i].r_offset;
			if (slot % sizeof(uintptr_t) == 0 && obj_has(o, slot, sizeof(uintptr_t)))
				patch_slot(o, slot, k);
		}
	}
}

static void scan_object(const struct obj *o)
{
	const ElfW(Phdr) *dph = NULL;
	for (size_t i = 0; i < o->phnum; i++)
		if (o->ph[i].p_type == PT_DYNAMIC)
			dph = &o->ph[i];
	if (dph == NULL)
		return;
	size_t ndyn = dph->p_memsz / sizeof(ElfW(Dyn));
	uintptr_t dyn = o->base + dph->p_vaddr;
	if (ndyn == 0 || !obj_has(o, dyn, ndyn * sizeof(ElfW(Dyn))))
		return;
	uintptr_t symtab = 0, strtab = 0, jmprel = 0, rela = 0;
	size_t strsz = 0, pltrelsz = 0, relasz = 0, syment = sizeof(ElfW(Sym)), relaent = sizeof(ElfW(Rela));
	long pltrel = 0;
	for (size_t i = 0; i < ndyn; i++) {
		const ElfW(Dyn) *d = (const ElfW(Dyn) *)dyn + i;
		if (d->d_tag == DT_NULL)
			break;
		switch (d->d_tag) {
		case DT_SYMTAB: symtab = d->d_un.d_ptr; break;
		case DT_STRTAB: strtab = d->d_un.d_ptr; break;
		case DT_STRSZ: strsz = d->d_un.d_val; break;
		case DT_SYMENT: syment = d->d_un.d_val; break;
		case DT_JMPREL: jmprel = d->d_un.d_ptr; break;
		case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
		case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
		case DT_RELA: rela = d->d_un.d_ptr; break;
		case DT_RELASZ: relasz = d->d_un.d_val; break;
		case DT_RELAENT: relaent = d->d_un.d_val; break;
		}
	}
	if (syment != sizeof(ElfW(Sym)) || relaent != sizeof(ElfW(Rela)) || strsz == 0)
		return;
	strtab = dyn_addr(o, strtab, strsz);
	symtab = dyn_addr(o, symtab, sizeof(ElfW(Sym)));
	if (strtab == 0 || symtab == 0)
		return;
	if (pltrel == DT_RELA && pltrelsz > 0 && (jmprel = dyn_addr(o, jmprel, pltrelsz)) != 0)
		scan_relocs(o, jmprel, pltrelsz, symtab, strtab, strsz);
	if (relasz > 0 && (rela = dyn_addr(o, rela, relasz)) != 0)
		scan_relocs(o, rela, relasz, symtab, strtab, strsz);
}

struct scan { int count_only; unsigned long long adds; };

static int scan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct scan *sc = arg;
	if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
		sc->adds = info->dlpi_adds;
	if (sc->count_only)
		return 1;
	if (info->dlpi_phdr == NULL || info->dlpi_phnum == 0)
		return 0;
	struct obj o = {info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum, info->dlpi_name ? info->dlpi_name : ""};
	/* Not ours (nothing to redirect), not libcupti's own calls. */
	if (obj_has(&o, (uintptr_t)&g_state, 1) || obj_has(&o, g_real[0], 1))
		return 0;
	uint64_t name = fnv1a64(o.name, strlen(o.name));
	for (uint32_t i = 0; i < g_nseen; i++)
		if (g_seen[i].base == o.base && g_seen[i].name == name)
			return 0;
	if (g_nseen < SEEN_MAX) {
		g_seen[g_nseen].base = o.base;
		g_seen[g_nseen].name = name;
		g_nseen++;
	} else if (!atomic_exchange(&g_logged_seen, 1)) {
		ss_log("more than %u shared objects; objects loaded from now on are rescanned on each load", SEEN_MAX);
	}
	scan_object(&o);
	return 0;
}

/* Scanner: InitializeInjection, then only the housekeeping thread. */
static void scan_objects(void)
{
	struct scan sc = {0, 0};
	dl_iterate_phdr(scan_cb, &sc);
	g_last_adds = sc.adds;
}

static void hooks_rescan(void)
{
	if (!atomic_load_explicit(&g_hooks_on, memory_order_relaxed))
		return;
	struct scan sc = {1, 0};
	dl_iterate_phdr(scan_cb, &sc);
	if (sc.adds != g_last_adds)
		scan_objects();
}

/* Point libcupti's own symbol at our hook; checked with a fresh dlsym. */
static int patch_cupti_symbol(int which)
{
	Dl_info info;
	ElfW(Sym) *sym = NULL;
	struct link_map *lm = NULL;
	void *real = (void *)g_real[which];
	if (dladdr1(real, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || sym == NULL || info.dli_sname == NULL ||
	    strcmp(info.dli_sname, k_hooked[which]) != 0 || info.dli_saddr != real)
		return 0;
	if (dladdr1(real, &info, (void **)&lm, RTLD_DL_LINKMAP) == 0 || lm == NULL)
		return 0;
	uintptr_t old = sym->st_value;
	/* glibc binds to l_addr + st_value; unsigned wrap-around is intended. */
	if (!write_word((uintptr_t)&sym->st_value, g_hook[which] - (uintptr_t)lm->l_addr))
		return 0;
	dlerror();
	if (dlsym(g_cupti_handle, k_hooked[which]) != (void *)g_hook[which]) {
		write_word((uintptr_t)&sym->st_value, old);
		return 0;
	}
	return 1;
}

static void hooks_install(void)
{
	if (cupti.Unsubscribe == NULL || cupti.ActivityDisable == NULL)
		return; /* could not step aside: the other client finds CUPTI taken, as before */
	g_real[0] = (uintptr_t)cupti.Subscribe;
	g_real[1] = (uintptr_t)cupti.Unsubscribe;
	g_hook[0] = (uintptr_t)hook_subscribe;
	g_hook[1] = (uintptr_t)hook_unsubscribe;
	/* Never unloaded while other objects' slots point here. */
	Dl_info self;
	if (dladdr((void *)&g_state, &self) == 0 || self.dli_fname == NULL ||
	    dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) == NULL)
		return;
	g_symbol_hooks = patch_cupti_symbol(0) + patch_cupti_symbol(1);
	atomic_store(&g_hooks_on, 1);
	scan_objects();
}
#else
static void hooks_install(void) {}
static void hooks_rescan(void) {}
#endif

/* ---- initialisation ---------------------------------------------------- */

/* SLURMSCOPE_GPU_TRACE=off: the job opted out (the TaskProlog then does not
 * even set CUDA_INJECTION64_PATH; this is the backstop). */
static int opted_out(void)
{
	const char *s = getenv("SLURMSCOPE_GPU_TRACE");
	return s != NULL && strcasecmp(s, "off") == 0;
}

/* Called by the CUDA driver (or the stand-in runtime) once, from cuInit.
 * Returns 1, which the driver takes as success, whatever happened: the job
 * must run whether or not it can be traced. */
EXPORT int InitializeInjection(void)
{
	static atomic_int once;
	if (atomic_exchange(&once, 1))
		return 1;

	if (opted_out()) {
		ss_log("SLURMSCOPE_GPU_TRACE=off: GPU kernels of this process are not traced");
		return 1;
	}
	config_from_env();
	if (!load_cupti())
		return 1;

	uint32_t version = 0;
	ss_cupti_result r = cupti.GetVersion(&version);
	if (r != SS_CUPTI_SUCCESS) {
		ss_log("cuptiGetVersion: %s; GPU kernels of this process are not traced", result_string(r));
		return 1;
	}
	const char *allow = getenv("SLURMSCOPE_CUPTI_ALLOW_UNKNOWN_VERSION");
	if (!ss_cupti_version_supported(version)) {
		if (allow == NULL || strcmp(allow, "1") != 0) {
			ss_log("CUPTI API version %u: kernel record layout not known to this library "
			       "(supported: %u-%u, %u-%u); GPU kernels of this process are not traced",
			       version, SS_CUPTI_VERSION_MIN_12, SS_CUPTI_VERSION_MAX_12, SS_CUPTI_VERSION_MIN_13,
			       SS_CUPTI_VERSION_MAX_13);
			return 1;
		}
		ss_log("CUPTI API version %u not verified; tracing anyway (SLURMSCOPE_CUPTI_ALLOW_UNKNOWN_VERSION=1)",
		       version);
	}

	char err[256];
	int at_subscribe;
	r = start_tracing(err, sizeof err, &at_subscribe);
	if (r == SS_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && at_subscribe) {
		ss_log("another CUPTI client (a profiler) is already subscribed; GPU kernels of this process "
		       "are not traced");
		return 1;
	}
	if (r != SS_CUPTI_SUCCESS) {
		ss_log("%s; GPU kernels of this process are not traced", err);
		return 1;
	}
	if (atexit(at_exit) != 0) {
		ss_log("atexit failed; GPU kernels of this process are not traced");
		undo_start(1);
		return 1;
	}
	atomic_store(&g_started, 1);
	atomic_store(&g_state, ST_TRACING);
	atomic_store(&g_active, 1);
	hooks_install();
	start_housekeeping();
	return 1;
}
