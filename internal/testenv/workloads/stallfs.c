// stallfs: a FUSE file system that never answers a read, for the hostile
// job tests (e2e). It serves one regular file, /bait (1 MiB, read-only):
// lookups, attributes and opens are answered, so a process can open and
// mmap the file, but no read is ever answered. A page of it that the
// kernel must fetch (a page fault, in the process or in process_vm_readv
// reading the process) waits for as long as this daemon lives.
//
// Each read it leaves unanswered is logged on stderr.
//
// Usage: stallfs FD, with FD the /dev/fuse descriptor of a mount made
// with fd=FD, as fusermount hands its caller (the e2e test does what
// fusermount does: /dev/fuse is root's here). It runs until the mount
// goes away or it is killed; killing it aborts the connection, and every
// read it left waiting fails.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { BAIT_INODE = 2, BAIT_SIZE = 1 << 20 };

static int dev;

static void reply(uint64_t unique, int error, const void *body, size_t len) {
	char buf[sizeof(struct fuse_out_header) + 4096];
	struct fuse_out_header h = {.len = sizeof h + (error ? 0 : len), .error = -error, .unique = unique};
	memcpy(buf, &h, sizeof h);
	if (!error && len) {
		memcpy(buf + sizeof h, body, len);
	}
	// ENOENT: the request was interrupted meanwhile; nothing to do.
	if (write(dev, buf, h.len) < 0 && errno != ENOENT) {
		perror("stallfs: write");
	}
}

static void attr(uint64_t ino, struct fuse_attr *a) {
	memset(a, 0, sizeof *a);
	a->ino = ino;
	a->uid = getuid();
	a->gid = getgid();
	a->blksize = 4096;
	if (ino == FUSE_ROOT_ID) {
		a->mode = S_IFDIR | 0755;
		a->nlink = 2;
	} else {
		a->mode = S_IFREG | 0444;
		a->nlink = 1;
		a->size = BAIT_SIZE;
		a->blocks = BAIT_SIZE / 512;
	}
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: stallfs FD\n");
		return 2;
	}
	dev = atoi(argv[1]);
	static char buf[FUSE_MIN_READ_BUFFER + (1 << 20)];
	for (;;) {
		ssize_t n = read(dev, buf, sizeof buf);
		if (n < 0) {
			if (errno == EINTR || errno == ENOENT || errno == EAGAIN) {
				continue;
			}
			if (errno != ENODEV) { // ENODEV: unmounted
				perror("stallfs: read");
			}
			return 0;
		}
		if ((size_t)n < sizeof(struct fuse_in_header)) {
			continue;
		}
		struct fuse_in_header *in = (struct fuse_in_header *)buf;
		const char *arg = buf + sizeof *in;
		switch (in->opcode) {
		case FUSE_INIT: {
			const struct fuse_init_in *ii = (const void *)arg;
			struct fuse_init_out o = {.major = FUSE_KERNEL_VERSION,
			                          .minor = ii->minor < FUSE_KERNEL_MINOR_VERSION ? ii->minor : FUSE_KERNEL_MINOR_VERSION,
			                          .max_readahead = ii->max_readahead,
			                          .max_background = 16,
			                          .congestion_threshold = 12,
			                          .max_write = 4096,
			                          .time_gran = 1};
			reply(in->unique, 0, &o, sizeof o);
			break;
		}
		case FUSE_LOOKUP: {
			if (in->nodeid != FUSE_ROOT_ID || strcmp(arg, "bait") != 0) {
				reply(in->unique, ENOENT, NULL, 0);
				break;
			}
			struct fuse_entry_out o = {.nodeid = BAIT_INODE, .generation = 1, .entry_valid = 3600, .attr_valid = 3600};
			attr(BAIT_INODE, &o.attr);
			reply(in->unique, 0, &o, sizeof o);
			break;
		}
		case FUSE_GETATTR: {
			struct fuse_attr_out o = {.attr_valid = 3600};
			attr(in->nodeid, &o.attr);
			reply(in->unique, 0, &o, sizeof o);
			break;
		}
		case FUSE_OPEN:
		case FUSE_OPENDIR: {
			struct fuse_open_out o = {.fh = 1};
			reply(in->unique, 0, &o, sizeof o);
			break;
		}
		case FUSE_READ: {
			// Never answered: the point of it. Said on stderr, so that a
			// test can tell whether anything faulted the file in.
			const struct fuse_read_in *ri = (const void *)arg;
			fprintf(stderr, "stallfs: read of %u bytes at %llu, not answered\n", ri->size, (unsigned long long)ri->offset);
			break;
		}
		case FUSE_READDIR:
			reply(in->unique, 0, NULL, 0); // an empty directory
			break;
		case FUSE_STATFS: {
			struct fuse_statfs_out o = {.st = {.bsize = 4096, .namelen = 255, .frsize = 4096}};
			reply(in->unique, 0, &o, sizeof o);
			break;
		}
		case FUSE_FLUSH:
		case FUSE_RELEASE:
		case FUSE_RELEASEDIR:
		case FUSE_ACCESS:
			reply(in->unique, 0, NULL, 0);
			break;
		case FUSE_FORGET:
		case FUSE_BATCH_FORGET:
		case FUSE_INTERRUPT:
			break; // no reply expected (an interrupted read stays unanswered)
		case FUSE_DESTROY:
			reply(in->unique, 0, NULL, 0);
			return 0;
		default:
			reply(in->unique, ENOSYS, NULL, 0);
		}
	}
}
