//go:build ignore

// The constraint above keeps the go tool, which runs this directory's tests,
// from taking this file for a cgo source.

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi_check.c: checks cupti_abi.h against NVIDIA's real CUPTI headers. It is
 * compiled only where the CUDA toolkit is installed, e.g.
 *
 *   cc -std=c11 -I$CUDA_HOME/include -I$CUDA_HOME/extras/CUPTI/include \
 *      -I gpuinject gpuinject/abi_check.c \
 *      -L$CUDA_HOME/lib64 -L$CUDA_HOME/extras/CUPTI/lib64 -lcupti -o abi_check
 *   ./abi_check
 *
 * (the Go test TestCUPTIABIMatchesRealHeaders does this when it finds
 * cupti.h). Compilation fails on any layout or constant mismatch; the
 * program then checks the CUPTI library it runs against: its version must
 * be one the injection library accepts.
 */
#include <stddef.h>
#include <stdio.h>

#include <cupti.h>

#include "cupti_abi.h"

#define SAME_OFFSET(real, realf, mine, minef) \
	_Static_assert(offsetof(real, realf) == offsetof(mine, minef), #real "." #realf " offset")
#define SAME_SIZE(real, mine) _Static_assert(sizeof(real) == sizeof(mine), #real " size")
#define SAME_VALUE(real, mine) _Static_assert((long long)(real) == (long long)(mine), #real " value")

/* results and enums */
SAME_VALUE(CUPTI_SUCCESS, SS_CUPTI_SUCCESS);
SAME_VALUE(CUPTI_ERROR_INVALID_PARAMETER, SS_CUPTI_ERROR_INVALID_PARAMETER);
SAME_VALUE(CUPTI_ERROR_MAX_LIMIT_REACHED, SS_CUPTI_ERROR_MAX_LIMIT_REACHED);
SAME_VALUE(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, SS_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
SAME_VALUE(CUPTI_CB_DOMAIN_DRIVER_API, SS_CUPTI_CB_DOMAIN_DRIVER_API);
SAME_VALUE(CUPTI_CB_DOMAIN_RUNTIME_API, SS_CUPTI_CB_DOMAIN_RUNTIME_API);
SAME_VALUE(CUPTI_API_ENTER, SS_CUPTI_API_ENTER);
SAME_VALUE(CUPTI_API_EXIT, SS_CUPTI_API_EXIT);
SAME_VALUE(CUPTI_ACTIVITY_KIND_KERNEL, SS_CUPTI_ACTIVITY_KIND_KERNEL);
SAME_VALUE(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, SS_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
SAME_VALUE(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, SS_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
_Static_assert(sizeof(CUptiResult) == sizeof(ss_cupti_result), "CUptiResult size");
_Static_assert(sizeof(CUpti_CallbackDomain) == sizeof(ss_cupti_callback_domain), "domain size");
_Static_assert(sizeof(CUpti_CallbackId) == sizeof(ss_cupti_callback_id), "cbid size");
_Static_assert(sizeof(CUpti_ApiCallbackSite) == sizeof(ss_cupti_api_callback_site), "site size");
_Static_assert(sizeof(CUpti_ActivityKind) == sizeof(ss_cupti_activity_kind), "kind size");

/* callback ids */
SAME_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, SS_CBID_RT_cudaLaunchKernel_v7000);
SAME_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, SS_CBID_RT_cudaLaunchKernel_ptsz_v7000);
SAME_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000, SS_CBID_RT_cudaLaunchCooperativeKernel_v9000);
SAME_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
           SS_CBID_RT_cudaLaunchCooperativeKernel_ptsz_v9000);
SAME_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, SS_CBID_RT_cudaGraphLaunch_v10000);
SAME_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000, SS_CBID_RT_cudaGraphLaunch_ptsz_v10000);
SAME_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, SS_CBID_RT_cudaLaunchKernelExC_v11060);
SAME_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060, SS_CBID_RT_cudaLaunchKernelExC_ptsz_v11060);
SAME_VALUE(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, SS_CBID_DRV_cuLaunchKernel);
SAME_VALUE(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, SS_CBID_DRV_cuLaunchKernel_ptsz);
SAME_VALUE(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, SS_CBID_DRV_cuLaunchCooperativeKernel);
SAME_VALUE(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz, SS_CBID_DRV_cuLaunchCooperativeKernel_ptsz);
SAME_VALUE(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, SS_CBID_DRV_cuGraphLaunch);
SAME_VALUE(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, SS_CBID_DRV_cuGraphLaunch_ptsz);
SAME_VALUE(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, SS_CBID_DRV_cuLaunchKernelEx);
SAME_VALUE(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, SS_CBID_DRV_cuLaunchKernelEx_ptsz);

/* cuptiActivityFlushPeriod(uint32_t time): declared, returns CUptiResult,
 * takes a 32-bit period (resolved with dlsym by the library). */
_Static_assert(sizeof(cuptiActivityFlushPeriod((uint32_t)1000)) == sizeof(ss_cupti_result),
               "cuptiActivityFlushPeriod result");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuptiActivityFlushPeriod),
                                            CUptiResult (*)(uint32_t)),
               "cuptiActivityFlushPeriod signature");

/* CUpti_CallbackData */
SAME_SIZE(CUpti_CallbackData, ss_cupti_callback_data);
SAME_OFFSET(CUpti_CallbackData, callbackSite, ss_cupti_callback_data, callback_site);
SAME_OFFSET(CUpti_CallbackData, functionName, ss_cupti_callback_data, function_name);
SAME_OFFSET(CUpti_CallbackData, functionParams, ss_cupti_callback_data, function_params);
SAME_OFFSET(CUpti_CallbackData, functionReturnValue, ss_cupti_callback_data, function_return_value);
SAME_OFFSET(CUpti_CallbackData, symbolName, ss_cupti_callback_data, symbol_name);
SAME_OFFSET(CUpti_CallbackData, context, ss_cupti_callback_data, context);
SAME_OFFSET(CUpti_CallbackData, contextUid, ss_cupti_callback_data, context_uid);
SAME_OFFSET(CUpti_CallbackData, correlationData, ss_cupti_callback_data, correlation_data);
SAME_OFFSET(CUpti_CallbackData, correlationId, ss_cupti_callback_data, correlation_id);

/* The kernel record CUPTI of this header writes, and the prefix we read. */
#if CUPTI_API_VERSION >= 130200
typedef CUpti_ActivityKernel11 real_kernel;
#elif CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 real_kernel;
#else
typedef CUpti_ActivityKernel9 real_kernel;
#endif
SAME_OFFSET(real_kernel, kind, ss_cupti_kernel9, kind);
SAME_OFFSET(real_kernel, start, ss_cupti_kernel9, start);
SAME_OFFSET(real_kernel, end, ss_cupti_kernel9, end);
SAME_OFFSET(real_kernel, deviceId, ss_cupti_kernel9, device_id);
SAME_OFFSET(real_kernel, contextId, ss_cupti_kernel9, context_id);
SAME_OFFSET(real_kernel, streamId, ss_cupti_kernel9, stream_id);
SAME_OFFSET(real_kernel, correlationId, ss_cupti_kernel9, correlation_id);
SAME_OFFSET(real_kernel, name, ss_cupti_kernel9, name);
_Static_assert(sizeof(real_kernel) >= SS_KERNEL_READ_END, "record shorter than the prefix we read");

#if CUPTI_API_VERSION < 130000
/* 12.x: the full Kernel9 layout, which the mock CUPTI writes. */
SAME_SIZE(CUpti_ActivityKernel9, ss_cupti_kernel9);
SAME_OFFSET(CUpti_ActivityKernel9, registersPerThread, ss_cupti_kernel9, registers_per_thread);
SAME_OFFSET(CUpti_ActivityKernel9, partitionedGlobalCacheRequested, ss_cupti_kernel9, partitioned_global_cache_requested);
SAME_OFFSET(CUpti_ActivityKernel9, completed, ss_cupti_kernel9, completed);
SAME_OFFSET(CUpti_ActivityKernel9, gridX, ss_cupti_kernel9, grid_x);
SAME_OFFSET(CUpti_ActivityKernel9, blockZ, ss_cupti_kernel9, block_z);
SAME_OFFSET(CUpti_ActivityKernel9, localMemoryTotal, ss_cupti_kernel9, local_memory_total);
SAME_OFFSET(CUpti_ActivityKernel9, gridId, ss_cupti_kernel9, grid_id);
SAME_OFFSET(CUpti_ActivityKernel9, queued, ss_cupti_kernel9, queued);
SAME_OFFSET(CUpti_ActivityKernel9, launchType, ss_cupti_kernel9, launch_type);
SAME_OFFSET(CUpti_ActivityKernel9, sharedMemoryExecuted, ss_cupti_kernel9, shared_memory_executed);
SAME_OFFSET(CUpti_ActivityKernel9, graphNodeId, ss_cupti_kernel9, graph_node_id);
SAME_OFFSET(CUpti_ActivityKernel9, graphId, ss_cupti_kernel9, graph_id);
SAME_OFFSET(CUpti_ActivityKernel9, channelID, ss_cupti_kernel9, channel_id);
SAME_OFFSET(CUpti_ActivityKernel9, clusterX, ss_cupti_kernel9, cluster_x);
SAME_OFFSET(CUpti_ActivityKernel9, localMemoryTotal_v2, ss_cupti_kernel9, local_memory_total_v2);
SAME_OFFSET(CUpti_ActivityKernel9, maxActiveClusters, ss_cupti_kernel9, max_active_clusters);
#endif

int main(void)
{
	uint32_t v = 0;
	CUptiResult r = cuptiGetVersion(&v);
	printf("header CUPTI_API_VERSION=%u, library cuptiGetVersion=%u (result %d), record size %zu\n",
	       (unsigned)CUPTI_API_VERSION, v, (int)r, sizeof(real_kernel));
	if (!ss_cupti_version_supported(CUPTI_API_VERSION))
		printf("note: header version %u is outside the accepted range; after this check passes, "
		       "extend SS_CUPTI_VERSION_* in cupti_abi.h\n", (unsigned)CUPTI_API_VERSION);
	if (r != CUPTI_SUCCESS || !ss_cupti_version_supported(v)) {
		printf("FAIL: the injection library would refuse this CUPTI (version %u)\n", v);
		return 1;
	}
	printf("ok\n");
	return 0;
}
