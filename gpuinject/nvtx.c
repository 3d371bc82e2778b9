//go:build ignore

// The constraint above keeps the go tool, which runs this directory's tests,
// from taking this file for a cgo source.

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvtx.c: the NVTX tool half of libslurmscope_inject.so.
 *
 * NVIDIA's NVTX v3 headers, compiled into every annotated program or
 * library, dlopen the file named by NVTX_INJECTION64_PATH on their first
 * call and hand InitializeInjectionNvtx2 an export-table getter; we fill
 * their function-pointer slots (nvtx_abi.h says how) with the functions
 * below. From then on every push/pop of the program lands here.
 *
 * We keep no event log. Each thread that uses NVTX owns one
 * struct slurmscope_nvtx_thread (slurmscope_nvtx.h, normative) holding its
 * open ranges as 64-bit ids; the agent reads it from the process when it
 * samples the thread, the way it reads CPython's thread state. Range names
 * and struct addresses reach the agent through the two markers, where it
 * has uprobes.
 *
 * Ground rules, as in inject.c: the program always runs (every problem is
 * one "slurmscope-inject: nvtx:" line on stderr and a quiet fallback); no
 * locks (atomics and fixed tables), so nothing of ours is held across a
 * marker; every table is capped (see slurmscope_nvtx.h and NVTX.md for the
 * memory bound); the push/pop fast path is a hash of at most
 * SLURMSCOPE_NVTX_MESSAGE_MAX bytes, one probe of the name table and two
 * stores, with no allocation and no system call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
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
#include <wchar.h>

#include "nvtx_abi.h"
#include "slurmscope_nvtx.h"

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- markers ------------------------------------------------------------ */

/*
 * Same body as inject.c's MARKER_BODY, for the same reasons: the asm keeps
 * the call and orders the memory it points to before it, and the frame
 * address input forces `push %rbp; mov %rsp,%rbp` (arm64: stp x29, x30)
 * as the first instruction, which the kernel emulates under a uprobe
 * instead of single-stepping a bare `ret`.
 */
#define NVTX_MARKER_BODY(...) \
	__asm__ __volatile__("" : : __VA_ARGS__, "r"(__builtin_frame_address(0)) : "memory")

SLURMSCOPE_MARKER void slurmscope_nvtx_range_name(uint64_t id, const char *text, uint32_t len,
                                                  uint32_t domain_len)
{
	NVTX_MARKER_BODY("r"(id), "r"(text), "r"(len), "r"(domain_len));
}

SLURMSCOPE_MARKER void slurmscope_nvtx_thread(uint64_t addr, uint32_t tid)
{
	NVTX_MARKER_BODY("r"(addr), "r"(tid));
}

EXPORT __attribute__((used)) const uint32_t slurmscope_nvtx_abi_version = SLURMSCOPE_NVTX_ABI_VERSION;

/* ---- logging and tracing ------------------------------------------------ */

static void nv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void nv_log(const char *fmt, ...)
{
	char buf[512];
	int n = snprintf(buf, sizeof buf, "slurmscope-inject: nvtx: ");
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

static int g_trace_fd = -1;  /* SLURMSCOPE_NVTX_TRACE_FILE: tests and debugging */
static int g_trace_state;    /* SLURMSCOPE_NVTX_TRACE_STATE=1: a state line after every change */

static void trace_write(const char *buf, size_t n)
{
	if (g_trace_fd >= 0) {
		ssize_t w = write(g_trace_fd, buf, n);
		(void)w;
	}
}

/* %XX-escapes everything outside printable ASCII, and '%' itself, so a
 * trace line stays one line of space-free fields. */
static size_t escape(char *out, size_t cap, const char *in, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (size_t i = 0; i < n && o + 4 < cap; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c > 0x20 && c < 0x7f && c != '%') {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = 0;
	return o;
}

/* ---- counters (reported in the trace file at exit) ---------------------- */

static atomic_ullong c_other_uses, c_truncated, c_domain_overflow, c_thread_overflow, c_deep_pushes,
	c_unbalanced_pops, c_started_overflow, c_registered_overflow, c_bad_handles, c_reannounced_names,
	c_reannounced_threads, c_inits;

/* ---- range ids and the name table --------------------------------------- */

#define FNV_BASIS 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static inline uint64_t fnv_bytes(uint64_t h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= FNV_PRIME;
	}
	return h;
}

static inline uint64_t fix_id(uint64_t h)
{
	/* 0 and 1 are reserved (empty entry, "other"). */
	return h <= SLURMSCOPE_NVTX_ID_OTHER ? 2 : h;
}

#define TEXT_MAX (SLURMSCOPE_NVTX_DOMAIN_NAME_MAX + 1 + SLURMSCOPE_NVTX_MESSAGE_MAX)
#define NAME_SLOTS 8192u /* power of two, twice NAMES_MAX: probes stay short */
_Static_assert(NAME_SLOTS >= 2 * SLURMSCOPE_NVTX_NAMES_MAX, "name table load factor");

struct name_entry {
	atomic_ullong id;      /* 0: free */
	atomic_int state;      /* 0 not announced, 1 being announced, 2 announced */
	uint16_t len, dlen;    /* valid once text is set */
	_Atomic(const char *) text; /* arena copy, for re-announcement */
	atomic_uint reg;       /* registered-string slot + 1, 0: none yet */
};
static struct name_entry g_names[NAME_SLOTS];
static atomic_uint g_nnames;

/* Text copies: every stored name fits, so the arena cannot run out. It is
 * zero-filled .bss, so only the pages used are ever resident. */
static char g_arena[SLURMSCOPE_NVTX_NAMES_MAX * TEXT_MAX];
static atomic_size_t g_arena_used;

static const char k_other_text[] = "\0(other NVTX ranges)";
#define OTHER_TEXT_LEN (sizeof k_other_text - 1)
static atomic_int g_logged_names_full;

static void announce_raw(uint64_t id, const char *text, size_t len, size_t dlen)
{
	slurmscope_nvtx_range_name(id, text, (uint32_t)len, (uint32_t)dlen);
	if (g_trace_fd >= 0) {
		char d[4 * SLURMSCOPE_NVTX_DOMAIN_NAME_MAX + 8], m[4 * SLURMSCOPE_NVTX_MESSAGE_MAX + 8];
		char buf[sizeof d + sizeof m + 128];
		escape(d, sizeof d, text, dlen);
		escape(m, sizeof m, text + dlen + 1, len - dlen - 1);
		int n = snprintf(buf, sizeof buf, "nvtx_name id=%016llx len=%zu domain_len=%zu domain=%s message=%s\n",
		                 (unsigned long long)id, len, dlen, d, m);
		if (n > 0)
			trace_write(buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
	}
}

/* Whoever moves 0 -> 1 announces; a thread that finds 1 (someone is
 * announcing right now) announces too rather than wait, so the name always
 * precedes its use on every thread. The agent dedupes. */
static void announce_entry(struct name_entry *e, uint64_t id, const char *text, size_t len, size_t dlen)
{
	int st = atomic_load_explicit(&e->state, memory_order_acquire);
	if (st == 2)
		return;
	if (st == 0) {
		int zero = 0;
		atomic_compare_exchange_strong(&e->state, &zero, 1);
	}
	announce_raw(id, text, len, dlen);
	atomic_store_explicit(&e->state, 2, memory_order_release);
}

/* The entry of id, inserting it (with a copy of text) if there is room;
 * NULL when the table is full. */
static struct name_entry *name_lookup(uint64_t id, const char *text, size_t len, size_t dlen, int insert)
{
	for (uint32_t i = 0; i < NAME_SLOTS; i++) {
		struct name_entry *e = &g_names[(id + i) & (NAME_SLOTS - 1)];
		unsigned long long cur = atomic_load_explicit(&e->id, memory_order_acquire);
		if (LIKELY(cur == id))
			return e;
		if (cur != 0)
			continue;
		if (!insert)
			return NULL;
		/* Reserve room first, so the table never holds more than NAMES_MAX. */
		if (atomic_fetch_add(&g_nnames, 1) >= SLURMSCOPE_NVTX_NAMES_MAX) {
			atomic_fetch_sub(&g_nnames, 1);
			if (!atomic_exchange(&g_logged_names_full, 1))
				nv_log("more than %u distinct NVTX range names; further ones show as \"(other NVTX ranges)\"",
				       SLURMSCOPE_NVTX_NAMES_MAX);
			return NULL;
		}
		if (atomic_compare_exchange_strong_explicit(&e->id, &cur, id, memory_order_acq_rel,
		                                            memory_order_acquire)) {
			size_t off = atomic_fetch_add(&g_arena_used, len);
			char *copy = &g_arena[off];
			memcpy(copy, text, len);
			e->len = (uint16_t)len;
			e->dlen = (uint16_t)dlen;
			atomic_store_explicit(&e->text, copy, memory_order_release);
			return e;
		}
		atomic_fetch_sub(&g_nnames, 1);
		if (cur == id)
			return e;
	}
	return NULL;
}

/* ---- domains ------------------------------------------------------------ */

/* Index 0: the default domain (NULL handle); 1..DOMAINS_MAX: created ones;
 * DOM_OTHER: every domain beyond the cap, and any handle we did not hand
 * out. */
#define DOM_OTHER (SLURMSCOPE_NVTX_DOMAINS_MAX + 1)
#define NDOMS (SLURMSCOPE_NVTX_DOMAINS_MAX + 2)

struct domain {
	atomic_int ready;
	uint32_t len;
	uint64_t prefix; /* FNV-1a state after the name and its 0x00 byte */
	char name[SLURMSCOPE_NVTX_DOMAIN_NAME_MAX];
};
static struct domain g_domains[NDOMS];
static atomic_uint g_ndomains; /* created (1..) */

static void domain_set(struct domain *d, const char *name, size_t len)
{
	memcpy(d->name, name, len);
	d->len = (uint32_t)len;
	d->prefix = fnv_bytes(fnv_bytes(FNV_BASIS, name, len), "", 1);
	atomic_store_explicit(&d->ready, 1, memory_order_release);
}

static inline uint32_t domain_index(ss_nvtx_domain h)
{
	if (h == NULL)
		return 0;
	uintptr_t p = (uintptr_t)h, base = (uintptr_t)&g_domains[0];
	if (p < base || p >= base + sizeof g_domains || (p - base) % sizeof(struct domain) != 0) {
		atomic_fetch_add_explicit(&c_bad_handles, 1, memory_order_relaxed);
		return DOM_OTHER;
	}
	uint32_t i = (uint32_t)((p - base) / sizeof(struct domain));
	return atomic_load_explicit(&g_domains[i].ready, memory_order_acquire) ? i : DOM_OTHER;
}

/* ---- messages ----------------------------------------------------------- */

/* UTF-32 (Linux wchar_t) to UTF-8, at most cap bytes, whole characters
 * only; surrogates and values beyond U+10FFFF become U+FFFD. Reads at most
 * cap + 1 characters of the input. *more: input was longer. */
static size_t wide_to_utf8(const wchar_t *w, char *out, size_t cap, int *more)
{
	size_t o = 0;
	*more = 0;
	for (size_t i = 0; w[i] != 0; i++) {
		uint32_t c = (uint32_t)w[i];
		if ((c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
			c = 0xfffd;
		unsigned char b[4];
		size_t n;
		if (c < 0x80) {
			b[0] = (unsigned char)c;
			n = 1;
		} else if (c < 0x800) {
			b[0] = (unsigned char)(0xc0 | (c >> 6));
			b[1] = (unsigned char)(0x80 | (c & 0x3f));
			n = 2;
		} else if (c < 0x10000) {
			b[0] = (unsigned char)(0xe0 | (c >> 12));
			b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
			b[2] = (unsigned char)(0x80 | (c & 0x3f));
			n = 3;
		} else {
			b[0] = (unsigned char)(0xf0 | (c >> 18));
			b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
			b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
			b[3] = (unsigned char)(0x80 | (c & 0x3f));
			n = 4;
		}
		if (o + n > cap) {
			*more = 1;
			break;
		}
		memcpy(out + o, b, n);
		o += n;
	}
	return o;
}

/* The id of (domain, msg[0..n)), announced if new. msg is already
 * truncated. The fast path (a known name) hashes and probes only. */
static uint64_t range_id(uint32_t dom, const char *msg, size_t n)
{
	const struct domain *d = &g_domains[dom];
	uint64_t id = fix_id(fnv_bytes(d->prefix, msg, n));
	struct name_entry *e = name_lookup(id, NULL, 0, 0, 0);
	if (LIKELY(e != NULL && atomic_load_explicit(&e->state, memory_order_acquire) == 2))
		return id;
	/* New (or being announced): build the text, insert, announce. */
	char text[TEXT_MAX];
	memcpy(text, d->name, d->len);
	text[d->len] = 0;
	memcpy(text + d->len + 1, msg, n);
	size_t len = d->len + 1 + n;
	if (e == NULL)
		e = name_lookup(id, text, len, d->len, 1);
	if (e == NULL) {
		atomic_fetch_add_explicit(&c_other_uses, 1, memory_order_relaxed);
		return SLURMSCOPE_NVTX_ID_OTHER;
	}
	announce_entry(e, id, text, len, d->len);
	return id;
}

static uint64_t id_ascii(uint32_t dom, const char *s)
{
	if (s == NULL)
		s = "";
	/* Never read more than MESSAGE_MAX + 1 bytes of a hostile string. */
	size_t n = strnlen(s, SLURMSCOPE_NVTX_MESSAGE_MAX + 1);
	if (UNLIKELY(n > SLURMSCOPE_NVTX_MESSAGE_MAX)) {
		n = SLURMSCOPE_NVTX_MESSAGE_MAX;
		atomic_fetch_add_explicit(&c_truncated, 1, memory_order_relaxed);
	}
	return range_id(dom, s, n);
}

static uint64_t id_wide(uint32_t dom, const wchar_t *w)
{
	char buf[SLURMSCOPE_NVTX_MESSAGE_MAX];
	int more = 0;
	size_t n = w == NULL ? 0 : wide_to_utf8(w, buf, sizeof buf, &more);
	if (more)
		atomic_fetch_add_explicit(&c_truncated, 1, memory_order_relaxed);
	return range_id(dom, buf, n);
}

/* ---- registered strings ------------------------------------------------- */

struct registered {
	uint64_t id;
};
static struct registered g_registered[SLURMSCOPE_NVTX_REGISTERED_MAX + 1]; /* last: overflow */
static atomic_uint g_nregistered;

/* One handle per (domain, string): registering the same string again
 * returns the same handle, so a loop of registrations cannot exhaust the
 * slots. Names that did not fit the name table share the overflow slot. */
static ss_nvtx_string register_id(uint64_t id)
{
	ss_nvtx_string other = (ss_nvtx_string)&g_registered[SLURMSCOPE_NVTX_REGISTERED_MAX];
	struct name_entry *e = id == SLURMSCOPE_NVTX_ID_OTHER ? NULL : name_lookup(id, NULL, 0, 0, 0);
	if (e == NULL)
		return other;
	unsigned r = atomic_load_explicit(&e->reg, memory_order_acquire);
	if (r != 0)
		return (ss_nvtx_string)&g_registered[r - 1];
	uint32_t i = atomic_fetch_add(&g_nregistered, 1);
	if (i >= SLURMSCOPE_NVTX_REGISTERED_MAX) {
		atomic_store(&g_nregistered, SLURMSCOPE_NVTX_REGISTERED_MAX);
		atomic_fetch_add_explicit(&c_registered_overflow, 1, memory_order_relaxed);
		return other;
	}
	g_registered[i].id = id;
	unsigned zero = 0;
	/* Two threads registering the same string at once: the loser's slot is
	 * wasted (bounded by the cap) and it returns the winner's. */
	if (!atomic_compare_exchange_strong(&e->reg, &zero, i + 1))
		return (ss_nvtx_string)&g_registered[zero - 1];
	return (ss_nvtx_string)&g_registered[i];
}

static uint64_t id_registered(ss_nvtx_string h)
{
	uintptr_t p = (uintptr_t)h, base = (uintptr_t)&g_registered[0];
	if (p < base || p >= base + sizeof g_registered || (p - base) % sizeof(struct registered) != 0) {
		atomic_fetch_add_explicit(&c_bad_handles, 1, memory_order_relaxed);
		return SLURMSCOPE_NVTX_ID_OTHER;
	}
	uint64_t id = ((const struct registered *)h)->id;
	return id == 0 ? SLURMSCOPE_NVTX_ID_OTHER : id;
}

static uint64_t id_attr(uint32_t dom, const struct ss_nvtx_event_attributes *a)
{
	if (a == NULL || a->size < SS_NVTX_ATTR_MESSAGE_END)
		return id_ascii(dom, "");
	switch (a->message_type) {
	case SS_NVTX_MESSAGE_ASCII:
		return id_ascii(dom, a->message.ascii);
	case SS_NVTX_MESSAGE_UNICODE:
		return id_wide(dom, a->message.unicode);
	case SS_NVTX_MESSAGE_REGISTERED:
		return id_registered(a->message.registered);
	default:
		return id_ascii(dom, "");
	}
}

/* ---- per-thread state --------------------------------------------------- */

struct tstate {
	struct slurmscope_nvtx_thread pub; /* the ABI part; first, so its address is the struct's */
	/* Private: touched by the owning thread only, except handle[] (ends
	 * from other threads) and in_use (pool). */
	uint8_t dom[SLURMSCOPE_NVTX_STACK_CAP];  /* domain of each stored entry */
	uint32_t dcount[NDOMS];                   /* open push/pop ranges per domain */
	uint32_t over[NDOMS];                     /* of which pushed above the cap */
	atomic_ullong handle[SLURMSCOPE_NVTX_STARTED_CAP]; /* 0 free; bit 63: being ended */
	uint32_t gen;                             /* start counter, part of each handle */
	uint32_t index;                           /* pool index */
	atomic_int in_use;
};

#define CHUNK 64u
#define NCHUNKS (SLURMSCOPE_NVTX_THREADS_MAX / CHUNK)
static _Atomic(struct tstate *) g_chunks[NCHUNKS];
static __thread struct tstate *t_self;
static struct tstate g_no_state; /* a thread that got no struct (pool full) */
static pthread_key_t g_key;
static int g_key_ok;
static atomic_int g_logged_threads_full;

#define HANDLE_CLOSING (1ull << 63)

static uint32_t current_tid(void) { return (uint32_t)syscall(SYS_gettid); }

static void announce_thread(struct tstate *t)
{
	uint32_t tid = __atomic_load_n(&t->pub.tid, __ATOMIC_RELAXED);
	slurmscope_nvtx_thread((uint64_t)(uintptr_t)&t->pub, tid);
	if (g_trace_fd >= 0) {
		char buf[96];
		int n = snprintf(buf, sizeof buf, "nvtx_thread addr=%llx tid=%u\n",
		                 (unsigned long long)(uintptr_t)&t->pub, tid);
		trace_write(buf, (size_t)n);
	}
}

static struct tstate *pool_get(uint32_t index)
{
	if (index >= SLURMSCOPE_NVTX_THREADS_MAX)
		return NULL;
	struct tstate *c = atomic_load_explicit(&g_chunks[index / CHUNK], memory_order_acquire);
	return c == NULL ? NULL : &c[index % CHUNK];
}

/* First NVTX range of this thread: take a free struct from the pool (or a
 * new chunk), claim it, announce it. Structs are never freed, only reused,
 * so an address once announced always stays readable. */
static struct tstate *thread_attach(void)
{
	for (uint32_t ci = 0; ci < NCHUNKS; ci++) {
		struct tstate *c = atomic_load_explicit(&g_chunks[ci], memory_order_acquire);
		if (c == NULL) {
			struct tstate *fresh = calloc(CHUNK, sizeof *fresh);
			if (fresh == NULL)
				break;
			for (uint32_t i = 0; i < CHUNK; i++)
				fresh[i].index = ci * CHUNK + i;
			struct tstate *expect = NULL;
			if (atomic_compare_exchange_strong(&g_chunks[ci], &expect, fresh))
				c = fresh;
			else {
				free(fresh);
				c = expect;
			}
		}
		for (uint32_t i = 0; i < CHUNK; i++) {
			struct tstate *t = &c[i];
			int zero = 0;
			if (atomic_load_explicit(&t->in_use, memory_order_relaxed) != 0 ||
			    !atomic_compare_exchange_strong(&t->in_use, &zero, 1))
				continue;
			t->pub.magic = SLURMSCOPE_NVTX_MAGIC;
			t->pub.version = SLURMSCOPE_NVTX_ABI_VERSION;
			t->pub.stack_cap = SLURMSCOPE_NVTX_STACK_CAP;
			t->pub.started_cap = SLURMSCOPE_NVTX_STARTED_CAP;
			__atomic_store_n(&t->pub.tid, current_tid(), __ATOMIC_RELEASE);
			t_self = t;
			if (g_key_ok)
				pthread_setspecific(g_key, t);
			announce_thread(t);
			return t;
		}
	}
	atomic_fetch_add_explicit(&c_thread_overflow, 1, memory_order_relaxed);
	if (!atomic_exchange(&g_logged_threads_full, 1))
		nv_log("more than %u threads with NVTX ranges at once; further threads' ranges are not kept",
		       SLURMSCOPE_NVTX_THREADS_MAX);
	t_self = &g_no_state;
	return &g_no_state;
}

static inline struct tstate *self(void)
{
	struct tstate *t = t_self;
	return LIKELY(t != NULL) ? t : thread_attach();
}

/* Thread exit (pthread key destructor): close everything, hand the struct
 * back. Ranges it started and nobody ended disappear with it. */
static void thread_detach(void *arg)
{
	struct tstate *t = arg;
	t_self = &g_no_state; /* NVTX calls from later destructors are ignored */
	if (t == NULL || t == &g_no_state)
		return;
	__atomic_store_n(&t->pub.tid, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&t->pub.depth, 0, __ATOMIC_RELEASE);
	for (uint32_t s = 0; s < SLURMSCOPE_NVTX_STARTED_CAP; s++) {
		/* An end on another thread may be between its two stores. */
		for (;;) {
			unsigned long long h = atomic_load(&t->handle[s]);
			if (h & HANDLE_CLOSING) {
				sched_yield();
				continue;
			}
			if (h == 0 || atomic_compare_exchange_strong(&t->handle[s], &h, 0))
				break;
		}
		__atomic_store_n(&t->pub.started[s], 0, __ATOMIC_RELEASE);
	}
	memset(t->pub.stack, 0, sizeof t->pub.stack);
	memset(t->dom, 0, sizeof t->dom);
	memset(t->dcount, 0, sizeof t->dcount);
	memset(t->over, 0, sizeof t->over);
	atomic_store_explicit(&t->in_use, 0, memory_order_release);
}

static void trace_state(const char *op, const struct tstate *t)
{
	if (!g_trace_state || g_trace_fd < 0 || t == &g_no_state)
		return;
	char buf[96 + 17 * (SLURMSCOPE_NVTX_STACK_CAP + SLURMSCOPE_NVTX_STARTED_CAP) + 32];
	uint32_t depth = __atomic_load_n(&t->pub.depth, __ATOMIC_RELAXED);
	int n = snprintf(buf, sizeof buf, "nvtx_state tid=%u owner=%u op=%s depth=%u started=", current_tid(),
	                 __atomic_load_n(&t->pub.tid, __ATOMIC_RELAXED), op, depth);
	for (uint32_t i = 0; i < SLURMSCOPE_NVTX_STARTED_CAP; i++)
		n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%llx", i ? "," : "",
		              (unsigned long long)__atomic_load_n(&t->pub.started[i], __ATOMIC_RELAXED));
	n += snprintf(buf + n, sizeof buf - (size_t)n, " stack=");
	uint32_t stored = depth < SLURMSCOPE_NVTX_STACK_CAP ? depth : SLURMSCOPE_NVTX_STACK_CAP;
	for (uint32_t i = 0; i < stored; i++)
		n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%llx", i ? "," : "",
		              (unsigned long long)__atomic_load_n(&t->pub.stack[i], __ATOMIC_RELAXED));
	buf[n++] = '\n';
	trace_write(buf, (size_t)n);
}

/* ---- push / pop ------------------------------------------------------------ */

static int do_push(uint32_t dom, uint64_t id)
{
	struct tstate *t = self();
	if (UNLIKELY(t == &g_no_state))
		return SS_NVTX_NO_PUSH_POP_TRACKING;
	uint32_t d = t->pub.depth;
	if (UNLIKELY(d == UINT32_MAX))
		return -1;
	if (LIKELY(d < SLURMSCOPE_NVTX_STACK_CAP)) {
		/* Entry first, then depth (release): a reader never sees a depth
		 * that covers an unwritten entry. */
		__atomic_store_n(&t->pub.stack[d], id, __ATOMIC_RELAXED);
		t->dom[d] = (uint8_t)dom;
	} else {
		t->over[dom]++;
		atomic_fetch_add_explicit(&c_deep_pushes, 1, memory_order_relaxed);
	}
	__atomic_store_n(&t->pub.depth, d + 1, __ATOMIC_RELEASE);
	int level = (int)t->dcount[dom]++;
	if (UNLIKELY(g_trace_state))
		trace_state("push", t);
	return level;
}

static int do_pop(uint32_t dom)
{
	struct tstate *t = self();
	if (UNLIKELY(t == &g_no_state))
		return SS_NVTX_NO_PUSH_POP_TRACKING;
	if (UNLIKELY(t->dcount[dom] == 0)) {
		/* Unbalanced: nothing of this domain is open here. */
		atomic_fetch_add_explicit(&c_unbalanced_pops, 1, memory_order_relaxed);
		return -1;
	}
	int level = (int)--t->dcount[dom];
	uint32_t d = t->pub.depth;
		if (d > SLURMSCOPE_NVTX_STACK_CAP && t->over[dom] > 0) {
		/* Its innermost range is above the cap: only counted. */
		t->over[dom]--;
		d--;
	} else {
		uint32_t top = d < SLURMSCOPE_NVTX_STACK_CAP ? d : SLURMSCOPE_NVTX_STACK_CAP;
		uint32_t i = top;
		while (i > 0 && !(t->dom[i - 1] == dom && t->pub.stack[i - 1] != SLURMSCOPE_NVTX_ID_NONE))
			i--;
		if (i == 0) { /* cannot happen while dcount is right; stay safe */
			t->dcount[dom] = 0;
			return -1;
		}
		if (i == d) {
			d--; /* the top entry */
		} else {
			/* A range of another domain is above it: close it in place. */
			__atomic_store_n(&t->pub.stack[i - 1], SLURMSCOPE_NVTX_ID_NONE, __ATOMIC_RELEASE);
			if (UNLIKELY(g_trace_state))
				trace_state("pop", t);
			return level;
		}
	}
	/* Drop closed entries that are now on top. */
	while (d > 0 && d <= SLURMSCOPE_NVTX_STACK_CAP && t->pub.stack[d - 1] == SLURMSCOPE_NVTX_ID_NONE)
		d--;
	__atomic_store_n(&t->pub.depth, d, __ATOMIC_RELEASE);
	if (UNLIKELY(g_trace_state))
		trace_state("pop", t);
	return level;
}

/* ---- start / end ---------------------------------------------------------- */

/* Handle: (pool index + 1) << 32 | slot << 24 | 24-bit generation. An
 * untracked start (slots full, no struct) returns a handle with index 0,
 * which every end ignores. */
#define UNTRACKED_HANDLE 0xffffffull

static ss_nvtx_range_id do_start(uint64_t id)
{
	struct tstate *t = self();
	if (UNLIKELY(t == &g_no_state))
		return UNTRACKED_HANDLE;
	for (uint32_t s = 0; s < SLURMSCOPE_NVTX_STARTED_CAP; s++) {
		if (atomic_load_explicit(&t->handle[s], memory_order_acquire) != 0)
			continue;
		uint32_t gen = ++t->gen & 0xffffffu;
		if (gen == 0)
			gen = ++t->gen & 0xffffffu;
		uint64_t h = ((uint64_t)(t->index + 1) << 32) | ((uint64_t)s << 24) | gen;
		__atomic_store_n(&t->pub.started[s], id, __ATOMIC_RELEASE);
		atomic_store_explicit(&t->handle[s], h, memory_order_release);
		if (UNLIKELY(g_trace_state))
			trace_state("start", t);
		return h;
	}
	atomic_fetch_add_explicit(&c_started_overflow, 1, memory_order_relaxed);
	return UNTRACKED_HANDLE;
}

static void do_end(ss_nvtx_range_id h)
{
	uint64_t idx = h >> 32, slot = (h >> 24) & 0xff;
	if (idx == 0 || (h & HANDLE_CLOSING) || slot >= SLURMSCOPE_NVTX_STARTED_CAP)
		return;
	struct tstate *t = pool_get((uint32_t)(idx - 1));
	if (t == NULL)
		return;
	unsigned long long expect = h;
	/* Claim, clear the id, release: the owner reuses the slot only at 0. */
	if (!atomic_compare_exchange_strong(&t->handle[slot], &expect, h | HANDLE_CLOSING))
		return; /* already ended, or a stale handle */
	__atomic_store_n(&t->pub.started[slot], SLURMSCOPE_NVTX_ID_NONE, __ATOMIC_RELEASE);
	atomic_store_explicit(&t->handle[slot], 0, memory_order_release);
	if (UNLIKELY(g_trace_state))
		trace_state("end", t);
}

/* ---- the functions we put into NVTX's slots -------------------------------- */

static int f_RangePushA(const char *m) { return do_push(0, id_ascii(0, m)); }
static int f_RangePushW(const wchar_t *m) { return do_push(0, id_wide(0, m)); }
static int f_RangePushEx(const struct ss_nvtx_event_attributes *a) { return do_push(0, id_attr(0, a)); }
static int f_RangePop(void) { return do_pop(0); }
static ss_nvtx_range_id f_RangeStartA(const char *m) { return do_start(id_ascii(0, m)); }
static ss_nvtx_range_id f_RangeStartW(const wchar_t *m) { return do_start(id_wide(0, m)); }
static ss_nvtx_range_id f_RangeStartEx(const struct ss_nvtx_event_attributes *a) { return do_start(id_attr(0, a)); }
static void f_RangeEnd(ss_nvtx_range_id id) { do_end(id); }

static int f_DomainRangePushEx(ss_nvtx_domain d, const struct ss_nvtx_event_attributes *a)
{
	uint32_t dom = domain_index(d);
	return do_push(dom, id_attr(dom, a));
}
static int f_DomainRangePop(ss_nvtx_domain d) { return do_pop(domain_index(d)); }
static ss_nvtx_range_id f_DomainRangeStartEx(ss_nvtx_domain d, const struct ss_nvtx_event_attributes *a)
{
	uint32_t dom = domain_index(d);
	return do_start(id_attr(dom, a));
}
static void f_DomainRangeEnd(ss_nvtx_domain d, ss_nvtx_range_id id)
{
	(void)d;
	do_end(id);
}

/* Marks have no duration, so they never appear on a stack; naming
 * categories and threads does not change range ids. Accepted, ignored. */
static void f_MarkEx(const struct ss_nvtx_event_attributes *a) { (void)a; }
static void f_MarkA(const char *m) { (void)m; }
static void f_MarkW(const wchar_t *m) { (void)m; }
static void f_NameCategoryA(uint32_t c, const char *n) { (void)c, (void)n; }
static void f_NameCategoryW(uint32_t c, const wchar_t *n) { (void)c, (void)n; }
static void f_NameOsThreadA(uint32_t c, const char *n) { (void)c, (void)n; }
static void f_NameOsThreadW(uint32_t c, const wchar_t *n) { (void)c, (void)n; }
static void f_DomainMarkEx(ss_nvtx_domain d, const struct ss_nvtx_event_attributes *a) { (void)d, (void)a; }
static void f_DomainNameCategoryA(ss_nvtx_domain d, uint32_t c, const char *n) { (void)d, (void)c, (void)n; }
static void f_DomainNameCategoryW(ss_nvtx_domain d, uint32_t c, const wchar_t *n) { (void)d, (void)c, (void)n; }
static void f_Initialize(const void *r) { (void)r; }
/* Domains and their names live as long as the process: ranges already
 * announced keep their names, and the table is capped anyway. */
static void f_DomainDestroy(ss_nvtx_domain d) { (void)d; }

static ss_nvtx_domain domain_create(const char *name, size_t len)
{
	for (uint32_t i = 1; i <= SLURMSCOPE_NVTX_DOMAINS_MAX; i++) {
		struct domain *d = &g_domains[i];
		if (atomic_load_explicit(&d->ready, memory_order_acquire) && d->len == len &&
		    memcmp(d->name, name, len) == 0)
			return (ss_nvtx_domain)d;
	}
	/* Two threads creating the same new name at once may get two handles
	 * with the same name; their ranges share ids, so nothing shows. */
	uint32_t i = atomic_fetch_add(&g_ndomains, 1) + 1;
	if (i > SLURMSCOPE_NVTX_DOMAINS_MAX) {
		atomic_store(&g_ndomains, SLURMSCOPE_NVTX_DOMAINS_MAX);
		atomic_fetch_add_explicit(&c_domain_overflow, 1, memory_order_relaxed);
		return (ss_nvtx_domain)&g_domains[DOM_OTHER];
	}
	domain_set(&g_domains[i], name, len);
	return (ss_nvtx_domain)&g_domains[i];
}

static ss_nvtx_domain f_DomainCreateA(const char *name)
{
	if (name == NULL)
		name = "";
	size_t n = strnlen(name, SLURMSCOPE_NVTX_DOMAIN_NAME_MAX + 1);
	if (n > SLURMSCOPE_NVTX_DOMAIN_NAME_MAX) {
		n = SLURMSCOPE_NVTX_DOMAIN_NAME_MAX;
		atomic_fetch_add_explicit(&c_truncated, 1, memory_order_relaxed);
	}
	return domain_create(name, n);
}

static ss_nvtx_domain f_DomainCreateW(const wchar_t *name)
{
	char buf[SLURMSCOPE_NVTX_DOMAIN_NAME_MAX];
	int more = 0;
	size_t n = name == NULL ? 0 : wide_to_utf8(name, buf, sizeof buf, &more);
	if (more)
		atomic_fetch_add_explicit(&c_truncated, 1, memory_order_relaxed);
	return domain_create(buf, n);
}

static ss_nvtx_string f_DomainRegisterStringA(ss_nvtx_domain d, const char *s)
{
	return register_id(id_ascii(domain_index(d), s)); /* announced now, once */
}

static ss_nvtx_string f_DomainRegisterStringW(ss_nvtx_domain d, const wchar_t *s)
{
	return register_id(id_wide(domain_index(d), s));
}

/* ---- housekeeping: re-announcement ------------------------------------- */

/*
 * Every period (SLURMSCOPE_INJECT_FLUSH_MS, default 1000; 0: never) up to
 * REANNOUNCE_PER_TICK names and as many live threads are announced again,
 * round robin, so an agent that started after a first announcement learns
 * them: every name within ceil(names/256) periods, every thread within
 * ceil(threads/256). Bound per period: 512 marker calls and one pass over
 * the 8192-slot name table and the allocated thread structs.
 *
 * ss_nvtx_housekeeping_tick() is also callable from inject.c's
 * housekeeping thread; while something else ticks, ours stays idle, so a
 * process has one such round per period however it was set up.
 */
#define REANNOUNCE_PER_TICK 256u

static uint32_t g_flush_ms = 1000;
static uint32_t g_name_cursor, g_thread_cursor; /* the ticking thread only */
static atomic_int g_ticking;
static atomic_ullong g_external_tick_ns;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void tick(void)
{
	if (atomic_exchange(&g_ticking, 1))
		return; /* another tick in progress */
	uint32_t done = 0;
	for (uint32_t scanned = 0; scanned < NAME_SLOTS && done < REANNOUNCE_PER_TICK; scanned++) {
		struct name_entry *e = &g_names[g_name_cursor];
		g_name_cursor = (g_name_cursor + 1) & (NAME_SLOTS - 1);
		unsigned long long id = atomic_load_explicit(&e->id, memory_order_acquire);
		const char *text = atomic_load_explicit(&e->text, memory_order_acquire);
		if (id == 0 || text == NULL || atomic_load_explicit(&e->state, memory_order_acquire) != 2)
			continue;
		announce_raw(id, text, e->len, e->dlen);
		done++;
	}
	atomic_fetch_add_explicit(&c_reannounced_names, done, memory_order_relaxed);
	done = 0;
	for (uint32_t scanned = 0; scanned < SLURMSCOPE_NVTX_THREADS_MAX && done < REANNOUNCE_PER_TICK; scanned++) {
		uint32_t i = g_thread_cursor;
		g_thread_cursor = (g_thread_cursor + 1) % SLURMSCOPE_NVTX_THREADS_MAX;
		struct tstate *t = pool_get(i);
		if (t == NULL) { /* chunks fill in order: the rest are unallocated */
			g_thread_cursor = 0;
			break;
		}
		if (!atomic_load_explicit(&t->in_use, memory_order_acquire) ||
		    __atomic_load_n(&t->pub.tid, __ATOMIC_ACQUIRE) == 0)
			continue;
		announce_thread(t);
		done++;
	}
	atomic_fetch_add_explicit(&c_reannounced_threads, done, memory_order_relaxed);
	atomic_store(&g_ticking, 0);
}

/* For inject.c's housekeeping thread (hidden: not exported). */
__attribute__((visibility("hidden"))) void ss_nvtx_housekeeping_tick(void);
void ss_nvtx_housekeeping_tick(void)
{
	atomic_store(&g_external_tick_ns, mono_ns());
	tick();
}

static void *housekeeping(void *arg)
{
	(void)arg;
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19) != 0) {
		/* normal priority then */
	}
	for (;;) {
		struct timespec ts = {(time_t)(g_flush_ms / 1000), (long)(g_flush_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
		uint64_t ext = atomic_load(&g_external_tick_ns);
		if (ext != 0 && mono_ns() - ext < 2ull * g_flush_ms * 1000000ull)
			continue;
		tick();
	}
	return NULL;
}

static void start_housekeeping(void)
{
	if (g_flush_ms == 0)
		return;
	pthread_attr_t attr;
	pthread_t th;
	sigset_t all, old;
	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 128 * 1024);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited: no application handler runs there */
	int err = pthread_create(&th, &attr, housekeeping, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (err != 0) {
		nv_log("cannot start the re-announcement thread: %s; an agent started later misses earlier names",
		       strerror(err));
		return;
	}
	pthread_setname_np(th, "slurmscope-nvtx");
}

/* ---- init, fork, exit ------------------------------------------------------ */

static void at_exit(void)
{
	if (g_trace_fd < 0)
		return;
	uint32_t threads = 0;
	for (uint32_t i = 0; i < SLURMSCOPE_NVTX_THREADS_MAX; i++) {
		struct tstate *t = pool_get(i);
		if (t == NULL)
			break;
		threads++;
	}
	char buf[640];
	int n = snprintf(
		buf, sizeof buf,
		"# nvtx names=%u arena_bytes=%zu domains=%u registered=%u thread_structs_allocated=%u inits=%llu other_uses=%llu "
		"truncated=%llu domain_overflow=%llu thread_overflow=%llu deep_pushes=%llu unbalanced_pops=%llu "
		"started_overflow=%llu registered_overflow=%llu bad_handles=%llu reannounced_names=%llu "
		"reannounced_threads=%llu\n",
		atomic_load(&g_nnames), atomic_load(&g_arena_used), atomic_load(&g_ndomains),
		atomic_load(&g_nregistered), threads, atomic_load(&c_inits), atomic_load(&c_other_uses),
		atomic_load(&c_truncated), atomic_load(&c_domain_overflow), atomic_load(&c_thread_overflow),
		atomic_load(&c_deep_pushes), atomic_load(&c_unbalanced_pops), atomic_load(&c_started_overflow),
		atomic_load(&c_registered_overflow), atomic_load(&c_bad_handles), atomic_load(&c_reannounced_names),
		atomic_load(&c_reannounced_threads));
	if (n > 0)
		trace_write(buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* fork() without exec: the child has only the forking thread; its struct
 * gets the child's tid and is announced again. Other threads' structs stay
 * claimed (bounded by the pool). The housekeeping thread is not inherited. */
static void at_fork_child(void)
{
	struct tstate *t = t_self;
	if (t != NULL && t != &g_no_state) {
		__atomic_store_n(&t->pub.tid, current_tid(), __ATOMIC_RELEASE);
		announce_thread(t);
	}
}

static void global_init(void)
{
	const char *s = getenv("SLURMSCOPE_INJECT_FLUSH_MS");
	if (s != NULL && s[0] != '\0') {
		char *end = NULL;
		errno = 0;
		unsigned long long v = strtoull(s, &end, 10);
		if (errno == 0 && end != s && *end == '\0')
			g_flush_ms = v > 3600000ull ? 3600000u : (uint32_t)v;
	}
	const char *trace = getenv("SLURMSCOPE_NVTX_TRACE_FILE");
	if (trace != NULL && trace[0] != '\0') {
		g_trace_fd = open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (g_trace_fd < 0)
			nv_log("cannot open trace file %s: %s", trace, strerror(errno));
		const char *st = getenv("SLURMSCOPE_NVTX_TRACE_STATE");
		g_trace_state = g_trace_fd >= 0 && st != NULL && strcmp(st, "1") == 0;
	}
	domain_set(&g_domains[0], "", 0);
	domain_set(&g_domains[DOM_OTHER], "(other)", 7);
	g_registered[SLURMSCOPE_NVTX_REGISTERED_MAX].id = SLURMSCOPE_NVTX_ID_OTHER;
	g_key_ok = pthread_key_create(&g_key, thread_detach) == 0;
	if (!g_key_ok)
		nv_log("pthread_key_create failed; structs of exited threads are not reused");
	pthread_atfork(NULL, NULL, at_fork_child);
	atexit(at_exit);
	/* Not in the name table (it never needs a slot); re-announced by nobody,
	 * so announce it now: it precedes any use. */
	announce_raw(SLURMSCOPE_NVTX_ID_OTHER, k_other_text, OTHER_TEXT_LEN, 0);
	start_housekeeping();
}

struct slot_fill {
	unsigned int cbid;
	ss_nvtx_fnptr fn;
};

#define FILL(prefix, name) {prefix##name, (ss_nvtx_fnptr)f_##name}
static const struct slot_fill k_core[] = {
	FILL(SS_NVTX_CORE_, MarkEx),        FILL(SS_NVTX_CORE_, MarkA),        FILL(SS_NVTX_CORE_, MarkW),
	FILL(SS_NVTX_CORE_, RangeStartEx),  FILL(SS_NVTX_CORE_, RangeStartA),  FILL(SS_NVTX_CORE_, RangeStartW),
	FILL(SS_NVTX_CORE_, RangeEnd),      FILL(SS_NVTX_CORE_, RangePushEx),  FILL(SS_NVTX_CORE_, RangePushA),
	FILL(SS_NVTX_CORE_, RangePushW),    FILL(SS_NVTX_CORE_, RangePop),     FILL(SS_NVTX_CORE_, NameCategoryA),
	FILL(SS_NVTX_CORE_, NameCategoryW), FILL(SS_NVTX_CORE_, NameOsThreadA), FILL(SS_NVTX_CORE_, NameOsThreadW),
};
static const struct slot_fill k_core2[] = {
	FILL(SS_NVTX_CORE2_, DomainMarkEx),          FILL(SS_NVTX_CORE2_, DomainRangeStartEx),
	FILL(SS_NVTX_CORE2_, DomainRangeEnd),        FILL(SS_NVTX_CORE2_, DomainRangePushEx),
	FILL(SS_NVTX_CORE2_, DomainRangePop),        FILL(SS_NVTX_CORE2_, DomainNameCategoryA),
	FILL(SS_NVTX_CORE2_, DomainNameCategoryW),   FILL(SS_NVTX_CORE2_, DomainRegisterStringA),
	FILL(SS_NVTX_CORE2_, DomainRegisterStringW), FILL(SS_NVTX_CORE2_, DomainCreateA),
	FILL(SS_NVTX_CORE2_, DomainCreateW),         FILL(SS_NVTX_CORE2_, DomainDestroy),
	FILL(SS_NVTX_CORE2_, Initialize),
};
/* Resource create/destroy (CORE2 6, 7) are left empty: the headers then
 * return a NULL resource, which is all anyone can do with it. */

static int fill_module(const struct ss_nvtx_callbacks_table *cb, int module, const struct slot_fill *f, size_t n)
{
	ss_nvtx_fnptr **table = NULL;
	unsigned int size = 0;
	if (!cb->get_module_function_table(module, &table, &size) || table == NULL)
		return 0;
	int filled = 0;
	for (size_t i = 0; i < n; i++) {
		/* Slots beyond what this copy of the headers has are left alone
		 * (an older header has fewer). */
		if (f[i].cbid < size && table[f[i].cbid] != NULL) {
			*table[f[i].cbid] = f[i].fn;
			filled++;
		}
	}
	return filled;
}

/*
 * Called by each copy of the NVTX headers in the process (one per library
 * that includes them), each with its own getter: every call fills that
 * copy's slots. All copies share our tables. Returns 1 on success; 0 makes
 * that copy of the headers no-op every call (and dlclose us, which only
 * drops a reference when the CUDA side or another copy holds us).
 */
EXPORT int InitializeInjectionNvtx2(ss_nvtx_get_export_table get_export_table)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	static atomic_int logged_bad;
	const struct ss_nvtx_callbacks_table *cb =
		get_export_table == NULL ? NULL : get_export_table(SS_NVTX_ETID_CALLBACKS);
	if (cb == NULL || cb->struct_size < sizeof *cb || cb->get_module_function_table == NULL) {
		if (!atomic_exchange(&logged_bad, 1))
			nv_log("NVTX headers without a usable callbacks export table; their ranges are not kept");
		return 0;
	}
	pthread_once(&once, global_init);
	int filled = fill_module(cb, SS_NVTX_MODULE_CORE, k_core, sizeof k_core / sizeof k_core[0]) +
	             fill_module(cb, SS_NVTX_MODULE_CORE2, k_core2, sizeof k_core2 / sizeof k_core2[0]);
	atomic_fetch_add(&c_inits, 1);
	/* 1 even when nothing was filled: our threads and key destructor are
	 * running, so we must not be dlclosed; empty slots are no-ops anyway. */
	if (filled == 0 && !atomic_exchange(&logged_bad, 1))
		nv_log("NVTX headers offered no function table we know; their ranges are not kept");
	return 1;
}
