/*
 * unwindc: C workloads for the .eh_frame unwinder (agent/unwind), built
 * without frame pointers:
 *
 *   gcc -O2 -fomit-frame-pointer -o unwindc unwindc.c
 *
 * Each mode burns argv[2] seconds of CPU time (default 10) after printing
 * "ready": CPU time, not wall time, so that a loaded machine slows it down
 * but does not thin out its samples. Functions are noinline and do work after each call, so that no
 * call becomes a tail call: every caller really is on the stack.
 *
 *   split   main -> run_split -> caller_a / caller_b -> leaf, with 70 % of
 *           leaf's work from caller_a and 30 % from caller_b. Round lengths
 *           are drawn at random (as in cpusplit.c), so that a fixed
 *           sampling period cannot beat against them; the work, not a
 *           clock, sets the split.
 *   qsort   main -> sort_rounds -> glibc qsort -> ... -> cmp_items, an
 *           expensive comparator called back through libc.
 *   signal  main -> spin_main -> spin, interrupted every millisecond by
 *           SIGPROF, whose handler on_prof -> sig_leaf burns most of the
 *           time: a stack through the kernel's signal frame (__restore_rt).
 *   vdso    main -> clock_rounds -> clock_gettime in the vDSO, which is no
 *           file: its table comes from the agent's own copy.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static volatile unsigned long sink;

/* The process's CPU time, seconds. */
static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long long rng_state;

static unsigned long next_rand(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (unsigned long)rng_state;
}

/* A frame of its own (a local array the compiler cannot keep in
 * registers), so that its CFA is not just rsp+8. */
__attribute__((noinline)) unsigned long leaf(unsigned long n)
{
	volatile unsigned long buf[16];
	unsigned long h = 1469598103934665603UL;

	for (unsigned long i = 0; i < n; i++) {
		buf[i & 15] = h;
		h = (h ^ buf[(i * 7) & 15]) * 1099511628211UL;
	}
	return h;
}

__attribute__((noinline)) unsigned long caller_a(unsigned long n)
{
	unsigned long r = leaf(7 * n);
	sink += r;
	return r + 1;
}

__attribute__((noinline)) unsigned long caller_b(unsigned long n)
{
	unsigned long r = leaf(3 * n);
	sink ^= r;
	return r + 2;
}

__attribute__((noinline)) void run_split(double secs)
{
	double end = now() + secs;
	while (now() < end) {
		unsigned long n = 20000 + next_rand() % 180000;
		sink += caller_a(n);
		sink += caller_b(n);
	}
}

struct item {
	unsigned long key;
	char pad[24];
};

__attribute__((noinline)) int cmp_items(const void *a, const void *b)
{
	const struct item *x = a, *y = b;
	unsigned long hx = x->key, hy = y->key;

	/* Expensive on purpose: most of the time is spent here. */
	for (int i = 0; i < 40; i++) {
		hx = hx * 6364136223846793005UL + 1442695040888963407UL;
		hy = hy * 6364136223846793005UL + 1442695040888963407UL;
	}
	return hx < hy ? -1 : hx > hy;
}

__attribute__((noinline)) void sort_rounds(double secs)
{
	enum { N = 4096 };
	static struct item items[N];
	double end = now() + secs;

	while (now() < end) {
		for (int i = 0; i < N; i++)
			items[i].key = next_rand();
		qsort(items, N, sizeof(items[0]), cmp_items);
		sink += items[0].key;
	}
}

__attribute__((noinline)) unsigned long sig_leaf(unsigned long n)
{
	unsigned long h = n;

	for (unsigned long i = 0; i < 3000000; i++)
		h = h * 2862933555777941757UL + 3037000493UL;
	return h;
}

static void on_prof(int sig)
{
	sink += sig_leaf(sig);
}

__attribute__((noinline)) unsigned long spin(unsigned long n)
{
	unsigned long h = n;

	for (unsigned long i = 0; i < 1000; i++)
		h = h * 6364136223846793005UL + 1;
	return h;
}

__attribute__((noinline)) void spin_main(double secs)
{
	struct sigaction sa;
	struct itimerval it = { { 0, 1000 }, { 0, 1000 } };
	double end = now() + secs;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_prof;
	sigaction(SIGPROF, &sa, NULL);
	setitimer(ITIMER_PROF, &it, NULL);
	while (now() < end)
		sink += spin(sink);
}

__attribute__((noinline)) void clock_rounds(double secs)
{
	double end = now() + secs;
	struct timespec ts;

	while (now() < end)
		for (int i = 0; i < 1000; i++) {
			clock_gettime(CLOCK_MONOTONIC, &ts);
			sink += ts.tv_nsec;
		}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "split";
	double secs = argc > 2 ? atof(argv[2]) : 10;

	rng_state = (unsigned long long)time(NULL) * 2654435761ULL | 1;
	printf("ready\n");
	fflush(stdout);
	if (strcmp(mode, "split") == 0)
		run_split(secs);
	else if (strcmp(mode, "qsort") == 0)
		sort_rounds(secs);
	else if (strcmp(mode, "signal") == 0)
		spin_main(secs);
	else if (strcmp(mode, "vdso") == 0)
		clock_rounds(secs);
	else
		return 2;
	return 0;
}
