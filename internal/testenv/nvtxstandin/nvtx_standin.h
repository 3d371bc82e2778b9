/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TEST STAND-IN, not NVIDIA's: the NVTX C API as libnvtx_standin.so exports
 * it (see nvtx_standin.c). Same names, argument types and results as
 * NVIDIA's NVTX v3 API, with the types of gpuinject/nvtx_abi.h.
 */
#ifndef NVTX_STANDIN_H
#define NVTX_STANDIN_H

#include <wchar.h>

#include "nvtx_abi.h"

int nvtxRangePushA(const char *message);
int nvtxRangePushW(const wchar_t *message);
int nvtxRangePushEx(const struct ss_nvtx_event_attributes *attr);
int nvtxRangePop(void);
ss_nvtx_range_id nvtxRangeStartA(const char *message);
ss_nvtx_range_id nvtxRangeStartW(const wchar_t *message);
ss_nvtx_range_id nvtxRangeStartEx(const struct ss_nvtx_event_attributes *attr);
void nvtxRangeEnd(ss_nvtx_range_id id);
void nvtxMarkA(const char *message);
void nvtxMarkW(const wchar_t *message);
void nvtxNameOsThreadA(uint32_t tid, const char *name);
ss_nvtx_domain nvtxDomainCreateA(const char *name);
ss_nvtx_domain nvtxDomainCreateW(const wchar_t *name);
void nvtxDomainDestroy(ss_nvtx_domain domain);
ss_nvtx_string nvtxDomainRegisterStringA(ss_nvtx_domain domain, const char *s);
ss_nvtx_string nvtxDomainRegisterStringW(ss_nvtx_domain domain, const wchar_t *s);
int nvtxDomainRangePushEx(ss_nvtx_domain domain, const struct ss_nvtx_event_attributes *attr);
int nvtxDomainRangePop(ss_nvtx_domain domain);
ss_nvtx_range_id nvtxDomainRangeStartEx(ss_nvtx_domain domain, const struct ss_nvtx_event_attributes *attr);
void nvtxDomainRangeEnd(ss_nvtx_domain domain, ss_nvtx_range_id id);
void nvtxDomainMarkEx(ss_nvtx_domain domain, const struct ss_nvtx_event_attributes *attr);

/* Stand-in only: 1 when an injection library was loaded and accepted
 * (forces the one-time init, like any NVTX call). */
int nvtx_standin_injected(void);

#endif
