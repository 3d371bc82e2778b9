// cgv2shim: an LD_PRELOAD library for slurmscope's real-SLURM integration
// tests. It exists ONLY to adapt a hybrid-cgroup test host (cgroup v1
// controllers plus a cgroup2 mount at /sys/fs/cgroup/unified) so that
// Slurm's cgroup/v2 plugin will run there. It is never used on a real
// cluster, never shipped, and never loaded into the agent.
//
// On a hybrid host /proc/<pid>/cgroup has one line per v1 hierarchy plus the
// "0::<path>" line of cgroup2. Slurm's cgroup/v2 plugin expects a pure v2
// host, where that file holds exactly one "0::" line, and refuses to run
// otherwise. The shim makes every open of /proc/{self,thread-self,<pid>}
// [/task/<tid>]/cgroup return just the "0::" line, through an anonymous
// memfd holding the filtered text. Everything else passes through untouched.
//
// The harness (internal/testenv/slurmtest) compiles this file with the
// system cc at run time and sets LD_PRELOAD for slurmd only; slurmstepd
// inherits it from slurmd. Job tasks get the submitter's environment, not
// slurmd's.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef FILE *(*fopen_fn)(const char *, const char *);

// is_proc_cgroup reports whether path names a /proc/.../cgroup file.
static int is_proc_cgroup(const char *path) {
	const char *p;
	if (!path || strncmp(path, "/proc/", 6) != 0)
		return 0;
	p = path + 6;
	if (strncmp(p, "self/", 5) == 0) {
		p += 5;
	} else if (strncmp(p, "thread-self/", 12) == 0) {
		p += 12;
	} else {
		if (*p < '0' || *p > '9')
			return 0;
		while (*p >= '0' && *p <= '9')
			p++;
		if (*p++ != '/')
			return 0;
	}
	if (strncmp(p, "task/", 5) == 0) {
		p += 5;
		if (*p < '0' || *p > '9')
			return 0;
		while (*p >= '0' && *p <= '9')
			p++;
		if (*p++ != '/')
			return 0;
	}
	return strcmp(p, "cgroup") == 0;
}

// filtered opens path with the real open and returns a memfd holding only
// its "0::" line(s), or -1 with errno set as the real open would.
static int filtered(const char *path) {
	static open_fn real_open;
	char buf[65536];
	size_t n = 0;
	ssize_t r;
	int in, out;
	char *line, *save;

	if (!real_open)
		real_open = (open_fn)dlsym(RTLD_NEXT, "open");
	in = real_open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -1;
	while (n < sizeof(buf) - 1 && (r = read(in, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	close(in);
	buf[n] = '\0';

	out = memfd_create("cgv2shim", MFD_CLOEXEC);
	if (out < 0)
		return -1;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "0::", 3) == 0) {
			size_t len = strlen(line);
			if (write(out, line, len) != (ssize_t)len || write(out, "\n", 1) != 1) {
				close(out);
				errno = EIO;
				return -1;
			}
		}
	}
	lseek(out, 0, SEEK_SET);
	return out;
}

static int wants_filter(const char *path, int flags) {
	return (flags & O_ACCMODE) == O_RDONLY && is_proc_cgroup(path);
}

#define OPEN_WRAPPER(name)                                                   \
	int name(const char *path, int flags, ...) {                         \
		static open_fn real;                                         \
		mode_t mode = 0;                                             \
		if (flags & (O_CREAT | O_TMPFILE)) {                         \
			va_list ap;                                          \
			va_start(ap, flags);                                 \
			mode = va_arg(ap, mode_t);                           \
			va_end(ap);                                          \
		}                                                            \
		if (wants_filter(path, flags))                               \
			return filtered(path);                               \
		if (!real)                                                   \
			real = (open_fn)dlsym(RTLD_NEXT, #name);             \
		return real(path, flags, mode);                              \
	}

#define OPENAT_WRAPPER(name)                                                 \
	int name(int dirfd, const char *path, int flags, ...) {              \
		static openat_fn real;                                       \
		mode_t mode = 0;                                             \
		if (flags & (O_CREAT | O_TMPFILE)) {                         \
			va_list ap;                                          \
			va_start(ap, flags);                                 \
			mode = va_arg(ap, mode_t);                           \
			va_end(ap);                                          \
		}                                                            \
		if (wants_filter(path, flags))                               \
			return filtered(path);                               \
		if (!real)                                                   \
			real = (openat_fn)dlsym(RTLD_NEXT, #name);           \
		return real(dirfd, path, flags, mode);                       \
	}

#define FOPEN_WRAPPER(name)                                                  \
	FILE *name(const char *path, const char *mode) {                     \
		static fopen_fn real;                                        \
		if (mode && mode[0] == 'r' && !strchr(mode, '+') &&          \
		    is_proc_cgroup(path)) {                                  \
			int fd = filtered(path);                             \
			return fd < 0 ? NULL : fdopen(fd, "r");              \
		}                                                            \
		if (!real)                                                   \
			real = (fopen_fn)dlsym(RTLD_NEXT, #name);            \
		return real(path, mode);                                     \
	}

OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)
FOPEN_WRAPPER(fopen)
FOPEN_WRAPPER(fopen64)

// _FORTIFY_SOURCE builds call these instead of open/openat.
int __open_2(const char *path, int flags) { return open(path, flags); }
int __open64_2(const char *path, int flags) { return open64(path, flags); }
int __openat_2(int dirfd, const char *path, int flags) { return openat(dirfd, path, flags); }
int __openat64_2(int dirfd, const char *path, int flags) { return openat64(dirfd, path, flags); }
