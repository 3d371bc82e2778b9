/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TEST PROGRAM for e2e/hostile_test.go: what a hostile job does to the
 * agent, run as an unprivileged user inside a (simulated) SLURM job. Each
 * mode plants its files, prints "ready", then spins (a quarter of a CPU)
 * until killed: CPU
 * samples are what make the agent look at the files.
 *
 *   hostile innocent            spin in innocent_spin (the other job)
 *   hostile jit MODE [ARG...]   spin in anonymous executable memory at
 *                               JIT_ADDR (what a JIT does), after planting
 *                               /tmp/perf-<pid>.map as MODE says:
 *       fifo                    a FIFO
 *       symlink TARGET          a symbolic link to TARGET
 *       device                  a character device (/dev/null), in a
 *                               mount namespace of its own (an
 *                               unprivileged user namespace): what the
 *                               agent finds behind /proc/<pid>/root
 *       link FILE               a hard link to FILE (a big perf map)
 *       churn FILE1 FILE2       FILE1, then a thread that replaces it by
 *                               FILE2, FILE1, ... (a new inode each time)
 *   hostile bigmap FILE MIB     write FILE: MIB MiB of perf map lines
 *   hostile mapfifo PATH        copy itself to PATH, map it executable,
 *                               unlink it and put a FIFO at PATH
 *   hostile lie SRC DST KIND    copy ELF file SRC to DST with its headers
 *                               lying (KIND: symtab, dynsym, strtab,
 *                               gopclntab, shstrtab (the section names):
 *                               the section claims 1 GiB, the file is
 *                               extended, sparse, to hold it;
 *                               nfunc: the Go pclntab claims 100 million
 *                               functions), then exit
 *   hostile map FILE...         map each FILE executable, then spin
 *   hostile mappings N          map N executable pages apart from each
 *                               other (N mappings, each an LPM entry of the
 *                               unwinder), then run 20 ms in every 200,
 *                               in code in the last page (x86-64): a
 *                               process read before its last mapping
 *                               meets unknown code and is read again
 *   hostile gpu LIB victim      dlopen the injection library LIB: announce
 *                               and launch victim_kernel, report its
 *                               records (1 ms of GPU time each), in a loop
 *   hostile gpu LIB forge       the same library, forged records: any name
 *                               id, device and duration, as fast as it can
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define JIT_ADDR 0x7e0000000000UL
#define MAPPINGS_ADDR 0x7d0000000000UL
#define GIB (1UL << 30)

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static volatile unsigned long sink;

/* The spinners (the innocent job, and an attacker's JIT code) run SPIN_MS
 * of CPU in every SPIN_MS + REST_US: sampled in every interval, yet the
 * thirteen of one attack leave the host's CPUs to the agent and to the
 * tests beside them (spinning flat out, they held both CPUs). */
#define SPIN_MS 5
#define REST_US 15000

static long cpu_ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

__attribute__((noinline)) void innocent_spin(void)
{
	for (;;) {
		struct timespec t0;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
		do {
			for (unsigned long i = 0; i < (1UL << 14); i++)
				sink += i ^ (sink >> 3);
		} while (cpu_ms_since(&t0) < SPIN_MS);
		usleep(REST_US);
	}
}

/* burst runs ms of CPU time. */
__attribute__((noinline)) void burst(long ms)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	do {
		for (unsigned long i = 0; i < (1UL << 16); i++)
			sink += i ^ (sink >> 3);
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

/* spin_code: mov ecx, 0x100000; 1: dec ecx; jnz 1b; ret */
static const unsigned char spin_code[] = { 0xb9, 0x00, 0x00, 0x10, 0x00, 0xff, 0xc9, 0x75, 0xfc, 0xc3 };

/* burst_in runs ms of CPU time in code (spin_code). */
static void burst_in(void (*code)(void), long ms)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	do {
		code();
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

static void ready(void)
{
	printf("ready\n");
	fflush(stdout);
}

/* jit_spin runs spin_code in anonymous executable memory, as the
 * spinners do (SPIN_MS in every SPIN_MS + REST_US). */
static void jit_spin(void)
{
	unsigned char *code = mmap((void *)JIT_ADDR, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (code == MAP_FAILED)
		die("mmap jit");
	memcpy(code, spin_code, sizeof(spin_code));
	ready();
	for (;;) {
		burst_in((void (*)(void))code, SPIN_MS);
		usleep(REST_US);
	}
}

static char perfmap[64];

struct churn {
	const char *a, *b;
};

static void *churn_loop(void *arg)
{
	struct churn *c = arg;
	char tmp[80];
	snprintf(tmp, sizeof tmp, "%s.tmp", perfmap);
	for (int i = 0;; i++) {
		unlink(tmp);
		if (link(i % 2 ? c->b : c->a, tmp) != 0 || rename(tmp, perfmap) != 0)
			die("churn");
		usleep(20000);
	}
	return NULL;
}

static int copy_file(const char *src, const char *dst)
{
	int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	if (in < 0 || out < 0)
		return -1;
	char buf[1 << 16];
	ssize_t n;
	while ((n = read(in, buf, sizeof buf)) > 0)
		if (write(out, buf, (size_t)n) != n)
			return -1;
	close(in);
	return close(out);
}

/* lie copies the ELF64 file src to dst with one of its claims inflated. */
static void lie(const char *src, const char *dst, const char *kind)
{
	if (copy_file(src, dst) != 0)
		die("copy");
	int fd = open(dst, O_RDWR);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0)
		die(dst);
	unsigned char *b = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (b == MAP_FAILED)
		die("mmap");
	Elf64_Ehdr *eh = (Elf64_Ehdr *)b;
	Elf64_Shdr *sh = (Elf64_Shdr *)(b + eh->e_shoff);
	const char *names = (const char *)b + sh[eh->e_shstrndx].sh_offset;
	Elf64_Shdr *target = NULL;
	for (int i = 0; i < eh->e_shnum; i++) {
		const char *n = names + sh[i].sh_name;
		if ((!strcmp(kind, "symtab") && sh[i].sh_type == SHT_SYMTAB) ||
		    (!strcmp(kind, "dynsym") && sh[i].sh_type == SHT_DYNSYM) ||
		    (!strcmp(kind, "strtab") && sh[i].sh_type == SHT_SYMTAB) ||
		    ((!strcmp(kind, "gopclntab") || !strcmp(kind, "nfunc")) && !strcmp(n, ".gopclntab")) ||
		    (!strcmp(kind, "shstrtab") && i == eh->e_shstrndx))
			target = &sh[i];
	}
	if (target == NULL) {
		fprintf(stderr, "%s: no section for %s\n", src, kind);
		exit(1);
	}
	if (!strcmp(kind, "strtab"))
		target = &sh[target->sh_link];
	off_t end = st.st_size;
	if (!strcmp(kind, "nfunc")) {
		/* Header word 1 (after magic, pad, quantum, ptrsize) is nfunc. */
		*(uint64_t *)(b + target->sh_offset + 8) = 100000000;
	} else {
		target->sh_offset = ((uint64_t)st.st_size + 4095) & ~4095UL;
		target->sh_size = GIB;
		end = (off_t)(target->sh_offset + GIB);
	}
	munmap(b, (size_t)st.st_size);
	if (ftruncate(fd, end) != 0) /* holes: no disk */
		die("ftruncate");
	close(fd);
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 14695981039346656037ULL; /* FNV-1a 64 offset basis */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

/* The markers' record, as in gpuinject/slurmscope_inject.h. */
struct record {
	uint64_t correlation_id, start_ns, end_ns, name_id;
	uint32_t device_id, context_id, stream_id, gpu_instance_id, sampled, pad;
};
_Static_assert(sizeof(struct record) == 56, "record ABI");

static void gpu(const char *lib, const char *mode)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		exit(1);
	}
	void (*name)(uint64_t, const char *, uint32_t) = (void (*)(uint64_t, const char *, uint32_t))dlsym(h, "slurmscope_kernel_name");
	void (*launch)(uint64_t, uint64_t, uint32_t, uint32_t) = (void (*)(uint64_t, uint64_t, uint32_t, uint32_t))dlsym(h, "slurmscope_kernel_launch");
	void (*records)(const struct record *, uint32_t) = (void (*)(const struct record *, uint32_t))dlsym(h, "slurmscope_kernel_records");
	if (!name || !launch || !records)
		die("dlsym");
	ready();
	static struct record recs[64];
	uint64_t cid = 1, x = 88172645463325252ULL;
	if (!strcmp(mode, "victim")) {
		const char *k = "victim_kernel";
		uint64_t id = fnv1a(k);
		name(id, k, (uint32_t)strlen(k));
		for (;; cid++) {
			launch(cid, id, 0, 0);
			struct record r = {.correlation_id = cid, .start_ns = 1000, .end_ns = 1000 + 1000000, .name_id = id,
					   .device_id = 0, .gpu_instance_id = 0xffffffffu, .sampled = 1};
			records(&r, 1);
			usleep(2000);
			for (unsigned long i = 0; i < (1UL << 16); i++)
				sink += i;
		}
	}
	for (;;) {
		for (int i = 0; i < 64; i++, cid++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			recs[i] = (struct record){.correlation_id = cid, .start_ns = 0, .end_ns = x % 100000 + 1,
						  .name_id = x | 1, .device_id = (uint32_t)(x >> 40) % 8,
						  .gpu_instance_id = 0xffffffffu, .sampled = (uint32_t)(x & 2)};
		}
		records(recs, 64);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return 2;
	snprintf(perfmap, sizeof perfmap, "/tmp/perf-%d.map", (int)getpid());
	const char *mode = argv[1];
	if (!strcmp(mode, "innocent")) {
		ready();
		innocent_spin();
	} else if (!strcmp(mode, "jit") && argc >= 3) {
		const char *how = argv[2];
		unlink(perfmap);
		if (!strcmp(how, "fifo")) {
			if (mkfifo(perfmap, 0644) != 0)
				die("mkfifo");
		} else if (!strcmp(how, "device")) {
			// Any user may do this where unprivileged user namespaces
			// are allowed (Debian's default): the perf map is a regular
			// file on the host and /dev/null inside the process's root.
			if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
				die("unshare");
			if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
				die("mount private");
			int fd = open(perfmap, O_WRONLY | O_CREAT | O_EXCL, 0644);
			if (fd < 0)
				die("create perf map");
			close(fd);
			if (mount("/dev/null", perfmap, NULL, MS_BIND, NULL) != 0)
				die("bind /dev/null");
		} else if (!strcmp(how, "symlink") && argc >= 4) {
			if (symlink(argv[3], perfmap) != 0)
				die("symlink");
		} else if (!strcmp(how, "link") && argc >= 4) {
			if (link(argv[3], perfmap) != 0)
				die("link");
		} else if (!strcmp(how, "churn") && argc >= 5) {
			static struct churn c;
			c.a = argv[3], c.b = argv[4];
			if (link(c.a, perfmap) != 0)
				die("link");
			pthread_t th;
			if (pthread_create(&th, NULL, churn_loop, &c) != 0)
				die("pthread_create");
		} else {
			return 2;
		}
		jit_spin();
	} else if (!strcmp(mode, "bigmap") && argc >= 4) {
		FILE *f = fopen(argv[2], "w");
		if (f == NULL)
			die(argv[2]);
		unsigned long want = strtoul(argv[3], NULL, 10) << 20, n = 0;
		for (unsigned long i = 0; n < want; i++) {
			/* ~100 bytes a line, each a distinct function, none of them
			 * covering the JIT code: every lookup misses. */
			int w = fprintf(f, "%lx 10 jit_compiled_function_%012lu_with_a_name_as_long_as_real_jits_give_them_xxxxxxxx\n",
					JIT_ADDR + 0x100000 + i * 16, i);
			if (w < 0)
				die("write");
			n += (unsigned long)w;
		}
		if (fclose(f) != 0)
			die("close");
	} else if (!strcmp(mode, "mapfifo") && argc >= 3) {
		unlink(argv[2]); // a FIFO left there would block the copy's open
		if (copy_file("/proc/self/exe", argv[2]) != 0)
			die("copy");
		int fd = open(argv[2], O_RDONLY);
		if (fd < 0 || mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED)
			die("map");
		close(fd);
		if (unlink(argv[2]) != 0 || mkfifo(argv[2], 0644) != 0)
			die("mkfifo");
		ready();
		innocent_spin();
	} else if (!strcmp(mode, "lie") && argc >= 5) {
		lie(argv[2], argv[3], argv[4]);
	} else if (!strcmp(mode, "map") && argc >= 3) {
		for (int i = 2; i < argc; i++) {
			int fd = open(argv[i], O_RDONLY);
			struct stat st;
			if (fd < 0 || fstat(fd, &st) != 0 ||
			    mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED)
				die(argv[i]);
			close(fd);
		}
		ready();
		innocent_spin();
	} else if (!strcmp(mode, "mappings") && argc >= 3) {
		unsigned long n = strtoul(argv[2], NULL, 10);
		void *last = NULL;
		for (unsigned long i = 0; i < n; i++) {
			void *at = (void *)(MAPPINGS_ADDR + i * 2 * 4096);
			int prot = PROT_READ | PROT_EXEC | (i == n - 1 ? PROT_WRITE : 0);
			if ((last = mmap(at, 4096, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0)) == MAP_FAILED)
				die("mmap");
		}
		if (!last)
			die("mappings: N");
		memcpy(last, spin_code, sizeof(spin_code));
		ready();
		for (;;) {
			burst_in((void (*)(void))last, 20);
			usleep(180000);
		}
	} else if (!strcmp(mode, "gpu") && argc >= 4) {
		gpu(argv[2], argv[3]);
	} else {
		return 2;
	}
	return 0;
}
