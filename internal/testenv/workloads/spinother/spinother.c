/*
 * spinother: burn one CPU for N seconds (argv[1], default 10) in a
 * function whose name appears in no other workload, so a profile that
 * shows it under another job's id has mixed two jobs up.
 *
 * Build: gcc -O1 -fno-omit-frame-pointer -fno-inline -g -o spinother spinother.c
 */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long counter;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void spin_other_job(void)
{
	for (unsigned long i = 0; i < 1000000UL; i++)
		counter++;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 10;
	double end = now() + secs;

	while (now() < end)
		spin_other_job();
	return 0;
}
