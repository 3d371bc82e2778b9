/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TEST STAND-IN: libkineto_standin.so, a pretend user-side CUPTI profiler.
 * It is not PyTorch's Kineto and contains none of its code. Like Kineto it
 * links libcupti directly (DT_NEEDED, here the mock CUPTI) and, while a
 * profiling window is open, is the process's CUPTI subscriber:
 *
 *   kineto_standin_start():  cuptiSubscribe, enable the runtime and driver
 *                            kernel-launch callbacks, register its own
 *                            activity buffer callbacks, enable
 *                            CONCURRENT_KERNEL activity
 *   kineto_standin_stop():   disable the activity, forced flush,
 *                            cuptiUnsubscribe, then write a report
 *
 * It counts the launch callbacks (API enter) and the kernel records it was
 * handed and writes, at stop, to $SLURMSCOPE_KINETO_STANDIN_REPORT:
 *   kineto subscribe=<r> enable_callback=<r> register=<r> activity_enable=<r>
 *          activity_disable=<r> flush=<r> unsubscribe=<r>
 *          launch_callbacks=<n> exit_callbacks=<n> records=<n>
 *   record_kernel=<name> n=<count>          (one line per kernel name)
 * where <r> is the CUPTI result (0: success; -1: not called). start
 * returns cuptiSubscribe's result; a failed subscribe leaves the rest
 * uncalled, as Kineto gives up on its callbacks then.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cupti_abi.h"

#define EXPORT __attribute__((visibility("default")))

/* The CUPTI entry points, bound by the dynamic linker like Kineto's. */
ss_cupti_result cuptiSubscribe(ss_cupti_subscriber_handle *sub, ss_cupti_callback_func cb, void *ud);
ss_cupti_result cuptiUnsubscribe(ss_cupti_subscriber_handle sub);
ss_cupti_result cuptiEnableCallback(uint32_t enable, ss_cupti_subscriber_handle sub,
                                    ss_cupti_callback_domain domain, ss_cupti_callback_id cbid);
ss_cupti_result cuptiActivityRegisterCallbacks(ss_cupti_buffer_requested_func req,
                                               ss_cupti_buffer_completed_func done);
ss_cupti_result cuptiActivityEnable(ss_cupti_activity_kind kind);
ss_cupti_result cuptiActivityDisable(ss_cupti_activity_kind kind);
ss_cupti_result cuptiActivityFlushAll(uint32_t flag);
ss_cupti_result cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, ss_cupti_activity **rec);

static ss_cupti_subscriber_handle g_sub;
static int r_subscribe = -1, r_enable = -1, r_register = -1, r_activity = -1, r_disable = -1, r_flush = -1,
           r_unsubscribe = -1;
static atomic_ulong g_enter, g_exit, g_records;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	const char *name;
	unsigned long n;
} g_names[64];
static size_t g_nnames;

static void on_callback(void *ud, ss_cupti_callback_domain domain, ss_cupti_callback_id cbid, const void *data)
{
	(void)ud;
	(void)domain;
	(void)cbid;
	const ss_cupti_callback_data *cd = data;
	if (cd->callback_site == SS_CUPTI_API_ENTER)
		atomic_fetch_add(&g_enter, 1);
	else
		atomic_fetch_add(&g_exit, 1);
}

static void on_requested(uint8_t **buffer, size_t *size, size_t *maxrec)
{
	*buffer = aligned_alloc(8, 64 * 1024);
	*size = *buffer != NULL ? 64 * 1024 : 0;
	*maxrec = 0;
}

static void on_completed(ss_cu_context ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
	(void)ctx;
	(void)stream;
	(void)size;
	ss_cupti_activity *rec = NULL;
	while (buffer != NULL && valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &rec) == SS_CUPTI_SUCCESS) {
		if (rec->kind != SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
			continue;
		atomic_fetch_add(&g_records, 1);
		const char *name = ((const ss_cupti_kernel9 *)(const void *)rec)->name;
		pthread_mutex_lock(&g_mu);
		size_t i = 0;
		while (i < g_nnames && strcmp(g_names[i].name, name) != 0)
			i++;
		if (i == g_nnames && g_nnames < sizeof g_names / sizeof g_names[0])
			g_names[g_nnames++].name = name; /* CUPTI's names live as long as the process */
		if (i < g_nnames)
			g_names[i].n++;
		pthread_mutex_unlock(&g_mu);
	}
	free(buffer);
}

EXPORT int kineto_standin_start(void)
{
	r_subscribe = cuptiSubscribe(&g_sub, on_callback, NULL);
	if (r_subscribe != SS_CUPTI_SUCCESS)
		return r_subscribe;
	r_enable = cuptiEnableCallback(1, g_sub, SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaLaunchKernel_v7000);
	if (r_enable == SS_CUPTI_SUCCESS)
		r_enable = cuptiEnableCallback(1, g_sub, SS_CUPTI_CB_DOMAIN_DRIVER_API, SS_CBID_DRV_cuLaunchKernel);
	r_register = cuptiActivityRegisterCallbacks(on_requested, on_completed);
	r_activity = cuptiActivityEnable(SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	return r_subscribe;
}

EXPORT int kineto_standin_stop(void)
{
	if (r_subscribe == SS_CUPTI_SUCCESS) {
		r_disable = cuptiActivityDisable(SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
		r_flush = cuptiActivityFlushAll(SS_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		r_unsubscribe = cuptiUnsubscribe(g_sub);
	}
	const char *path = getenv("SLURMSCOPE_KINETO_STANDIN_REPORT");
	FILE *f = path != NULL && *path ? fopen(path, "we") : NULL;
	if (f == NULL)
		return r_unsubscribe;
	fprintf(f,
	        "kineto subscribe=%d enable_callback=%d register=%d activity_enable=%d activity_disable=%d flush=%d "
	        "unsubscribe=%d launch_callbacks=%lu exit_callbacks=%lu records=%lu\n",
	        r_subscribe, r_enable, r_register, r_activity, r_disable, r_flush, r_unsubscribe,
	        atomic_load(&g_enter), atomic_load(&g_exit), atomic_load(&g_records));
	pthread_mutex_lock(&g_mu);
	for (size_t i = 0; i < g_nnames; i++)
		fprintf(f, "record_kernel=%s n=%lu\n", g_names[i].name, g_names[i].n);
	pthread_mutex_unlock(&g_mu);
	fclose(f);
	return r_unsubscribe;
}
