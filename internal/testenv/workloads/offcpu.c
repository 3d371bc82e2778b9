// Blocks off the CPU in two functions for known times: wait_a sleeps
// (nanosleep) and wait_b reads a pipe that a helper thread writes to, in
// a 70/30 split of the time blocked, for the off-CPU tests. Built
// -O2 -fomit-frame-pointer: the callers come from .eh_frame. Prints
// "ready", starts at a line on stdin, then prints "measured wait_a <s>"
// and "measured wait_b <s>".
//
//	offcpu <rounds>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int fds[2], ack[2];

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void nap(long ns)
{
	struct timespec ts = { 0, ns };

	while (nanosleep(&ts, &ts) != 0)
		;
}

// The writer waits to be asked, sleeps 3 ms, then writes one byte.
static void *writer(void *arg)
{
	char c;

	(void)arg;
	while (read(ack[0], &c, 1) == 1) {
		nap(3000000);
		if (write(fds[1], "x", 1) != 1)
			break;
	}
	return NULL;
}

__attribute__((noinline)) double wait_a(void)
{
	double t0 = now();

	nap(7000000);
	return now() - t0;
}

__attribute__((noinline)) double wait_b(void)
{
	char c;
	double t0 = now();

	if (write(ack[1], "g", 1) != 1 || read(fds[0], &c, 1) != 1)
		exit(2);
	return now() - t0;
}

__attribute__((noinline)) void run(int rounds, double *a, double *b)
{
	for (int i = 0; i < rounds; i++) {
		*a += wait_a();
		*b += wait_b();
	}
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 300;
	double a = 0, b = 0;
	pthread_t th;
	char go;

	if (pipe(fds) || pipe(ack) || pthread_create(&th, NULL, writer, NULL))
		return 1;
	printf("ready\n");
	fflush(stdout);
	if (read(0, &go, 1) != 1)
		return 1;
	run(rounds, &a, &b);
	printf("measured wait_a %f\nmeasured wait_b %f\n", a, b);
	fflush(stdout);
	return 0;
}
