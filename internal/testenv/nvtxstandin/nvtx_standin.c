/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TEST STAND-IN, not NVIDIA's: libnvtx_standin.so plays the part of
 * NVIDIA's NVTX v3 headers (which are header-only and not installable
 * here), so that C programs can link it and Python can drive it through
 * ctypes. It behaves as the headers' inline implementation does, as far as
 * an injection library can tell (facts in gpuinject/nvtx_abi.h):
 *   - every API function calls through a function-pointer slot; each slot
 *     starts out holding an init stub;
 *   - the first call of any API runs the one-time init (one thread does
 *     it, the others wait): read NVTX_INJECTION64_PATH, dlopen it
 *     (RTLD_LAZY), look up InitializeInjectionNvtx2, call it with our
 *     export-table getter; a missing variable, a failed dlopen, a missing
 *     entry point or a 0 result leaves every API a no-op (and dlcloses the
 *     library where it was loaded);
 *   - the getter answers ETID 1 (callbacks: GetModuleFunctionTable) and
 *     ETID 3 (version info); the CORE and CORE2 tables are arrays of
 *     pointers to our slots, entry 0 NULL, one NULL past the end, with
 *     size = number of ids + 1 as the headers report it;
 *   - after init, every slot the tool did not fill becomes NULL; a NULL
 *     slot makes the call a no-op (push/pop return -2, starts return 0).
 * Not emulated: the CUDA/OpenCL/CUDA-runtime/sync modules (GetModule-
 * FunctionTable refuses them), static injection, Windows and Android.
 * Each build of this file is its own "copy of the headers": the tests load
 * a second copy (libnvtx_standin_b.so) to check that a tool serves several.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdlib.h>

#include "nvtx_standin.h"

#define EXPORT __attribute__((visibility("default")))

static ss_nvtx_fnptr g_core[SS_NVTX_CORE_SIZE];
static ss_nvtx_fnptr g_core2[SS_NVTX_CORE2_SIZE];
static unsigned g_state;   /* 0 fresh, 1 running, 2 done */
static int g_injected;

static void init_once(void);

#define LOAD(tbl, cbid) __atomic_load_n(&(tbl)[cbid], __ATOMIC_ACQUIRE)

/* An API with a result: call the slot, or return the no-op result. */
#define API(tbl, cbid, R, name, P, A, NOOP)                 \
	static R stub_##name P;                                 \
	EXPORT R name P                                         \
	{                                                       \
		R(*f) P = (R(*) P)LOAD(tbl, cbid);                  \
		if (f != NULL)                                      \
			return f A;                                     \
		return NOOP;                                        \
	}                                                       \
	static R stub_##name P                                  \
	{                                                       \
		init_once();                                        \
		return name A;                                      \
	}
#define API_V(tbl, cbid, name, P, A)                        \
	static void stub_##name P;                              \
	EXPORT void name P                                      \
	{                                                       \
		void(*f) P = (void(*) P)LOAD(tbl, cbid);            \
		if (f != NULL)                                      \
			f A;                                            \
	}                                                       \
	static void stub_##name P                               \
	{                                                       \
		init_once();                                        \
		name A;                                             \
	}

typedef const struct ss_nvtx_event_attributes *attr_t;

API(g_core, SS_NVTX_CORE_RangePushA, int, nvtxRangePushA, (const char *m), (m), SS_NVTX_NO_PUSH_POP_TRACKING)
API(g_core, SS_NVTX_CORE_RangePushW, int, nvtxRangePushW, (const wchar_t *m), (m), SS_NVTX_NO_PUSH_POP_TRACKING)
API(g_core, SS_NVTX_CORE_RangePushEx, int, nvtxRangePushEx, (attr_t a), (a), SS_NVTX_NO_PUSH_POP_TRACKING)
API(g_core, SS_NVTX_CORE_RangePop, int, nvtxRangePop, (void), (), SS_NVTX_NO_PUSH_POP_TRACKING)
API(g_core, SS_NVTX_CORE_RangeStartA, ss_nvtx_range_id, nvtxRangeStartA, (const char *m), (m), 0)
API(g_core, SS_NVTX_CORE_RangeStartW, ss_nvtx_range_id, nvtxRangeStartW, (const wchar_t *m), (m), 0)
API(g_core, SS_NVTX_CORE_RangeStartEx, ss_nvtx_range_id, nvtxRangeStartEx, (attr_t a), (a), 0)
API_V(g_core, SS_NVTX_CORE_RangeEnd, nvtxRangeEnd, (ss_nvtx_range_id id), (id))
API_V(g_core, SS_NVTX_CORE_MarkA, nvtxMarkA, (const char *m), (m))
API_V(g_core, SS_NVTX_CORE_MarkW, nvtxMarkW, (const wchar_t *m), (m))
API_V(g_core, SS_NVTX_CORE_NameOsThreadA, nvtxNameOsThreadA, (uint32_t tid, const char *n), (tid, n))
API(g_core2, SS_NVTX_CORE2_DomainCreateA, ss_nvtx_domain, nvtxDomainCreateA, (const char *n), (n), NULL)
API(g_core2, SS_NVTX_CORE2_DomainCreateW, ss_nvtx_domain, nvtxDomainCreateW, (const wchar_t *n), (n), NULL)
API_V(g_core2, SS_NVTX_CORE2_DomainDestroy, nvtxDomainDestroy, (ss_nvtx_domain d), (d))
API(g_core2, SS_NVTX_CORE2_DomainRegisterStringA, ss_nvtx_string, nvtxDomainRegisterStringA,
    (ss_nvtx_domain d, const char *s), (d, s), NULL)
API(g_core2, SS_NVTX_CORE2_DomainRegisterStringW, ss_nvtx_string, nvtxDomainRegisterStringW,
    (ss_nvtx_domain d, const wchar_t *s), (d, s), NULL)
API(g_core2, SS_NVTX_CORE2_DomainRangePushEx, int, nvtxDomainRangePushEx, (ss_nvtx_domain d, attr_t a), (d, a),
    SS_NVTX_NO_PUSH_POP_TRACKING)
API(g_core2, SS_NVTX_CORE2_DomainRangePop, int, nvtxDomainRangePop, (ss_nvtx_domain d), (d),
    SS_NVTX_NO_PUSH_POP_TRACKING)
API(g_core2, SS_NVTX_CORE2_DomainRangeStartEx, ss_nvtx_range_id, nvtxDomainRangeStartEx,
    (ss_nvtx_domain d, attr_t a), (d, a), 0)
API_V(g_core2, SS_NVTX_CORE2_DomainRangeEnd, nvtxDomainRangeEnd, (ss_nvtx_domain d, ss_nvtx_range_id id), (d, id))
API_V(g_core2, SS_NVTX_CORE2_DomainMarkEx, nvtxDomainMarkEx, (ss_nvtx_domain d, attr_t a), (d, a))

/* Slots whose API this stand-in does not export still start with a stub,
 * as in the headers, so a tool sees and may fill them. */
static void stub_other(void) { init_once(); }

#define S(name) ((ss_nvtx_fnptr)stub_##name)
#define CORE_INIT                                                                                        \
	{                                                                                                    \
		[SS_NVTX_CORE_MarkEx] = stub_other, [SS_NVTX_CORE_MarkA] = S(nvtxMarkA),                         \
		[SS_NVTX_CORE_MarkW] = S(nvtxMarkW), [SS_NVTX_CORE_RangeStartEx] = S(nvtxRangeStartEx),          \
		[SS_NVTX_CORE_RangeStartA] = S(nvtxRangeStartA), [SS_NVTX_CORE_RangeStartW] = S(nvtxRangeStartW), \
		[SS_NVTX_CORE_RangeEnd] = S(nvtxRangeEnd), [SS_NVTX_CORE_RangePushEx] = S(nvtxRangePushEx),      \
		[SS_NVTX_CORE_RangePushA] = S(nvtxRangePushA), [SS_NVTX_CORE_RangePushW] = S(nvtxRangePushW),    \
		[SS_NVTX_CORE_RangePop] = S(nvtxRangePop), [SS_NVTX_CORE_NameCategoryA] = stub_other,            \
		[SS_NVTX_CORE_NameCategoryW] = stub_other, [SS_NVTX_CORE_NameOsThreadA] = S(nvtxNameOsThreadA),  \
		[SS_NVTX_CORE_NameOsThreadW] = stub_other,                                                       \
	}
#define CORE2_INIT                                                                                       \
	{                                                                                                    \
		[SS_NVTX_CORE2_DomainMarkEx] = S(nvtxDomainMarkEx),                                              \
		[SS_NVTX_CORE2_DomainRangeStartEx] = S(nvtxDomainRangeStartEx),                                  \
		[SS_NVTX_CORE2_DomainRangeEnd] = S(nvtxDomainRangeEnd),                                          \
		[SS_NVTX_CORE2_DomainRangePushEx] = S(nvtxDomainRangePushEx),                                    \
		[SS_NVTX_CORE2_DomainRangePop] = S(nvtxDomainRangePop),                                          \
		[SS_NVTX_CORE2_DomainResourceCreate] = stub_other, [SS_NVTX_CORE2_DomainResourceDestroy] = stub_other, \
		[SS_NVTX_CORE2_DomainNameCategoryA] = stub_other, [SS_NVTX_CORE2_DomainNameCategoryW] = stub_other, \
		[SS_NVTX_CORE2_DomainRegisterStringA] = S(nvtxDomainRegisterStringA),                            \
		[SS_NVTX_CORE2_DomainRegisterStringW] = S(nvtxDomainRegisterStringW),                            \
		[SS_NVTX_CORE2_DomainCreateA] = S(nvtxDomainCreateA),                                            \
		[SS_NVTX_CORE2_DomainCreateW] = S(nvtxDomainCreateW),                                            \
		[SS_NVTX_CORE2_DomainDestroy] = S(nvtxDomainDestroy), [SS_NVTX_CORE2_Initialize] = stub_other,   \
	}
static ss_nvtx_fnptr g_core[SS_NVTX_CORE_SIZE] = CORE_INIT;
static ss_nvtx_fnptr g_core2[SS_NVTX_CORE2_SIZE] = CORE2_INIT;
static const ss_nvtx_fnptr k_core_stubs[SS_NVTX_CORE_SIZE] = CORE_INIT;
static const ss_nvtx_fnptr k_core2_stubs[SS_NVTX_CORE2_SIZE] = CORE2_INIT;

/* Pointers to the slots: entry 0 NULL, one NULL past the end. */
static ss_nvtx_fnptr *g_core_table[SS_NVTX_CORE_SIZE + 1];
static ss_nvtx_fnptr *g_core2_table[SS_NVTX_CORE2_SIZE + 1];

static int get_module_function_table(int module, ss_nvtx_fnptr ***out_table, unsigned int *out_size)
{
	ss_nvtx_fnptr **t;
	unsigned int n;
	switch (module) {
	case SS_NVTX_MODULE_CORE:
		t = g_core_table;
		n = SS_NVTX_CORE_SIZE;
		break;
	case SS_NVTX_MODULE_CORE2:
		t = g_core2_table;
		n = SS_NVTX_CORE2_SIZE;
		break;
	default:
		return 0;
	}
	if (out_size != NULL)
		*out_size = n;
	if (out_table != NULL)
		*out_table = t;
	return 1;
}

static void set_injection_version(uint32_t v) { (void)v; }

static const struct ss_nvtx_callbacks_table g_callbacks = {sizeof g_callbacks, get_module_function_table};
static const struct {
	size_t struct_size;
	uint32_t version;
	uint32_t reserved0;
	void (*set_injection_version)(uint32_t);
} g_version_info = {sizeof g_version_info, 3, 0, set_injection_version};

static const void *get_export_table(uint32_t id)
{
	switch (id) {
	case SS_NVTX_ETID_CALLBACKS:
		return &g_callbacks;
	case SS_NVTX_ETID_VERSIONINFO:
		return &g_version_info;
	default:
		return NULL;
	}
}

static int load_injection(void)
{
	const char *path = getenv("NVTX_INJECTION64_PATH");
	if (path == NULL || path[0] == '\0')
		return 0;
	void *h = dlopen(path, RTLD_LAZY);
	if (h == NULL)
		return 0;
	ss_nvtx_initialize_injection init = (ss_nvtx_initialize_injection)dlsym(h, "InitializeInjectionNvtx2");
	if (init == NULL || init(get_export_table) == 0) {
		dlclose(h);
		return 0;
	}
	return 1;
}

static void init_once(void)
{
	if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == 2)
		return;
	unsigned fresh = 0;
	if (__atomic_compare_exchange_n(&g_state, &fresh, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		for (unsigned i = 1; i < SS_NVTX_CORE_SIZE; i++)
			g_core_table[i] = &g_core[i];
		for (unsigned i = 1; i < SS_NVTX_CORE2_SIZE; i++)
			g_core2_table[i] = &g_core2[i];
		int ok = load_injection();
		g_injected = ok;
		/* Whatever the tool left (or everything, on failure) becomes a no-op. */
		for (unsigned i = 1; i < SS_NVTX_CORE_SIZE; i++)
			if (!ok || g_core[i] == k_core_stubs[i])
				__atomic_store_n(&g_core[i], NULL, __ATOMIC_RELEASE);
		for (unsigned i = 1; i < SS_NVTX_CORE2_SIZE; i++)
			if (!ok || g_core2[i] == k_core2_stubs[i])
				__atomic_store_n(&g_core2[i], NULL, __ATOMIC_RELEASE);
		__atomic_store_n(&g_state, 2, __ATOMIC_RELEASE);
		return;
	}
	while (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != 2)
		sched_yield();
}

EXPORT int nvtx_standin_injected(void)
{
	init_once();
	return g_injected;
}
