/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvtx_abi.h: the part of NVIDIA's NVTX v3 tool-injection ABI that
 * libslurmscope_inject.so (nvtx.c) and the test stand-in
 * (internal/testenv/nvtxstandin) use, declared here in our own words so
 * that nothing of NVIDIA's has to be installed to build. Names carry an
 * ss_nvtx_ prefix so they never clash with the real headers.
 *
 * Facts taken from NVIDIA/NVTX, c/include/nvtx3 (nvToolsExt.h and
 * nvtxDetail/nvtxTypes.h, nvtxImpl.h, nvtxInit.h), NVTX_VERSION 3:
 *   - An instrumented program's copy of the headers (every library that
 *     includes them has its own copy, so one process can have several)
 *     reads NVTX_INJECTION64_PATH on its first NVTX call, dlopens that
 *     file, looks up "InitializeInjectionNvtx2" and calls it with its own
 *     export-table getter. A return of 0 means failure: the headers then
 *     dlclose the library and turn every NVTX call into a no-op.
 *   - The getter, given ETID 1 (callbacks), returns a struct whose first
 *     member is its own size (size_t) and whose second is
 *     GetModuleFunctionTable(module, &table, &size). The table is an
 *     array of pointers to the headers' function-pointer variables; entry
 *     0 is unused (NULL), entries 1..size-1 belong to the module's callback
 *     ids below, and the array holds one more NULL after them. A tool
 *     implements an API by storing its function into *table[cbid]. After
 *     init returns, every slot the tool left alone becomes NULL, and an
 *     API whose slot is NULL does nothing (push/pop then return -2).
 *   - ETID 3 (version info) exists too; we do not need it.
 *   - nvtxRangeId_t is a uint64_t; 0 is what the headers return for a
 *     start when no tool is attached. Domain and registered-string handles
 *     are opaque pointers chosen by the tool; a NULL domain is the default
 *     domain. Each domain has its own push/pop nesting.
 *   - Push returns the 0-based level of the new range, pop the level of
 *     the range it closed; negative means an error.
 */
#ifndef SLURMSCOPE_NVTX_ABI_H
#define SLURMSCOPE_NVTX_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <wchar.h>

typedef uint64_t ss_nvtx_range_id;
typedef struct ss_nvtx_domain_opaque *ss_nvtx_domain;
typedef struct ss_nvtx_string_opaque *ss_nvtx_string;

/* Export table ids passed to the getter. */
#define SS_NVTX_ETID_CALLBACKS   1u
#define SS_NVTX_ETID_VERSIONINFO 3u

/* Callback modules. */
#define SS_NVTX_MODULE_CORE  1
#define SS_NVTX_MODULE_CORE2 5

/* Callback ids (slot indices) of module CORE. */
#define SS_NVTX_CORE_MarkEx        1
#define SS_NVTX_CORE_MarkA         2
#define SS_NVTX_CORE_MarkW         3
#define SS_NVTX_CORE_RangeStartEx  4
#define SS_NVTX_CORE_RangeStartA   5
#define SS_NVTX_CORE_RangeStartW   6
#define SS_NVTX_CORE_RangeEnd      7
#define SS_NVTX_CORE_RangePushEx   8
#define SS_NVTX_CORE_RangePushA    9
#define SS_NVTX_CORE_RangePushW    10
#define SS_NVTX_CORE_RangePop      11
#define SS_NVTX_CORE_NameCategoryA 12
#define SS_NVTX_CORE_NameCategoryW 13
#define SS_NVTX_CORE_NameOsThreadA 14
#define SS_NVTX_CORE_NameOsThreadW 15
#define SS_NVTX_CORE_SIZE          16 /* what a v3 header reports as the table size */

/* Callback ids (slot indices) of module CORE2, the domain API. */
#define SS_NVTX_CORE2_DomainMarkEx          1
#define SS_NVTX_CORE2_DomainRangeStartEx    2
#define SS_NVTX_CORE2_DomainRangeEnd        3
#define SS_NVTX_CORE2_DomainRangePushEx     4
#define SS_NVTX_CORE2_DomainRangePop        5
#define SS_NVTX_CORE2_DomainResourceCreate  6
#define SS_NVTX_CORE2_DomainResourceDestroy 7
#define SS_NVTX_CORE2_DomainNameCategoryA   8
#define SS_NVTX_CORE2_DomainNameCategoryW   9
#define SS_NVTX_CORE2_DomainRegisterStringA 10
#define SS_NVTX_CORE2_DomainRegisterStringW 11
#define SS_NVTX_CORE2_DomainCreateA         12
#define SS_NVTX_CORE2_DomainCreateW         13
#define SS_NVTX_CORE2_DomainDestroy         14
#define SS_NVTX_CORE2_Initialize            15
#define SS_NVTX_CORE2_SIZE                  16

/* Push/pop result of a header whose slot is empty. */
#define SS_NVTX_NO_PUSH_POP_TRACKING (-2)

/* messageType of the event attributes. */
#define SS_NVTX_MESSAGE_UNKNOWN    0
#define SS_NVTX_MESSAGE_ASCII      1
#define SS_NVTX_MESSAGE_UNICODE    2 /* const wchar_t *: UTF-32 on Linux */
#define SS_NVTX_MESSAGE_REGISTERED 3 /* a handle from DomainRegisterString{A,W} */

/*
 * Event attributes, version 2 of the struct (what NVTX 3 callers fill in,
 * with .version = 3 and .size = sizeof the struct = 48). Only messageType
 * and message are read; a caller's .size smaller than their end means the
 * message is absent.
 */
struct ss_nvtx_event_attributes {
	uint16_t version;      /* 0 */
	uint16_t size;         /* 2 */
	uint32_t category;     /* 4 */
	int32_t color_type;    /* 8 */
	uint32_t color;        /* 12 */
	int32_t payload_type;  /* 16 */
	int32_t reserved0;     /* 20 */
	uint64_t payload;      /* 24: a union of 64/32-bit ints and floats */
	int32_t message_type;  /* 32 */
	int32_t _pad;          /* 36 (implicit padding in the original) */
	union {                /* 40 */
		const char *ascii;
		const wchar_t *unicode;
		ss_nvtx_string registered;
	} message;
};
#if !defined(__cplusplus)
_Static_assert(sizeof(struct ss_nvtx_event_attributes) == 48, "NVTX event attributes v2 are 48 bytes on LP64");
_Static_assert(__builtin_offsetof(struct ss_nvtx_event_attributes, message_type) == 32, "messageType offset");
_Static_assert(__builtin_offsetof(struct ss_nvtx_event_attributes, message) == 40, "message offset");
#endif
#define SS_NVTX_ATTR_MESSAGE_END 48u /* .size must reach this for the message to count */

/* Generic function pointer stored in the slots. */
typedef void (*ss_nvtx_fnptr)(void);

/* The callbacks export table. */
struct ss_nvtx_callbacks_table {
	size_t struct_size;
	int (*get_module_function_table)(int module, ss_nvtx_fnptr ***out_table, unsigned int *out_size);
};

typedef const void *(*ss_nvtx_get_export_table)(uint32_t export_table_id);
typedef int (*ss_nvtx_initialize_injection)(ss_nvtx_get_export_table get_export_table);

/* Slot function types we fill. */
typedef void (*ss_nvtx_MarkEx_fn)(const struct ss_nvtx_event_attributes *);
typedef void (*ss_nvtx_MarkA_fn)(const char *);
typedef void (*ss_nvtx_MarkW_fn)(const wchar_t *);
typedef ss_nvtx_range_id (*ss_nvtx_RangeStartEx_fn)(const struct ss_nvtx_event_attributes *);
typedef ss_nvtx_range_id (*ss_nvtx_RangeStartA_fn)(const char *);
typedef ss_nvtx_range_id (*ss_nvtx_RangeStartW_fn)(const wchar_t *);
typedef void (*ss_nvtx_RangeEnd_fn)(ss_nvtx_range_id);
typedef int (*ss_nvtx_RangePushEx_fn)(const struct ss_nvtx_event_attributes *);
typedef int (*ss_nvtx_RangePushA_fn)(const char *);
typedef int (*ss_nvtx_RangePushW_fn)(const wchar_t *);
typedef int (*ss_nvtx_RangePop_fn)(void);
typedef void (*ss_nvtx_NameCategoryA_fn)(uint32_t, const char *);
typedef void (*ss_nvtx_NameCategoryW_fn)(uint32_t, const wchar_t *);
typedef void (*ss_nvtx_NameOsThreadA_fn)(uint32_t, const char *);
typedef void (*ss_nvtx_NameOsThreadW_fn)(uint32_t, const wchar_t *);
typedef void (*ss_nvtx_DomainMarkEx_fn)(ss_nvtx_domain, const struct ss_nvtx_event_attributes *);
typedef ss_nvtx_range_id (*ss_nvtx_DomainRangeStartEx_fn)(ss_nvtx_domain, const struct ss_nvtx_event_attributes *);
typedef void (*ss_nvtx_DomainRangeEnd_fn)(ss_nvtx_domain, ss_nvtx_range_id);
typedef int (*ss_nvtx_DomainRangePushEx_fn)(ss_nvtx_domain, const struct ss_nvtx_event_attributes *);
typedef int (*ss_nvtx_DomainRangePop_fn)(ss_nvtx_domain);
typedef void (*ss_nvtx_DomainNameCategoryA_fn)(ss_nvtx_domain, uint32_t, const char *);
typedef void (*ss_nvtx_DomainNameCategoryW_fn)(ss_nvtx_domain, uint32_t, const wchar_t *);
typedef ss_nvtx_string (*ss_nvtx_DomainRegisterStringA_fn)(ss_nvtx_domain, const char *);
typedef ss_nvtx_string (*ss_nvtx_DomainRegisterStringW_fn)(ss_nvtx_domain, const wchar_t *);
typedef ss_nvtx_domain (*ss_nvtx_DomainCreateA_fn)(const char *);
typedef ss_nvtx_domain (*ss_nvtx_DomainCreateW_fn)(const wchar_t *);
typedef void (*ss_nvtx_DomainDestroy_fn)(ss_nvtx_domain);
typedef void (*ss_nvtx_Initialize_fn)(const void *);

#endif /* SLURMSCOPE_NVTX_ABI_H */
