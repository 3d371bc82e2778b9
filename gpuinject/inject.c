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
 *     success from InitializeInjection;
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

/* 1 while tracing. Set once everything is enabled; cleared only when the
 * library steps aside. */
static atomic_int g_active;
static ss_cupti_subscriber_handle g_subscriber;

static int g_trace_fd = -1;        /* SLURMSCOPE_INJECT_TRACE_FILE, tests only */
static uint32_t g_flush_ms;        /* SLURMSCOPE_INJECT_FLUSH_MS; 0: no housekeeping thread */
static const char *g_totals_path;  /* SLURMSCOPE_INJECT_TOTALS_FILE */

static atomic_ullong g_launch_markers, g_records, g_dropped;

/* Per-thread nesting of launch APIs (a runtime launch may enter a driver
 * launch): the inner one reuses the outer sampling decision. */
static __thread int t_depth;
static __thread int t_outer_sampled;

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

static void on_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_num_records)
{
	/* CUPTI requires 8-byte alignment. On failure CUPTI drops records and
	 * counts them, which the completion path reports. */
	void *p = aligned_alloc(8, BUFFER_BYTES);
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
		if (atomic_load_explicit(&g_active, memory_order_relaxed)) {
			ss_cupti_result r = cupti.ActivityFlushAll(0);
			if (r != SS_CUPTI_SUCCESS && !atomic_exchange(&g_logged_flush, 1))
				ss_log("periodic cuptiActivityFlushAll: %s; records may arrive late", result_string(r));
			reannounce_names();
		}
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
	fprintf(f, "# launch_markers=%llu records=%llu dropped=%llu reannounced=%llu\n",
	        (unsigned long long)atomic_load(&g_launch_markers), (unsigned long long)atomic_load(&g_records),
	        (unsigned long long)atomic_load(&g_dropped), (unsigned long long)atomic_load(&g_reannounced));
	fclose(f);
}

static void at_exit(void)
{
	if (!atomic_load(&g_active))
		return;
	stop_housekeeping();
	/* Forced flush: also hands over buffers that are not full, on this
	 * thread, so the last kernels reach the agent and the totals. */
	ss_cupti_result r = cupti.ActivityFlushAll(SS_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	if (r != SS_CUPTI_SUCCESS)
		ss_log("cuptiActivityFlushAll at exit: %s", result_string(r));
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

/* Undo a partial start. CUPTI is called with nothing of ours locked. */
static void step_aside(int activity_enabled)
{
	atomic_store(&g_active, 0);
	if (activity_enabled && cupti.ActivityDisable != NULL)
		cupti.ActivityDisable(SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (g_subscriber != NULL && cupti.Unsubscribe != NULL)
		cupti.Unsubscribe(g_subscriber);
	g_subscriber = NULL;
}

/* Called by the CUDA driver (or the stand-in runtime) once, from cuInit.
 * Returns 1, which the driver takes as success, whatever happened: the job
 * must run whether or not it can be traced. */
EXPORT int InitializeInjection(void)
{
	static atomic_int once;
	if (atomic_exchange(&once, 1))
		return 1;

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

	/* Subscribe first: activity callbacks are process-wide, and registering
	 * ours while another tool owns CUPTI would steal its buffers. */
	r = cupti.Subscribe(&g_subscriber, on_callback, NULL);
	if (r == SS_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
		g_subscriber = NULL;
		ss_log("another CUPTI client (a profiler) is already subscribed; GPU kernels of this process "
		       "are not traced");
		return 1;
	}
	if (r != SS_CUPTI_SUCCESS) {
		g_subscriber = NULL;
		ss_log("cuptiSubscribe: %s; GPU kernels of this process are not traced", result_string(r));
		return 1;
	}
	for (size_t i = 0; i < sizeof k_launch_cbids / sizeof k_launch_cbids[0]; i++) {
		r = cupti.EnableCallback(1, g_subscriber, k_launch_cbids[i].domain, k_launch_cbids[i].cbid);
		if (r != SS_CUPTI_SUCCESS) {
			ss_log("cuptiEnableCallback(%d, %u): %s; GPU kernels of this process are not traced",
			       (int)k_launch_cbids[i].domain, k_launch_cbids[i].cbid, result_string(r));
			step_aside(0);
			return 1;
		}
	}
	r = cupti.ActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed);
	if (r != SS_CUPTI_SUCCESS) {
		ss_log("cuptiActivityRegisterCallbacks: %s; GPU kernels of this process are not traced",
		       result_string(r));
		step_aside(0);
		return 1;
	}
	r = cupti.ActivityEnable(SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (r != SS_CUPTI_SUCCESS) {
		ss_log("cuptiActivityEnable(CONCURRENT_KERNEL): %s; GPU kernels of this process are not traced",
		       result_string(r));
		step_aside(0);
		return 1;
	}
	if (atexit(at_exit) != 0) {
		ss_log("atexit failed; GPU kernels of this process are not traced");
		step_aside(1);
		return 1;
	}
	atomic_store(&g_active, 1);
	start_housekeeping();
	return 1;
}
