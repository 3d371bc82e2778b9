// A parallel job's rank for the rank tests: every rank spends the same CPU
// time in work_common, and rank r (SLURM_PROCID, or RANK where a launcher
// set it) spends (r + 1) times the base in work_rank, so rank 1 is the
// straggler in work_rank. Built -O2 -fomit-frame-pointer. Prints
// "rank <r> work_common <s> work_rank <s>": the CPU it measured in each.
//
//	ranks <base seconds>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static volatile unsigned long sink;

// spin burns secs of the thread's CPU time, inlined: the time is its
// caller's own.
static inline __attribute__((always_inline)) double spin(double secs)
{
	double t0 = cpu(), t;

	do {
		for (unsigned long i = 0; i < 100000; i++)
			sink += i ^ (sink >> 3);
		t = cpu();
	} while (t - t0 < secs);
	return t - t0;
}

__attribute__((noinline)) double work_common(double secs) { return spin(secs); }
__attribute__((noinline)) double work_rank(double secs) { return spin(secs); }

int main(int argc, char **argv)
{
	double base = argc > 1 ? atof(argv[1]) : 1;
	const char *r = getenv("RANK");
	int rank;

	if (!r)
		r = getenv("SLURM_PROCID");
	rank = r ? atoi(r) : 0;
	double c = 0, w = 0;

	// Rounds, so that both functions run all along.
	for (int i = 0; i < 20; i++) {
		c += work_common(base / 20);
		w += work_rank(base * (rank + 1) / 20);
	}
	printf("rank %d work_common %f work_rank %f\n", rank, c, w);
	return 0;
}
