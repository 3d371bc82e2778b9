/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TEST STAND-IN: a mock libcupti.so. It is not NVIDIA's CUPTI and never
 * touches a GPU. It implements exactly the CUPTI subset that
 * libslurmscope_inject.so uses, with the ABI declared in
 * gpuinject/cupti_abi.h, and turns launches reported by the stand-in CUDA
 * runtime (slurmscope_mock_launch) into
 *   - API enter/exit callbacks on the launching thread, with fresh
 *     correlation ids and symbol names, for enabled (domain, cbid) pairs;
 *   - kernel activity records with deterministic durations, written into
 *     buffers obtained from the client's buffer-requested callback and handed
 *     back through buffer-completed, the way NVIDIA documents it:
 *       - a background "worker" thread hands over FULL buffers only: every
 *         0.5 ms by default ("CUPTI's heuristics"), or every P ms once the
 *         client called cuptiActivityFlushPeriod(P) (P = 0 restores the
 *         default);
 *       - cuptiActivityFlushAll(0) hands over every buffer with records,
 *         full or not, on the caller's thread (every mock record is complete
 *         when queued); FLUSH_FORCED also hands back an empty buffer;
 *     so a partly filled buffer reaches the client only through a flush.
 *     Built with -DSLURMSCOPE_MOCK_NO_FLUSH_PERIOD (mock-noperiod/) it lacks
 *     cuptiActivityFlushPeriod, like a CUPTI older than the client expects.
 * Like CUPTI it admits one subscriber at a time: cuptiSubscribe fails with
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED while one is subscribed and
 * succeeds again after cuptiUnsubscribe; each subscription gets a new handle,
 * and a stale handle is refused (INVALID_PARAMETER). Activity buffer
 * callbacks and activity kinds are process-wide, not per subscriber: the
 * last cuptiActivityRegisterCallbacks wins, and a buffer being filled stays
 * with CUPTI until a flush (or it fills) hands it to whichever callbacks are
 * registered then.
 * It keeps the TRUE GPU nanoseconds per kernel name and writes them at exit
 * to $SLURMSCOPE_MOCK_TRUTH_FILE, so tests can compare the library's totals.
 *
 * Environment:
 *   SLURMSCOPE_MOCK_CUPTI_VERSION   cuptiGetVersion value (default 24 = CUDA 12.6)
 *   SLURMSCOPE_MOCK_CUPTI_BUSY=1    cuptiSubscribe fails with
 *                                   CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
 *   SLURMSCOPE_MOCK_CUPTI_FAIL=fn   that entry point returns an error
 *   SLURMSCOPE_MOCK_KERNEL_NS=a=1,b=2  durations; default 1000 + hash % 9000
 *   SLURMSCOPE_MOCK_RECORD_BYTES    record stride (default 208 for 12.x,
 *                                   216 for 13.x, i.e. Kernel9 / Kernel10)
 *   SLURMSCOPE_MOCK_TRUTH_FILE      where to write the true totals, and a
 *                                   "# flush_period_ms= flushes= forced_flushes=
 *                                   delivered=" line about the client's calls
 * slurmscope_mock_records_delivered() tells the stand-in runtime (and so the
 * trainer) how many records the client has been handed so far.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cupti_abi.h"

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;      /* queue, names, truth */
static pthread_mutex_t g_deliver_mu = PTHREAD_MUTEX_INITIALIZER; /* one delivery at a time */

static ss_cupti_callback_func g_cb;
static void *g_cb_userdata;
static int g_subscribed;
static uintptr_t g_sub_handle, g_next_handle = 0x5b00; /* the current subscription's handle */
static unsigned char g_enabled[3][1024]; /* [domain][cbid] */
static int g_activity_enabled;
static ss_cupti_buffer_requested_func g_req;
static ss_cupti_buffer_completed_func g_done;
static atomic_uint g_next_cid;

static uint32_t env_u32(const char *name, uint32_t def)
{
	const char *s = getenv(name);
	return s && *s ? (uint32_t)strtoul(s, NULL, 10) : def;
}

static int failing(const char *fn)
{
	const char *s = getenv("SLURMSCOPE_MOCK_CUPTI_FAIL");
	return s != NULL && strcmp(s, fn) == 0;
}

static uint32_t version(void) { return env_u32("SLURMSCOPE_MOCK_CUPTI_VERSION", 24); }

static size_t record_bytes(void)
{
	uint32_t def = version() >= 130000 ? 216 : 208;
	uint32_t v = env_u32("SLURMSCOPE_MOCK_RECORD_BYTES", def);
	return v < sizeof(ss_cupti_kernel9) ? sizeof(ss_cupti_kernel9) : (v + 7u) & ~7u;
}

/* ---- kernel names: interned (records point at them forever) + truth --- */

struct kname {
	char *name;
	uint64_t dur_ns;
	uint64_t true_ns, launches;
};
static struct kname g_names[4096];
static size_t g_nnames;

static uint64_t default_duration(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return 1000 + h % 9000;
}

static uint64_t configured_duration(const char *name)
{
	const char *s = getenv("SLURMSCOPE_MOCK_KERNEL_NS");
	size_t n = strlen(name);
	while (s != NULL && *s) {
		const char *eq = strchr(s, '=');
		if (eq == NULL)
			break;
		if ((size_t)(eq - s) == n && strncmp(s, name, n) == 0)
			return strtoull(eq + 1, NULL, 10);
		s = strchr(eq, ',');
		if (s)
			s++;
	}
	return default_duration(name);
}

/* With g_mu held. */
static struct kname *intern(const char *name)
{
	for (size_t i = 0; i < g_nnames; i++)
		if (strcmp(g_names[i].name, name) == 0)
			return &g_names[i];
	if (g_nnames == sizeof g_names / sizeof g_names[0])
		abort(); /* a test bug, not a case to handle */
	struct kname *k = &g_names[g_nnames++];
	k->name = strdup(name);
	k->dur_ns = configured_duration(name);
	return k;
}

/* ---- the "GPU": a queue of finished kernels --------------------------- */

struct done_kernel {
	uint32_t cid, device, stream;
	const char *name;
	uint64_t start, end;
};
static struct done_kernel *g_queue;
static size_t g_qlen, g_qcap;
static uint64_t g_gpu_clock[16];

static pthread_t g_worker;
static int g_worker_started;
static atomic_int g_stop;
static atomic_uint g_flush_period_ms;  /* 0: default heuristics */
static atomic_ullong g_delivered, g_flushes, g_forced_flushes;

/* The buffer being filled (CUPTI asks for one as soon as it has records to
 * store); with g_deliver_mu held. */
static uint8_t *g_pend;
static size_t g_pend_size;

enum { DELIVER_FULL, DELIVER_ALL, DELIVER_FORCED };

/* Hand queued records to the client in its buffers: DELIVER_FULL only whole
 * buffers (the rest stays queued), DELIVER_ALL everything, DELIVER_FORCED
 * everything and the empty pending buffer too. Deliveries are serialised so
 * that a flush returns only after every record queued before it has been
 * handed over. No mock lock but g_deliver_mu is held while the client runs. */
static void deliver(int mode)
{
	pthread_mutex_lock(&g_deliver_mu);
	size_t stride = record_bytes();
	for (;;) {
		pthread_mutex_lock(&g_mu);
		size_t avail = g_qlen;
		ss_cupti_buffer_requested_func req = g_req;
		ss_cupti_buffer_completed_func done = g_done;
		pthread_mutex_unlock(&g_mu);
		if (req == NULL || done == NULL)
			break;
		if (avail == 0) {
			if (mode == DELIVER_FORCED && g_pend != NULL) {
				done(NULL, 0, g_pend, g_pend_size, 0);
				g_pend = NULL;
			}
			break;
		}
		if (g_pend == NULL) {
			uint8_t *buf = NULL;
			size_t size = 0, maxrec = 0;
			req(&buf, &size, &maxrec);
			if (buf == NULL || size < stride)
				break; /* no buffer from the client: records wait (and are lost at exit) */
			g_pend = buf;
			g_pend_size = size;
		}
		size_t cap = g_pend_size / stride;
		if (mode == DELIVER_FULL && avail < cap)
			break;
		uint8_t *buf = g_pend;
		size_t size = g_pend_size;
		size_t used = 0, i = 0;
		pthread_mutex_lock(&g_mu);
		struct done_kernel *q = g_queue;
		size_t n = g_qlen < cap ? g_qlen : cap;
		while (i < n) {
			uint8_t *p = buf + used;
			memset(p, 0, stride);
			ss_cupti_kernel9 k;
			memset(&k, 0, sizeof k);
			k.kind = SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
			k.start = q[i].start;
			k.end = q[i].end;
			k.completed = q[i].end;
			k.device_id = q[i].device;
			k.context_id = 1 + q[i].device;
			k.stream_id = q[i].stream;
			k.grid_x = k.grid_y = k.grid_z = 1;
			k.block_x = 128;
			k.block_y = k.block_z = 1;
			k.correlation_id = q[i].cid;
			k.grid_id = (int64_t)q[i].cid;
			k.name = q[i].name;
			memcpy(p, &k, sizeof k);
			used += stride;
			i++;
		}
		memmove(g_queue, g_queue + n, (g_qlen - n) * sizeof *g_queue);
		g_qlen -= n;
		pthread_mutex_unlock(&g_mu);
		g_pend = NULL;
		done(NULL, 0, buf, size, used);
		atomic_fetch_add(&g_delivered, n);
	}
	pthread_mutex_unlock(&g_deliver_mu);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void *worker(void *arg)
{
	(void)arg;
	struct timespec ts = {0, 500 * 1000}; /* wakes every 0.5 ms, like a busy GPU */
	uint64_t last = mono_ms();
	while (!atomic_load(&g_stop)) {
		nanosleep(&ts, NULL);
		uint32_t period = atomic_load(&g_flush_period_ms);
		uint64_t now = mono_ms();
		if (period != 0 && now - last < period)
			continue;
		last = now;
		deliver(DELIVER_FULL);
	}
	return NULL;
}

static void start_worker(void)
{
	if (!g_worker_started && pthread_create(&g_worker, NULL, worker, NULL) == 0)
		g_worker_started = 1;
}

/* ---- the hook the stand-in runtime calls -------------------------------- */

/*
 * One launch API call: enter callback, the kernels it runs, exit callback.
 * kernels/nkernels are what the GPU runs (one for a plain launch, the graph's
 * kernels for a graph launch); symbol is what CUPTI reports at the callback
 * (NULL for graph launches). Returns the correlation id.
 */
EXPORT uint32_t slurmscope_mock_launch(int domain, uint32_t cbid, const char *function_name,
                                       const char *symbol, uint32_t device, uint32_t stream,
                                       const char *const *kernels, uint32_t nkernels)
{
	uint32_t cid = atomic_fetch_add(&g_next_cid, 1) + 1;
	pthread_mutex_lock(&g_mu);
	ss_cupti_callback_func cb = g_subscribed && domain > 0 && domain < 3 && cbid < 1024 &&
	                                            g_enabled[domain][cbid]
	                                    ? g_cb
	                                    : NULL;
	void *ud = g_cb_userdata;
	pthread_mutex_unlock(&g_mu);

	ss_cupti_callback_data cd;
	memset(&cd, 0, sizeof cd);
	cd.function_name = function_name;
	cd.symbol_name = symbol;
	cd.context = (ss_cu_context)(uintptr_t)(0x1000 + device);
	cd.context_uid = 1 + device;
	cd.correlation_id = cid;
	if (cb != NULL) {
		cd.callback_site = SS_CUPTI_API_ENTER;
		cb(ud, domain, cbid, &cd);
	}

	pthread_mutex_lock(&g_mu);
	for (uint32_t i = 0; i < nkernels; i++) {
		struct kname *k = intern(kernels[i]);
		k->true_ns += k->dur_ns;
		k->launches++;
		uint64_t *clock = &g_gpu_clock[device & 15];
		if (*clock == 0)
			*clock = 1000000000000ull;
		uint64_t start = *clock, end = start + k->dur_ns;
		*clock = end + 250;
		if (!g_activity_enabled)
			continue;
		if (g_qlen == g_qcap) {
			g_qcap = g_qcap ? 2 * g_qcap : 1024;
			g_queue = realloc(g_queue, g_qcap * sizeof *g_queue);
			if (g_queue == NULL)
				abort();
		}
		g_queue[g_qlen++] = (struct done_kernel){cid, device, stream, k->name, start, end};
	}
	pthread_mutex_unlock(&g_mu);

	if (cb != NULL) {
		cd.callback_site = SS_CUPTI_API_EXIT;
		cb(ud, domain, cbid, &cd);
	}
	return cid;
}

/* ---- the CUPTI subset ---------------------------------------------------- */

EXPORT ss_cupti_result cuptiGetVersion(uint32_t *v)
{
	if (v == NULL || failing("cuptiGetVersion"))
		return SS_CUPTI_ERROR_INVALID_PARAMETER;
	*v = version();
	return SS_CUPTI_SUCCESS;
}

EXPORT ss_cupti_result cuptiGetResultString(ss_cupti_result r, const char **s)
{
	switch (r) {
	case SS_CUPTI_SUCCESS: *s = "CUPTI_SUCCESS"; break;
	case SS_CUPTI_ERROR_INVALID_PARAMETER: *s = "CUPTI_ERROR_INVALID_PARAMETER"; break;
	case SS_CUPTI_ERROR_MAX_LIMIT_REACHED: *s = "CUPTI_ERROR_MAX_LIMIT_REACHED"; break;
	case SS_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
		*s = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
		break;
	default: *s = "CUPTI_ERROR_UNKNOWN"; break;
	}
	return SS_CUPTI_SUCCESS;
}

EXPORT ss_cupti_result cuptiSubscribe(ss_cupti_subscriber_handle *sub, ss_cupti_callback_func cb, void *ud)
{
	const char *busy = getenv("SLURMSCOPE_MOCK_CUPTI_BUSY");
	if (busy != NULL && strcmp(busy, "1") == 0)
		return SS_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	if (failing("cuptiSubscribe"))
		return SS_CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&g_mu);
	if (g_subscribed) {
		pthread_mutex_unlock(&g_mu);
		return SS_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	}
	g_subscribed = 1;
	g_cb = cb;
	g_cb_userdata = ud;
	g_sub_handle = ++g_next_handle;
	*sub = (ss_cupti_subscriber_handle)g_sub_handle;
	pthread_mutex_unlock(&g_mu);
	return SS_CUPTI_SUCCESS;
}

EXPORT ss_cupti_result cuptiUnsubscribe(ss_cupti_subscriber_handle sub)
{
	pthread_mutex_lock(&g_mu);
	if (!g_subscribed || (uintptr_t)sub != g_sub_handle) {
		pthread_mutex_unlock(&g_mu);
		return SS_CUPTI_ERROR_INVALID_PARAMETER;
	}
	g_subscribed = 0;
	g_sub_handle = 0;
	g_cb = NULL;
	memset(g_enabled, 0, sizeof g_enabled);
	pthread_mutex_unlock(&g_mu);
	return SS_CUPTI_SUCCESS;
}

EXPORT ss_cupti_result cuptiEnableCallback(uint32_t enable, ss_cupti_subscriber_handle sub,
                                           ss_cupti_callback_domain domain, ss_cupti_callback_id cbid)
{
	if (domain <= 0 || domain >= 3 || cbid >= 1024 || failing("cuptiEnableCallback"))
		return SS_CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&g_mu);
	if (!g_subscribed || (uintptr_t)sub != g_sub_handle) {
		pthread_mutex_unlock(&g_mu);
		return SS_CUPTI_ERROR_INVALID_PARAMETER;
	}
	g_enabled[domain][cbid] = enable != 0;
	pthread_mutex_unlock(&g_mu);
	return SS_CUPTI_SUCCESS;
}

EXPORT ss_cupti_result cuptiActivityRegisterCallbacks(ss_cupti_buffer_requested_func req,
                                                      ss_cupti_buffer_completed_func done)
{
	if (req == NULL || done == NULL || failing("cuptiActivityRegisterCallbacks"))
		return SS_CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&g_mu);
	g_req = req;
	g_done = done;
	start_worker();
	pthread_mutex_unlock(&g_mu);
	return SS_CUPTI_SUCCESS;
}

EXPORT ss_cupti_result cuptiActivityEnable(ss_cupti_activity_kind kind)
{
	if (kind != SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || failing("cuptiActivityEnable"))
		return SS_CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&g_mu);
	g_activity_enabled = 1;
	pthread_mutex_unlock(&g_mu);
	return SS_CUPTI_SUCCESS;
}

EXPORT ss_cupti_result cuptiActivityDisable(ss_cupti_activity_kind kind)
{
	(void)kind;
	pthread_mutex_lock(&g_mu);
	g_activity_enabled = 0;
	pthread_mutex_unlock(&g_mu);
	return SS_CUPTI_SUCCESS;
}

EXPORT ss_cupti_result cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, ss_cupti_activity **rec)
{
	size_t stride = record_bytes();
	uint8_t *p = *rec == NULL ? buffer : (uint8_t *)*rec + stride;
	if (p + stride > buffer + valid)
		return SS_CUPTI_ERROR_MAX_LIMIT_REACHED;
	*rec = (ss_cupti_activity *)(void *)p;
	return SS_CUPTI_SUCCESS;
}

EXPORT ss_cupti_result cuptiActivityGetNumDroppedRecords(ss_cu_context ctx, uint32_t stream, size_t *dropped)
{
	(void)ctx;
	(void)stream;
	*dropped = 0;
	return SS_CUPTI_SUCCESS;
}

EXPORT ss_cupti_result cuptiActivityFlushAll(uint32_t flag)
{
	if (flag & SS_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)
		atomic_fetch_add(&g_forced_flushes, 1);
	else
		atomic_fetch_add(&g_flushes, 1);
	deliver(flag & SS_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED ? DELIVER_FORCED : DELIVER_ALL);
	return SS_CUPTI_SUCCESS;
}

#ifndef SLURMSCOPE_MOCK_NO_FLUSH_PERIOD
EXPORT ss_cupti_result cuptiActivityFlushPeriod(uint32_t time)
{
	if (failing("cuptiActivityFlushPeriod"))
		return SS_CUPTI_ERROR_INVALID_PARAMETER;
	atomic_store(&g_flush_period_ms, time);
	return SS_CUPTI_SUCCESS;
}
#endif

/* Not CUPTI: for the stand-in runtime. */
EXPORT uint64_t slurmscope_mock_records_delivered(void) { return atomic_load(&g_delivered); }

EXPORT ss_cupti_result cuptiGetDeviceId(ss_cu_context ctx, uint32_t *device)
{
	uintptr_t v = (uintptr_t)ctx;
	if (v < 0x1000 || v >= 0x1000 + 16)
		return SS_CUPTI_ERROR_INVALID_PARAMETER;
	*device = (uint32_t)(v - 0x1000);
	return SS_CUPTI_SUCCESS;
}

/* Runs after every atexit handler (so after the library's final flush). */
__attribute__((destructor)) static void mock_fini(void)
{
	if (g_worker_started) {
		atomic_store(&g_stop, 1);
		pthread_join(g_worker, NULL);
		g_worker_started = 0;
	}
	const char *path = getenv("SLURMSCOPE_MOCK_TRUTH_FILE");
	if (path == NULL || *path == '\0')
		return;
	FILE *f = fopen(path, "we");
	if (f == NULL)
		return;
	pthread_mutex_lock(&g_mu);
	for (size_t i = 0; i < g_nnames; i++)
		fprintf(f, "kernel=%s ns=%llu launches=%llu\n", g_names[i].name,
		        (unsigned long long)g_names[i].true_ns, (unsigned long long)g_names[i].launches);
	pthread_mutex_unlock(&g_mu);
	fprintf(f, "# flush_period_ms=%u flushes=%llu forced_flushes=%llu delivered=%llu\n",
	        atomic_load(&g_flush_period_ms), (unsigned long long)atomic_load(&g_flushes),
	        (unsigned long long)atomic_load(&g_forced_flushes), (unsigned long long)atomic_load(&g_delivered));
	fclose(f);
}
