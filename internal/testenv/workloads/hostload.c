/*
 * hostload: a job's known use of its host, the truth host metrics are
 * checked against. It allocates and touches MIB mebibytes, burns one CPU
 * until its own CPU time reaches SECONDS (however long the wall clock takes
 * on a loaded machine), holds the memory for HOLD more seconds, and prints
 * what it used by its own accounting:
 *
 *   hostload cpu_seconds=4.001 alloc_bytes=167772160 maxrss_bytes=169934848
 *
 * A MIB larger than the job's memory limit gets it OOM-killed while it
 * touches the pages, before it prints anything.
 *
 * Usage: hostload SECONDS MIB HOLD
 * Build: gcc -O1 -o hostload hostload.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double cpu_seconds(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static volatile unsigned long sink;

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: hostload SECONDS MIB HOLD\n");
		return 2;
	}
	double secs = atof(argv[1]);
	size_t bytes = (size_t)atol(argv[2]) << 20;
	unsigned hold = (unsigned)atoi(argv[3]);
	char *mem = malloc(bytes);
	if (mem == NULL) {
		perror("malloc");
		return 1;
	}
	memset(mem, 1, bytes); /* every page charged to the job now */
	while (cpu_seconds() < secs) {
		for (int i = 0; i < 100000; i++)
			sink += mem[(sink + i) % bytes];
	}
	sleep(hold);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
	printf("hostload cpu_seconds=%.6f alloc_bytes=%zu maxrss_bytes=%ld\n", cpu, bytes, ru.ru_maxrss * 1024L);
	return 0;
}
