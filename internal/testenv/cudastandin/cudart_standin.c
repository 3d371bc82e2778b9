/* SPDX-License-Identifier: Apache-2.0 */
/* TEST STAND-IN for the CUDA runtime/driver; see standin_cudart.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "cupti_abi.h"
#include "standin_cudart.h"

#define EXPORT __attribute__((visibility("default")))

typedef uint32_t (*mock_launch_fn)(int domain, uint32_t cbid, const char *function_name,
                                   const char *symbol, uint32_t device, uint32_t stream,
                                   const char *const *kernels, uint32_t nkernels);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static mock_launch_fn g_launch;
static uint64_t (*g_delivered)(void);

static void init_once(void)
{
	/* The driver's behaviour: dlopen the path, call InitializeInjection if
	 * the library exports it, and carry on silently if anything fails. */
	const char *inj = getenv("CUDA_INJECTION64_PATH");
	if (inj != NULL && *inj != '\0') {
		void *h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
		if (h != NULL) {
			int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
			if (init != NULL)
				(void)init();
		}
	}
	/* Same path as the injection library uses, so both get the same mock
	 * instance (dlopen of an already loaded object returns it). */
	const char *cupti = getenv("SLURMSCOPE_CUPTI_PATH");
	void *m = dlopen(cupti && *cupti ? cupti : "libcupti.so", RTLD_NOW | RTLD_LOCAL);
	if (m != NULL) {
		g_launch = (mock_launch_fn)dlsym(m, "slurmscope_mock_launch");
		g_delivered = (uint64_t(*)(void))dlsym(m, "slurmscope_mock_records_delivered");
	}
}

EXPORT int standin_init(void)
{
	pthread_once(&g_once, init_once);
	return 0;
}

static uint32_t launch(int domain, uint32_t cbid, const char *fn, const char *symbol,
                       const char *const *kernels, uint32_t n, uint32_t device)
{
	standin_init();
	if (g_launch == NULL)
		return 0; /* the "GPU" ran it; nobody watched */
	return g_launch(domain, cbid, fn, symbol, device, 7, kernels, n);
}

EXPORT uint32_t standin_launch(const char *kernel, uint32_t device)
{
	return launch(SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaLaunchKernel_v7000, "cudaLaunchKernel",
	              kernel, &kernel, 1, device);
}

EXPORT uint32_t standin_launch_driver(const char *kernel, uint32_t device)
{
	return launch(SS_CUPTI_CB_DOMAIN_DRIVER_API, SS_CBID_DRV_cuLaunchKernel, "cuLaunchKernel", kernel,
	              &kernel, 1, device);
}

EXPORT uint32_t standin_launch_cooperative(const char *kernel, uint32_t device)
{
	return launch(SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaLaunchCooperativeKernel_v9000,
	              "cudaLaunchCooperativeKernel", kernel, &kernel, 1, device);
}

EXPORT uint64_t standin_records_delivered(void)
{
	standin_init();
	return g_delivered != NULL ? g_delivered() : 0;
}

EXPORT uint32_t standin_graph_launch(const char *const *kernels, uint32_t n, uint32_t device)
{
	/* CUPTI reports no symbol for a graph launch; every kernel of the graph
	 * carries the graph launch's correlation id. */
	return launch(SS_CUPTI_CB_DOMAIN_RUNTIME_API, SS_CBID_RT_cudaGraphLaunch_v10000, "cudaGraphLaunch",
	              NULL, kernels, n, device);
}
