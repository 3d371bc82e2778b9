/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TEST PROGRAM for the agent's uprobes (agent/gputrace). It dlopens an
 * injection library (argv[1]) and calls its three marker functions directly,
 * from distinctive call paths, under the test's control:
 *
 *   markercall LIB script   read commands from stdin, one per line:
 *     name ID TEXT              slurmscope_kernel_name(ID, TEXT, strlen(TEXT))
 *     rawname ID LEN HEXBYTES   name with arbitrary bytes and a claimed LEN
 *     badname ID LEN            name pointer that is not mapped
 *     launch CID NAMEID DEV FLAGS   from outer_launch -> inner_launch
 *     launch2 CID NAMEID DEV FLAGS  from other_path
 *     rec CID NAMEID DEV NS SAMPLED  queue one record (start=1000, end=1000+NS)
 *     flush                     slurmscope_kernel_records(queued, n)
 *     badrecs N                 slurmscope_kernel_records(NULL-ish, N)
 *     sync                      print "ok"
 *     exit                      exit(0) at once (records still queued are lost)
 *   markercall LIB bench N      time N launch marker calls; print "ns_per_call=X"
 *
 * Prints "ready" once the library is loaded. Frame pointers and no inlining
 * keep outer_launch / inner_launch / other_path as real frames.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "slurmscope_inject.h"

typedef void (*name_fn)(uint64_t, const char *, uint32_t);
typedef void (*launch_fn)(uint64_t, uint64_t, uint32_t, uint32_t);
typedef void (*records_fn)(const struct slurmscope_kernel_record *, uint32_t);

static name_fn do_name;
static launch_fn do_launch;
static records_fn do_records;

__attribute__((noinline)) void inner_launch(uint64_t cid, uint64_t nid, uint32_t dev, uint32_t flags)
{
	do_launch(cid, nid, dev, flags);
	__asm__ __volatile__("" ::: "memory");
}

__attribute__((noinline)) void outer_launch(uint64_t cid, uint64_t nid, uint32_t dev, uint32_t flags)
{
	inner_launch(cid, nid, dev, flags);
	__asm__ __volatile__("" ::: "memory");
}

__attribute__((noinline)) void other_path(uint64_t cid, uint64_t nid, uint32_t dev, uint32_t flags)
{
	do_launch(cid, nid, dev, flags);
	__asm__ __volatile__("" ::: "memory");
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	do_name = (name_fn)dlsym(h, "slurmscope_kernel_name");
	do_launch = (launch_fn)dlsym(h, "slurmscope_kernel_launch");
	do_records = (records_fn)dlsym(h, "slurmscope_kernel_records");
	if (!do_name || !do_launch || !do_records)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (strcmp(argv[2], "bench") == 0 && argc > 3) {
		long n = atol(argv[3]);
		double t0 = now_ns();
		for (long i = 0; i < n; i++)
			outer_launch((uint64_t)i + 1, 1, 0, 0);
		printf("ns_per_call=%.1f\n", (now_ns() - t0) / (double)n);
		return 0;
	}

	static struct slurmscope_kernel_record q[SLURMSCOPE_RECORDS_MAX];
	uint32_t nq = 0;
	static char line[4096], buf[2048];
	printf("ready\n");
	while (fgets(line, sizeof line, stdin) != NULL) {
		unsigned long long a, b, c, d, e;
		char text[2048];
		if (sscanf(line, "name %llx %2047s", &a, text) == 2) {
			do_name(a, text, (uint32_t)strlen(text));
		} else if (sscanf(line, "rawname %llx %llu %2047s", &a, &b, text) == 3) {
			size_t n = strlen(text) / 2;
			for (size_t i = 0; i < n && i < sizeof buf; i++)
				buf[i] = (char)(hexval(text[2 * i]) << 4 | hexval(text[2 * i + 1]));
			do_name(a, buf, (uint32_t)b);
		} else if (sscanf(line, "badname %llx %llu", &a, &b) == 2) {
			do_name(a, (const char *)(uintptr_t)16, (uint32_t)b);
		} else if (sscanf(line, "launch %llu %llx %llu %llu", &a, &b, &c, &d) == 4) {
			outer_launch(a, b, (uint32_t)c, (uint32_t)d);
		} else if (sscanf(line, "launch2 %llu %llx %llu %llu", &a, &b, &c, &d) == 4) {
			other_path(a, b, (uint32_t)c, (uint32_t)d);
		} else if (sscanf(line, "rec %llu %llx %llu %llu %llu", &a, &b, &c, &d, &e) == 5) {
			if (nq == SLURMSCOPE_RECORDS_MAX) {
				do_records(q, nq);
				nq = 0;
			}
			q[nq++] = (struct slurmscope_kernel_record){
				.correlation_id = a, .start_ns = 1000, .end_ns = 1000 + d, .name_id = b,
				.device_id = (uint32_t)c, .gpu_instance_id = SLURMSCOPE_GPU_INSTANCE_NONE,
				.sampled = (uint32_t)e};
		} else if (strncmp(line, "flush", 5) == 0) {
			if (nq > 0)
				do_records(q, nq);
			nq = 0;
		} else if (sscanf(line, "badrecs %llu", &a) == 1) {
			do_records(a > 64 ? q : (const struct slurmscope_kernel_record *)(uintptr_t)16, (uint32_t)a);
		} else if (strncmp(line, "sync", 4) == 0) {
			printf("ok\n");
		} else if (strncmp(line, "exit", 4) == 0) {
			_Exit(0);
		} else {
			fprintf(stderr, "bad command: %s", line);
			return 2;
		}
	}
	return 0;
}
