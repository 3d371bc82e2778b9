/*
 * cpusplit: burn N seconds of CPU time (argv[1], default 10) in two
 * functions with a known split of CPU time, for checking a profiler's
 * attribution end to end. CPU time, not wall time: on a busy host the
 * process takes longer but gets the samples it is expected to.
 *
 * Expected split: hot_a 75 %, hot_b 25 % of the CPU time the two spend,
 * within a point or two. Both run the same loop body (one increment of a
 * volatile counter, bound by the store-to-load round trip through memory)
 * and each round hot_a does HOT_A_ITERS iterations and hot_b HOT_B_ITERS,
 * 3:1. Splitting by work rather than by reading a clock keeps the split
 * independent of how much CPU the process gets, and keeps clock reads and
 * system calls (which would land in the kernel or libc) out of the leaves.
 * A round lasts about a millisecond, far longer than a call, so the calls
 * themselves do not move the split. Its length is drawn at random (20,000
 * to 180,000 hot_b iterations): rounds of one fixed length would beat
 * against a fixed sampling period, and a profiler sampling at 97 Hz would
 * then see the same few phases of the round again and again, skewing the
 * split by several points either way. And a round is short beside the CPU
 * time between two samples (10 ms at 97 Hz, 2-3 ms of this process's CPU
 * on a host where it gets a third of a CPU): with rounds of several
 * milliseconds, the next sample often fell in the same call as the last,
 * the samples were not independent, and the split of ~400 samples varied
 * by twice the binomial error (a 67.5 % run in CI).
 *
 * Build: gcc -O1 -fno-omit-frame-pointer -fno-inline -g -o cpusplit cpusplit.c
 * (frame pointers so a frame-pointer unwinder sees main below hot_a/hot_b).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MIN_ITERS 20000UL
#define SPAN_ITERS 160000UL

static volatile unsigned long counter;

/* aligned: both loops start on a cache-line boundary, so neither pays for
 * a loop that straddles one. */
__attribute__((noinline, aligned(64))) void hot_a(unsigned long n)
{
	for (unsigned long i = 0; i < 3 * n; i++)
		counter++;
}

__attribute__((noinline, aligned(64))) void hot_b(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		counter++;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10;
	double end = now() + secs;
	unsigned long rounds = 0;
	unsigned long long x = (unsigned long long)time(NULL) * 2654435761ULL | 1;

	while (now() < end) {
		/* xorshift64: any cheap generator does; only the phase matters */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		unsigned long n = MIN_ITERS + x % SPAN_ITERS;
		hot_a(n);
		hot_b(n);
		rounds++;
	}
	printf("cpusplit: %lu rounds in %.1f s\n", rounds, secs);
	return 0;
}
