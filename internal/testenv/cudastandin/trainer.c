/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TEST STAND-IN: a pretend training program. It launches named kernels
 * through the stand-in CUDA runtime from distinctive call paths, so a
 * profiler can check which CPU stack each kernel's GPU time lands under:
 *
 *   main -> train_step -> forward  -> launch_gemm   gemm_kernel, and a long
 *                                                   C++-mangled elementwise kernel
 *   main -> train_step -> backward -> launch_reduce reduce_kernel (driver API)
 *   with --coop:  backward -> launch_allreduce      allreduce_kernel (cooperative)
 *   with --graph: train_step -> launch_graph        graph of graph_gemm_kernel +
 *                                                   graph_reduce_kernel
 *   with --flood N: main -> flood                   N x flood_kernel
 *
 * Built with -O1 -fno-omit-frame-pointer -fno-inline so those frames exist.
 * Usage: trainer [--steps N] [--seconds S] [--coop] [--graph] [--flood N]
 *                [--wait-records S]
 * (--seconds S: run steps until S seconds passed; --steps bounds it too.
 * --wait-records S: after the steps, wait until the injection library has
 * been handed at least one kernel record by the mock CUPTI, at most S
 * seconds, print "trainer records_before_exit=<0|1>", then run one more
 * train_step, so its launches follow those records in the library's trace.)
 * --user-profiler N:M:K: the user profiles part of the run with their own
 * CUPTI client (libkineto_standin.so, dlopened from the trainer's directory):
 * N x before_kernel, kineto_standin_start, M x profiled_kernel,
 * (holding the profiler --profiler-hold S seconds more), kineto_standin_stop,
 * K x after_kernel; prints "trainer profiler_subscribe=<result>
 * window_ns=<ns from before the start to after the stop, CLOCK_MONOTONIC>".
 * --profiler-early loads the stand-in before
 * CUDA is initialised (so before the injection library), otherwise it is
 * loaded just before it starts.
 * Prints "trainer tid=<tid>" first and "trainer done launches=<n>" last.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "standin_cudart.h"

#define ELEMENTWISE "_ZN2at6native18elementwise_kernelILi128ELi4EEEviT1_"

static int use_coop, use_graph;
static unsigned long launches;

void launch_gemm(int step)
{
	(void)step;
	standin_launch("gemm_kernel", 0);
	standin_launch(ELEMENTWISE, 0);
	launches += 2;
}

void launch_reduce(int step)
{
	(void)step;
	standin_launch_driver("reduce_kernel", 0);
	launches++;
}

void launch_allreduce(int step)
{
	(void)step;
	standin_launch_cooperative("allreduce_kernel", 0);
	launches++;
}

void launch_graph(int step)
{
	static const char *const graph[] = {"graph_gemm_kernel", "graph_reduce_kernel"};
	(void)step;
	standin_graph_launch(graph, 2, 0);
	launches += 2;
}

void forward(int step) { launch_gemm(step); }

void backward(int step)
{
	launch_reduce(step);
	if (use_coop)
		launch_allreduce(step);
}

void train_step(int step)
{
	forward(step);
	backward(step);
	if (use_graph)
		launch_graph(step);
}

void flood(long n)
{
	for (long i = 0; i < n; i++)
		standin_launch("flood_kernel", 0);
	launches += (unsigned long)n;
}

struct profiler {
	int (*start)(void);
	int (*stop)(void);
};

static struct profiler load_profiler(void)
{
	/* A bare name: found through the trainer's DT_RUNPATH ($ORIGIN). */
	void *h = dlopen("libkineto_standin.so", RTLD_NOW | RTLD_LOCAL);
	struct profiler p = {0, 0};
	if (h == NULL) {
		fprintf(stderr, "trainer: %s\n", dlerror());
		exit(3);
	}
	p.start = (int (*)(void))dlsym(h, "kineto_standin_start");
	p.stop = (int (*)(void))dlsym(h, "kineto_standin_stop");
	if (p.start == NULL || p.stop == NULL) {
		fprintf(stderr, "trainer: libkineto_standin.so lacks start/stop\n");
		exit(3);
	}
	return p;
}

void launch_n(const char *kernel, long n)
{
	for (long i = 0; i < n; i++)
		standin_launch(kernel, 0);
	launches += (unsigned long)n;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void user_profiled_run(long n, long m, long k, int early, double hold)
{
	struct profiler p = {0, 0};
	if (early)
		p = load_profiler();
	standin_init();
	launch_n("before_kernel", n);
	if (!early)
		p = load_profiler();
	double w0 = now_s();
	int r = p.start();
	launch_n("profiled_kernel", m);
	if (hold > 0) {
		struct timespec ts = {(time_t)hold, (long)((hold - (double)(time_t)hold) * 1e9)};
		while (nanosleep(&ts, &ts) != 0)
			;
	}
	p.stop();
	double w1 = now_s();
	printf("trainer profiler_subscribe=%d window_ns=%.0f\n", r, (w1 - w0) * 1e9);
	fflush(stdout);
	launch_n("after_kernel", k);
}

int main(int argc, char **argv)
{
	long steps = -1, flood_n = 0, prof_n = -1, prof_m = 0, prof_k = 0;
	int prof_early = 0;
	double seconds = -1, wait_records = -1, prof_hold = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
			steps = atol(argv[++i]);
		else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (strcmp(argv[i], "--wait-records") == 0 && i + 1 < argc)
			wait_records = atof(argv[++i]);
		else if (strcmp(argv[i], "--flood") == 0 && i + 1 < argc)
			flood_n = atol(argv[++i]);
		else if (strcmp(argv[i], "--user-profiler") == 0 && i + 1 < argc &&
		         sscanf(argv[i + 1], "%ld:%ld:%ld", &prof_n, &prof_m, &prof_k) == 3) {
			i++;
			steps = 0;
		} else if (strcmp(argv[i], "--profiler-early") == 0)
			prof_early = 1;
		else if (strcmp(argv[i], "--profiler-hold") == 0 && i + 1 < argc)
			prof_hold = atof(argv[++i]);
		else if (strcmp(argv[i], "--coop") == 0)
			use_coop = 1;
		else if (strcmp(argv[i], "--graph") == 0)
			use_graph = 1;
		else {
			fprintf(stderr, "usage: trainer [--steps N] [--seconds S] [--coop] [--graph] [--flood N] "
			                "[--wait-records S] [--user-profiler N:M:K [--profiler-early]]\n");
			return 2;
		}
	}
	if (steps < 0 && seconds < 0)
		steps = 100;
	printf("trainer tid=%ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);

	if (prof_n >= 0)
		user_profiled_run(prof_n, prof_m, prof_k, prof_early, prof_hold);
	standin_init();
	double t0 = now_s();
	for (long s = 0; steps < 0 || s < steps; s++) {
		if (seconds >= 0 && now_s() - t0 >= seconds)
			break;
		train_step((int)s);
	}
	if (wait_records >= 0) {
		/* The bound only keeps a broken flush from hanging the caller;
		 * nothing is concluded from how long this takes. */
		double w0 = now_s();
		struct timespec ts = {0, 5 * 1000 * 1000};
		while (standin_records_delivered() == 0 && now_s() - w0 < wait_records)
			nanosleep(&ts, NULL);
		printf("trainer records_before_exit=%d\n", standin_records_delivered() > 0);
		fflush(stdout);
		train_step(-1);
	}
	if (flood_n > 0)
		flood(flood_n);
	printf("trainer done launches=%lu\n", launches);
	return 0;
}
