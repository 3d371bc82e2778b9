/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TEST STAND-IN: a pretend NVTX-annotated program, linked against
 * libnvtx_standin.so (the stand-in for NVIDIA's NVTX headers). With
 * NVTX_INJECTION64_PATH naming libslurmscope_inject.so its ranges land in
 * the injection library's per-thread structs.
 *
 * Usage: nvtx_driver MODE [ARG]
 *   workload [STEPS] [SECONDS]  the must-show workload: each step is range
 *                       "step" holding "phase_a" (7 units of busy work) then
 *                       "phase_b" (3 units), so ~70% / ~30% of CPU time;
 *                       main -> run_steps -> work_phase_a / work_phase_b,
 *                       not inlined. Runs STEPS steps (default 20), or until
 *                       SECONDS passed when given (then STEPS bounds it too).
 *   bench [N]           N push+pop pairs (default 2000000) through the
 *                       stand-in's slots, three flavours; prints ns per pair
 *   layout              a fixed sequence with pauses: prints "pause N" and
 *                       waits for a line on stdin, so a test can read the
 *                       thread struct out of /proc/PID/mem meanwhile
 *   unbalanced          pops with nothing open, in both default and a domain
 *   names [N]           N (default 1000000) distinct messages
 *   long                1 MiB narrow and wide messages and domain name
 *   domains [N]         N (default 1000) domains, one range each
 *   deep [N]            N (default 100000) nested pushes, then N+5 pops
 *   wide                wide messages with invalid code points
 *   handles             bogus domain / string / range handles, start overflow
 *   interleave          two domains' ranges interleaved on one thread
 *   threads             start/end across threads, threads exiting with open
 *                       ranges, 200 short-lived threads
 *   registered          registered strings in a domain
 *   fork                a range open across fork(); the child pushes its own
 *   twocopies LIB       also load a second copy of the headers (LIB) and
 *                       push through both
 * Prints "driver tid=<tid> injected=<0|1>" first, then the mode's lines,
 * "driver vmhwm_kib=<peak RSS>" and "driver done" last.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvtx_standin.h"

#define NOINLINE __attribute__((noinline))

static double now_s(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct ss_nvtx_event_attributes attr_ascii(const char *m)
{
	struct ss_nvtx_event_attributes a;
	memset(&a, 0, sizeof a);
	a.version = 3;
	a.size = sizeof a;
	a.message_type = SS_NVTX_MESSAGE_ASCII;
	a.message.ascii = m;
	return a;
}

/* ---- workload ---- */

#define UNIT 200000L
static volatile unsigned long sink;

NOINLINE static void busy(long units)
{
	unsigned long x = sink;
	for (long i = 0; i < units * UNIT; i++)
		x = x * 6364136223846793005ul + 1442695040888963407ul;
	sink = x;
}

NOINLINE static void work_phase_a(void) { busy(7); }
NOINLINE static void work_phase_b(void) { busy(3); }

NOINLINE static void run_steps(long steps, double seconds)
{
	double a = 0, b = 0, t0 = now_s(CLOCK_MONOTONIC);
	long n = 0;
	for (; n < steps; n++) {
		if (seconds > 0 && now_s(CLOCK_MONOTONIC) - t0 >= seconds)
			break;
		nvtxRangePushA("step");
		nvtxRangePushA("phase_a");
		double c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
		work_phase_a();
		double c1 = now_s(CLOCK_THREAD_CPUTIME_ID);
		nvtxRangePop();
		nvtxRangePushA("phase_b");
		work_phase_b();
		double c2 = now_s(CLOCK_THREAD_CPUTIME_ID);
		nvtxRangePop();
		nvtxRangePop();
		a += c1 - c0;
		b += c2 - c1;
	}
	printf("driver steps=%ld phase_a_cpu_s=%.3f phase_b_cpu_s=%.3f phase_a_share=%.3f\n", n, a, b,
	       a + b > 0 ? a / (a + b) : 0);
}

/* ---- bench ---- */

static void bench(long n)
{
	ss_nvtx_domain d = nvtxDomainCreateA("bench");
	struct ss_nvtx_event_attributes a = attr_ascii("bench_domain_range");
	nvtxRangePushA("warm");
	nvtxRangePop();
	double t0 = now_s(CLOCK_MONOTONIC);
	for (long i = 0; i < n; i++) {
		nvtxRangePushA("bench_range");
		nvtxRangePop();
	}
	double t1 = now_s(CLOCK_MONOTONIC);
	for (long i = 0; i < n; i++) {
		nvtxDomainRangePushEx(d, &a);
		nvtxDomainRangePop(d);
	}
	double t2 = now_s(CLOCK_MONOTONIC);
	nvtxRangePushA("outer"); /* nested one level, a typical training loop */
	for (long i = 0; i < n; i++) {
		nvtxRangePushA("forward_backward_step");
		nvtxRangePop();
	}
	nvtxRangePop();
	double t3 = now_s(CLOCK_MONOTONIC);
	printf("bench n=%ld pushpop_ns=%.1f domain_pushpop_ns=%.1f nested_pushpop_ns=%.1f\n", n,
	       (t1 - t0) * 1e9 / (double)n, (t2 - t1) * 1e9 / (double)n, (t3 - t2) * 1e9 / (double)n);
}

/* ---- layout ---- */

static void pause_point(int n)
{
	printf("pause %d\n", n);
	fflush(stdout);
	char line[16];
	if (fgets(line, sizeof line, stdin) == NULL)
		exit(3);
}

static void layout(void)
{
	ss_nvtx_domain d = nvtxDomainCreateA("layout_domain");
	nvtxRangePushA("outer");
	struct ss_nvtx_event_attributes a = attr_ascii("inner");
	nvtxDomainRangePushEx(d, &a);
	ss_nvtx_range_id r = nvtxRangeStartA("async_range");
	pause_point(1); /* started=[async_range] stack=[outer, layout_domain/inner] */
	nvtxRangePop(); /* closes outer in place: inner is above it */
	pause_point(2); /* stack=[0, layout_domain/inner], depth 2 */
	nvtxDomainRangePop(d);
	nvtxRangeEnd(r);
	pause_point(3); /* all empty */
}

/* ---- hostile modes ---- */

static void unbalanced(void)
{
	ss_nvtx_domain d = nvtxDomainCreateA("unbalanced_domain");
	int bad = 0;
	for (int i = 0; i < 1000; i++)
		bad += nvtxRangePop() < 0;
	for (int i = 0; i < 1000; i++)
		bad += nvtxDomainRangePop(d) < 0;
	nvtxRangePushA("a");
	int level = nvtxRangePop();
	bad += nvtxRangePop() < 0;
	nvtxRangePushA("after");
	printf("driver negative_pops=%d level=%d\n", bad, level);
	nvtxRangePop();
}

static void names(long n)
{
	char buf[64];
	for (long i = 0; i < n; i++) {
		snprintf(buf, sizeof buf, "distinct-message-%ld", i);
		nvtxRangePushA(buf);
		nvtxRangePop();
	}
}

static void long_messages(void)
{
	size_t n = 1u << 20;
	char *s = malloc(n + 1);
	wchar_t *w = malloc((n + 1) * sizeof *w);
	memset(s, 'x', n);
	s[n] = 0;
	for (size_t i = 0; i < n; i++)
		w[i] = L'\u00e9'; /* 2 bytes in UTF-8 */
	w[n] = 0;
	nvtxRangePushA(s);
	nvtxRangePushW(w);
	ss_nvtx_domain d = nvtxDomainCreateA(s);
	struct ss_nvtx_event_attributes a = attr_ascii(s);
	nvtxDomainRangePushEx(d, &a);
	nvtxDomainRangePop(d);
	nvtxRangePop();
	nvtxRangePop();
	free(s);
	free(w);
}

static void domains(long n)
{
	char buf[64];
	struct ss_nvtx_event_attributes a = attr_ascii("in_domain");
	for (long i = 0; i < n; i++) {
		snprintf(buf, sizeof buf, "domain-%ld", i);
		ss_nvtx_domain d = nvtxDomainCreateA(buf);
		nvtxDomainRangePushEx(d, &a);
		nvtxDomainRangePop(d);
	}
}

static void deep(long n)
{
	char buf[32];
	for (long i = 0; i < n; i++) {
		snprintf(buf, sizeof buf, "level-%ld", i % 40);
		nvtxRangePushA(buf);
	}
	int first = nvtxRangePop();
	for (long i = 1; i < n + 5; i++)
		nvtxRangePop();
	printf("driver first_pop_level=%d\n", first);
}

static void wide(void)
{
	static const wchar_t bad[] = {L'a', (wchar_t)0xd800, L'b', (wchar_t)0x110000, (wchar_t)0x1f600,
	                              L'\u00e9', (wchar_t)-1, 0};
	nvtxRangePushW(bad);
	nvtxRangePushW(L"plain wide");
	nvtxRangePop();
	nvtxRangePop();
	ss_nvtx_domain d = nvtxDomainCreateW(L"wide_domain");
	struct ss_nvtx_event_attributes a;
	memset(&a, 0, sizeof a);
	a.version = 3;
	a.size = sizeof a;
	a.message_type = SS_NVTX_MESSAGE_UNICODE;
	a.message.unicode = L"wide_in_domain";
	nvtxDomainRangePushEx(d, &a);
	nvtxDomainRangePop(d);
}

static void handles(void)
{
	static char junk[256];
	struct ss_nvtx_event_attributes a = attr_ascii("with_bogus_domain");
	nvtxDomainRangePushEx((ss_nvtx_domain)(junk + 8), &a);
	nvtxDomainRangePop((ss_nvtx_domain)(junk + 8));
	struct ss_nvtx_event_attributes r;
	memset(&r, 0, sizeof r);
	r.version = 3;
	r.size = sizeof r;
	r.message_type = SS_NVTX_MESSAGE_REGISTERED;
	r.message.registered = (ss_nvtx_string)(junk + 16);
	nvtxRangePushEx(&r);
	nvtxRangePop();
	r.size = 8; /* too small to hold a message */
	nvtxRangePushEx(&r);
	nvtxRangePop();
	nvtxRangePushEx(NULL);
	nvtxRangePop();
	nvtxRangePushA(NULL);
	nvtxRangePop();
	r.size = sizeof r;
	r.message_type = 77;
	nvtxRangePushEx(&r);
	nvtxRangePop();
	nvtxRangeEnd(0);
	nvtxRangeEnd(~0ull);
	nvtxRangeEnd(0x0000001300000001ull);
	nvtxRangeEnd(0x0000000107000001ull);
	ss_nvtx_range_id ids[12];
	for (int i = 0; i < 12; i++)
		ids[i] = nvtxRangeStartA("many_started");
	for (int i = 0; i < 12; i++)
		nvtxRangeEnd(ids[i]);
	for (int i = 0; i < 12; i++)
		nvtxRangeEnd(ids[i]); /* twice */
}

static void interleave(void)
{
	ss_nvtx_domain d1 = nvtxDomainCreateA("d1"), d2 = nvtxDomainCreateA("d2");
	struct ss_nvtx_event_attributes x = attr_ascii("x"), y = attr_ascii("y"), z = attr_ascii("z");
	int lx = nvtxDomainRangePushEx(d1, &x);
	int ly = nvtxDomainRangePushEx(d2, &y);
	int lz = nvtxDomainRangePushEx(d2, &z);
	int p1 = nvtxDomainRangePop(d1); /* x closed in place */
	int p2 = nvtxDomainRangePop(d2); /* z */
	int p3 = nvtxDomainRangePop(d2); /* y, and the closed x below it */
	printf("driver levels=%d,%d,%d pops=%d,%d,%d\n", lx, ly, lz, p1, p2, p3);
}

static ss_nvtx_range_id g_handle;
static pthread_barrier_t g_bar;

static void *starter_exits(void *arg)
{
	(void)arg;
	g_handle = nvtxRangeStartA("started_by_exited_thread");
	nvtxRangePushA("open_at_exit");
	return NULL;
}

static void *starter_waits(void *arg)
{
	(void)arg;
	g_handle = nvtxRangeStartA("started_then_ended_elsewhere");
	pthread_barrier_wait(&g_bar); /* main ends it */
	pthread_barrier_wait(&g_bar);
	return NULL;
}

static void *short_lived(void *arg)
{
	(void)arg;
	nvtxRangePushA("short_lived");
	nvtxRangePop();
	return NULL;
}

static void threads(void)
{
	pthread_t th;
	pthread_create(&th, NULL, starter_exits, NULL);
	pthread_join(th, NULL);
	nvtxRangeEnd(g_handle); /* its thread is gone: ignored */
	pthread_barrier_init(&g_bar, NULL, 2);
	pthread_create(&th, NULL, starter_waits, NULL);
	pthread_barrier_wait(&g_bar);
	nvtxRangeEnd(g_handle);
	pthread_barrier_wait(&g_bar);
	pthread_join(th, NULL);
	for (int i = 0; i < 200; i++) {
		pthread_create(&th, NULL, short_lived, NULL);
		pthread_join(th, NULL);
	}
}

static void registered(void)
{
	ss_nvtx_domain d = nvtxDomainCreateA("reg_domain");
	ss_nvtx_string s = nvtxDomainRegisterStringA(d, "registered_range");
	ss_nvtx_string w = nvtxDomainRegisterStringW(d, L"registered_wide");
	struct ss_nvtx_event_attributes a;
	memset(&a, 0, sizeof a);
	a.version = 3;
	a.size = sizeof a;
	a.message_type = SS_NVTX_MESSAGE_REGISTERED;
	a.message.registered = s;
	nvtxDomainRangePushEx(d, &a);
	a.message.registered = w;
	nvtxDomainRangePushEx(d, &a);
	nvtxDomainRangePop(d);
	nvtxDomainRangePop(d);
	for (int i = 0; i < 5000; i++)
		nvtxDomainRegisterStringA(d, "same_string_registered_often");
}

static void do_fork(void)
{
	nvtxRangePushA("before_fork");
	pid_t pid = fork();
	if (pid == 0) {
		nvtxRangePushA("in_child");
		nvtxRangePop();
		nvtxRangePop();
		printf("driver child tid=%ld\n", (long)syscall(SYS_gettid));
		fflush(stdout);
		_exit(0);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	nvtxRangePop();
	printf("driver child_status=%d\n", st);
}

static void twocopies(const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
		exit(2);
	}
	int (*push)(const char *) = (int (*)(const char *))dlsym(h, "nvtxRangePushA");
	int (*pop)(void) = (int (*)(void))dlsym(h, "nvtxRangePop");
	int (*injected)(void) = (int (*)(void))dlsym(h, "nvtx_standin_injected");
	nvtxRangePushA("from_copy_a");
	int level = push("from_copy_b");
	printf("driver copy_b_injected=%d copy_b_level=%d\n", injected(), level);
	pop();
	nvtxRangePop();
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "workload";
	const char *arg = argc > 2 ? argv[2] : NULL;
	printf("driver tid=%ld injected=%d\n", (long)syscall(SYS_gettid), nvtx_standin_injected());
	fflush(stdout);
	if (strcmp(mode, "workload") == 0)
		run_steps(arg ? atol(arg) : 20, argc > 3 ? atof(argv[3]) : 0);
	else if (strcmp(mode, "bench") == 0)
		bench(arg ? atol(arg) : 2000000);
	else if (strcmp(mode, "layout") == 0)
		layout();
	else if (strcmp(mode, "unbalanced") == 0)
		unbalanced();
	else if (strcmp(mode, "names") == 0)
		names(arg ? atol(arg) : 1000000);
	else if (strcmp(mode, "long") == 0)
		long_messages();
	else if (strcmp(mode, "domains") == 0)
		domains(arg ? atol(arg) : 1000);
	else if (strcmp(mode, "deep") == 0)
		deep(arg ? atol(arg) : 100000);
	else if (strcmp(mode, "wide") == 0)
		wide();
	else if (strcmp(mode, "handles") == 0)
		handles();
	else if (strcmp(mode, "interleave") == 0)
		interleave();
	else if (strcmp(mode, "threads") == 0)
		threads();
	else if (strcmp(mode, "registered") == 0)
		registered();
	else if (strcmp(mode, "fork") == 0)
		do_fork();
	else if (strcmp(mode, "twocopies") == 0 && arg != NULL)
		twocopies(arg);
	else {
		fprintf(stderr, "usage: nvtx_driver MODE [ARG] (see nvtx_driver.c)\n");
		return 2;
	}
	/* Peak resident memory of this process (the kernel's high-water mark of
	 * this image, so the tests can bound what the library used). */
	FILE *st = fopen("/proc/self/status", "r");
	char line[256];
	while (st != NULL && fgets(line, sizeof line, st) != NULL)
		if (strncmp(line, "VmHWM:", 6) == 0)
			printf("driver vmhwm_kib=%ld\n", atol(line + 6));
	if (st != NULL)
		fclose(st);
	printf("driver done\n");
	return 0;
}
