/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TEST STAND-IN: a tiny pretend CUDA runtime, libcudart_standin.so. It is
 * not CUDA. It honours CUDA_INJECTION64_PATH the way the CUDA driver does at
 * cuInit, and reports "launches" to the mock CUPTI (mock_cupti.c) through
 * the same callback ids real CUDA uses, so the injection library can be
 * tested end to end on machines without a GPU.
 */
#ifndef SLURMSCOPE_STANDIN_CUDART_H
#define SLURMSCOPE_STANDIN_CUDART_H

#include <stdint.h>

#if defined(__cplusplus)
extern "C" {
#endif

/* Like cuInit: once per process, loads $CUDA_INJECTION64_PATH and calls its
 * InitializeInjection, then connects to the (mock) CUPTI named by
 * $SLURMSCOPE_CUPTI_PATH (default libcupti.so). Missing pieces are not
 * errors: launches then simply are not observed. Returns 0. */
int standin_init(void);

/* cudaLaunchKernel / cuLaunchKernel / cudaLaunchCooperativeKernel of one
 * named kernel on the given device. Return the correlation id (0 when no
 * mock CUPTI is loaded). */
uint32_t standin_launch(const char *kernel, uint32_t device);
uint32_t standin_launch_driver(const char *kernel, uint32_t device);
uint32_t standin_launch_cooperative(const char *kernel, uint32_t device);

/* cudaGraphLaunch of a graph whose kernels are kernels[0..n). */
uint32_t standin_graph_launch(const char *const *kernels, uint32_t n, uint32_t device);

/* Not CUDA: how many kernel records the mock CUPTI has handed to its client
 * (the injection library) so far; 0 when no mock is loaded. */
uint64_t standin_records_delivered(void);

#if defined(__cplusplus)
}
#endif
#endif
