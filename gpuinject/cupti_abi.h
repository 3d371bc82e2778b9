/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupti_abi.h: the subset of the CUPTI C ABI that the slurmscope injection
 * library uses, declared here so that it builds on machines with no CUDA
 * toolkit. Everything carries an ss_/SS_ prefix so that abi_check.c can
 * include this file next to the real <cupti.h> and compare the two with
 * offsetof/sizeof/enum checks on a machine that has CUDA.
 *
 * Where the values come from (all public NVIDIA documentation / headers):
 *   - result codes, enums, CUpti_CallbackData: cupti_result.h,
 *     cupti_callbacks.h (unchanged since CUDA 10).
 *   - callback ids: cupti_runtime_cbid.h and cupti_driver_cbid.h. Those
 *     enums are append-only; ids never change once released.
 *   - kernel activity record: cupti_activity.h, CUpti_ActivityKernel9
 *     (CUDA 12.x); CUpti_ActivityKernel10 (CUDA 13.0/13.1) and
 *     CUpti_ActivityKernel11 (13.2) only append fields after it.
 *   - CUPTI_API_VERSION history: the "CUPTI Version" page of the CUPTI docs.
 *
 * Only the leading fields of the kernel record (kind .. name) are read. They
 * have kept the same offsets since CUpti_ActivityKernel4, but the library
 * still refuses CUPTI versions outside the range below, because a release
 * we have not checked could reorder them.
 */
#ifndef SLURMSCOPE_CUPTI_ABI_H
#define SLURMSCOPE_CUPTI_ABI_H

#include <stddef.h>
#include <stdint.h>

#if defined(__cplusplus)
extern "C" {
#endif

/* ---- results (cupti_result.h) ---------------------------------------- */
typedef int ss_cupti_result;
enum {
	SS_CUPTI_SUCCESS = 0,
	SS_CUPTI_ERROR_INVALID_PARAMETER = 1,
	SS_CUPTI_ERROR_MAX_LIMIT_REACHED = 12, /* end of an activity buffer */
	SS_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39,
};

/* ---- callbacks (cupti_callbacks.h) ----------------------------------- */
typedef struct ss_cu_ctx *ss_cu_context;            /* CUcontext */
typedef struct ss_cupti_subscriber *ss_cupti_subscriber_handle;
typedef uint32_t ss_cupti_callback_id;               /* CUpti_CallbackId */
typedef int ss_cupti_callback_domain;                /* enum, int-sized */
enum {
	SS_CUPTI_CB_DOMAIN_DRIVER_API = 1,
	SS_CUPTI_CB_DOMAIN_RUNTIME_API = 2,
};
typedef int ss_cupti_api_callback_site;              /* enum, int-sized */
enum {
	SS_CUPTI_API_ENTER = 0,
	SS_CUPTI_API_EXIT = 1,
};

/* CUpti_CallbackData. x86-64/aarch64 LP64 offsets in the comments. */
typedef struct {
	ss_cupti_api_callback_site callback_site; /*  0 callbackSite */
	const char *function_name;                /*  8 functionName */
	const void *function_params;              /* 16 functionParams */
	void *function_return_value;              /* 24 functionReturnValue */
	const char *symbol_name;                  /* 32 symbolName */
	ss_cu_context context;                    /* 40 context */
	uint32_t context_uid;                     /* 48 contextUid */
	uint64_t *correlation_data;               /* 56 correlationData */
	uint32_t correlation_id;                  /* 64 correlationId */
} ss_cupti_callback_data;                     /* 72 bytes */

typedef void (*ss_cupti_callback_func)(void *userdata,
                                       ss_cupti_callback_domain domain,
                                       ss_cupti_callback_id cbid,
                                       const void *cbdata);

/* ---- callback ids of the kernel-launch APIs -------------------------- */
/* cupti_runtime_cbid.h (CUpti_runtime_api_trace_cbid) */
enum {
	SS_CBID_RT_cudaLaunchKernel_v7000 = 211,
	SS_CBID_RT_cudaLaunchKernel_ptsz_v7000 = 214,
	SS_CBID_RT_cudaLaunchCooperativeKernel_v9000 = 269,
	SS_CBID_RT_cudaLaunchCooperativeKernel_ptsz_v9000 = 270,
	SS_CBID_RT_cudaGraphLaunch_v10000 = 311,
	SS_CBID_RT_cudaGraphLaunch_ptsz_v10000 = 312,
	SS_CBID_RT_cudaLaunchKernelExC_v11060 = 430,
	SS_CBID_RT_cudaLaunchKernelExC_ptsz_v11060 = 431,
};
/* cupti_driver_cbid.h (CUpti_driver_api_trace_cbid) */
enum {
	SS_CBID_DRV_cuLaunchKernel = 307,
	SS_CBID_DRV_cuLaunchKernel_ptsz = 442,
	SS_CBID_DRV_cuLaunchCooperativeKernel = 477,
	SS_CBID_DRV_cuLaunchCooperativeKernel_ptsz = 478,
	SS_CBID_DRV_cuGraphLaunch = 514,
	SS_CBID_DRV_cuGraphLaunch_ptsz = 515,
	SS_CBID_DRV_cuLaunchKernelEx = 652,
	SS_CBID_DRV_cuLaunchKernelEx_ptsz = 653,
};

/* ---- activity API (cupti_activity.h) --------------------------------- */
typedef int ss_cupti_activity_kind;                  /* enum, int-sized */
enum {
	SS_CUPTI_ACTIVITY_KIND_KERNEL = 3,
	SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10,
};
/* Flag for cuptiActivityFlushAll: also flush buffers that are not full. */
enum { SS_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED = 1 };

typedef void (*ss_cupti_buffer_requested_func)(uint8_t **buffer, size_t *size,
                                               size_t *max_num_records);
typedef void (*ss_cupti_buffer_completed_func)(ss_cu_context context,
                                               uint32_t stream_id,
                                               uint8_t *buffer, size_t size,
                                               size_t valid_size);

/* Activity records are packed with 8-byte alignment (PACKED_ALIGNMENT). */
#define SS_CUPTI_PACKED __attribute__((__packed__, __aligned__(8)))

typedef struct SS_CUPTI_PACKED {
	ss_cupti_activity_kind kind;
} ss_cupti_activity;                                 /* CUpti_Activity */

/*
 * CUpti_ActivityKernel9, the record CUPTI 12.x writes for
 * CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL. Kernel10 (13.0) appends
 * isDeviceLaunched; Kernel11 (13.2) appends the launch priority. The library
 * reads only fields up to and including `name`.
 */
typedef struct SS_CUPTI_PACKED {
	ss_cupti_activity_kind kind;          /*   0 */
	uint8_t cache_config;                 /*   4 union {requested:4, executed:4} */
	uint8_t shared_memory_config;         /*   5 */
	uint16_t registers_per_thread;        /*   6 */
	int32_t partitioned_global_cache_requested; /* 8 enum */
	int32_t partitioned_global_cache_executed;  /* 12 enum */
	uint64_t start;                       /*  16 ns */
	uint64_t end;                         /*  24 ns */
	uint64_t completed;                   /*  32 */
	uint32_t device_id;                   /*  40 */
	uint32_t context_id;                  /*  44 */
	uint32_t stream_id;                   /*  48 */
	int32_t grid_x, grid_y, grid_z;       /*  52 56 60 */
	int32_t block_x, block_y, block_z;    /*  64 68 72 */
	int32_t static_shared_memory;         /*  76 */
	int32_t dynamic_shared_memory;        /*  80 */
	uint32_t local_memory_per_thread;     /*  84 */
	uint32_t local_memory_total;          /*  88 */
	uint32_t correlation_id;              /*  92 */
	int64_t grid_id;                      /*  96 */
	const char *name;                     /* 104 */
	void *reserved0;                      /* 112 */
	uint64_t queued;                      /* 120 */
	uint64_t submitted;                   /* 128 */
	uint8_t launch_type;                  /* 136 */
	uint8_t is_shared_memory_carveout_requested; /* 137 */
	uint8_t shared_memory_carveout_requested;    /* 138 */
	uint8_t padding;                      /* 139 */
	uint32_t shared_memory_executed;      /* 140 */
	uint64_t graph_node_id;               /* 144 */
	int32_t shmem_limit_config;           /* 152 enum */
	uint32_t graph_id;                    /* 156 */
	void *access_policy_window;           /* 160 CUaccessPolicyWindow* */
	uint32_t channel_id;                  /* 168 */
	int32_t channel_type;                 /* 172 enum */
	uint32_t cluster_x, cluster_y, cluster_z; /* 176 180 184 */
	uint32_t cluster_scheduling_policy;   /* 188 */
	uint64_t local_memory_total_v2;       /* 192 */
	uint32_t max_potential_cluster_size;  /* 200 */
	uint32_t max_active_clusters;         /* 204 */
} ss_cupti_kernel9;                       /* 208 bytes */

/* The part of the record the library reads; must match in every version. */
#define SS_KERNEL_READ_END (offsetof(ss_cupti_kernel9, name) + sizeof(const char *))

_Static_assert(sizeof(ss_cupti_callback_data) == 72, "CUpti_CallbackData size");
_Static_assert(offsetof(ss_cupti_callback_data, symbol_name) == 32, "symbolName");
_Static_assert(offsetof(ss_cupti_callback_data, context) == 40, "context");
_Static_assert(offsetof(ss_cupti_callback_data, correlation_id) == 64, "correlationId");
_Static_assert(offsetof(ss_cupti_kernel9, start) == 16, "start");
_Static_assert(offsetof(ss_cupti_kernel9, end) == 24, "end");
_Static_assert(offsetof(ss_cupti_kernel9, device_id) == 40, "deviceId");
_Static_assert(offsetof(ss_cupti_kernel9, context_id) == 44, "contextId");
_Static_assert(offsetof(ss_cupti_kernel9, stream_id) == 48, "streamId");
_Static_assert(offsetof(ss_cupti_kernel9, correlation_id) == 92, "correlationId");
_Static_assert(offsetof(ss_cupti_kernel9, grid_id) == 96, "gridId");
_Static_assert(offsetof(ss_cupti_kernel9, name) == 104, "name");
_Static_assert(offsetof(ss_cupti_kernel9, graph_node_id) == 144, "graphNodeId");
_Static_assert(offsetof(ss_cupti_kernel9, local_memory_total_v2) == 192, "localMemoryTotal_v2");
_Static_assert(sizeof(ss_cupti_kernel9) == 208, "CUpti_ActivityKernel9 size");

/*
 * CUPTI_API_VERSION values whose kernel-record layout we know:
 *   19 (12.0, 12.1), 20 (12.2), 21 (12.3), 22 (12.4), 23 (12.5), 24 (12.6),
 *   25 (unused number), 26 (12.8), 27 (12.9), 28 (12.9 Update 1)
 *   130000..130299: CUDA 13.0 .. 13.2 (format xxyyzz from 13.0 on)
 * CUDA 11.x and anything newer than 13.2 are refused until checked with
 * abi_check.c.
 */
#define SS_CUPTI_VERSION_MIN_12 19u
#define SS_CUPTI_VERSION_MAX_12 28u
#define SS_CUPTI_VERSION_MIN_13 130000u
#define SS_CUPTI_VERSION_MAX_13 130299u

static inline int ss_cupti_version_supported(uint32_t v)
{
	return (v >= SS_CUPTI_VERSION_MIN_12 && v <= SS_CUPTI_VERSION_MAX_12) ||
	       (v >= SS_CUPTI_VERSION_MIN_13 && v <= SS_CUPTI_VERSION_MAX_13);
}

/*
 * The CUPTI entry points the library resolves with dlsym. Signatures as in
 * cupti_callbacks.h / cupti_activity.h / cupti_version.h / cupti_result.h.
 */
typedef ss_cupti_result (*ss_fn_cuptiGetVersion)(uint32_t *version);
typedef ss_cupti_result (*ss_fn_cuptiGetResultString)(ss_cupti_result r, const char **str);
typedef ss_cupti_result (*ss_fn_cuptiSubscribe)(ss_cupti_subscriber_handle *sub,
                                                ss_cupti_callback_func cb, void *userdata);
typedef ss_cupti_result (*ss_fn_cuptiUnsubscribe)(ss_cupti_subscriber_handle sub);
typedef ss_cupti_result (*ss_fn_cuptiEnableCallback)(uint32_t enable, ss_cupti_subscriber_handle sub,
                                                     ss_cupti_callback_domain domain,
                                                     ss_cupti_callback_id cbid);
typedef ss_cupti_result (*ss_fn_cuptiActivityEnable)(ss_cupti_activity_kind kind);
typedef ss_cupti_result (*ss_fn_cuptiActivityDisable)(ss_cupti_activity_kind kind);
typedef ss_cupti_result (*ss_fn_cuptiActivityRegisterCallbacks)(ss_cupti_buffer_requested_func req,
                                                                ss_cupti_buffer_completed_func done);
typedef ss_cupti_result (*ss_fn_cuptiActivityGetNextRecord)(uint8_t *buffer, size_t valid_size,
                                                            ss_cupti_activity **record);
typedef ss_cupti_result (*ss_fn_cuptiActivityGetNumDroppedRecords)(ss_cu_context ctx, uint32_t stream_id,
                                                                   size_t *dropped);
typedef ss_cupti_result (*ss_fn_cuptiActivityFlushAll)(uint32_t flag);
/* CUptiResult cuptiActivityFlushPeriod(uint32_t time): period in ms of
 * CUPTI's worker-thread flush, 0 restores CUPTI's own heuristics. Since
 * CUDA 11.x; optional here (resolved with dlsym, may be absent). NVIDIA's
 * documentation: a periodic flush returns only buffers that are full and
 * whose records are all complete, so it does not by itself hand over a
 * partly filled buffer (cuptiActivityFlushAll(0) does). */
typedef ss_cupti_result (*ss_fn_cuptiActivityFlushPeriod)(uint32_t time);
typedef ss_cupti_result (*ss_fn_cuptiGetDeviceId)(ss_cu_context ctx, uint32_t *device_id);

#if defined(__cplusplus)
}
#endif
#endif /* SLURMSCOPE_CUPTI_ABI_H */
