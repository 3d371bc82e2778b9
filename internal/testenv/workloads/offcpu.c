// Blocks off the CPU in two functions for known times: wait_a sleeps
// (nanosleep) and wait_b reads a pipe that a helper thread writes to, in
// a 70/30 split of the time blocked, for the off-CPU tests. Built
// -O2 -fomit-frame-pointer: the callers come from .eh_frame. Prints
// "ready", starts at a line on stdin, then prints "measured wait_a <s>"
// and "measured wait_b <s>".
//
//	offcpu <rounds>
//
// With "pingpong <rate>" it is the off-CPU bench's load instead: two
// threads pass a byte back and forth through pipes, about rate switches a
// second in all (paced every 10 ms), until killed.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int ping[2], pong[2];

static void *ponger(void *arg)
{
	char c;

	(void)arg;
	while (read(ping[0], &c, 1) == 1)
		if (write(pong[1], &c, 1) != 1)
			break;
	return NULL;
}

// pingpong makes rate switches a second: each round trip blocks each
// thread once.
static int pingpong(long rate)
{
	pthread_t th;
	struct timespec next;
	long per_tick = rate / 100 / 2;
	char c = 'x';

	if (pipe(ping) || pipe(pong) || pthread_create(&th, NULL, ponger, NULL))
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (;;) {
		for (long i = 0; i < per_tick; i++)
			if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
				return 1;
		next.tv_nsec += 10000000;
		if (next.tv_nsec >= 1000000000) {
			next.tv_nsec -= 1000000000;
			next.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
	}
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 300;
	double a = 0, b = 0;
	pthread_t th;
	char go;

	if (argc > 2 && strcmp(argv[1], "pingpong") == 0)
		return pingpong(atol(argv[2]));
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
