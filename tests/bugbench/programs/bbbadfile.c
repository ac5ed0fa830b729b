/*
 * bbbadfile: a file whose reads fail with EIO, like a file over a bad disk sector -- the
 * bug benchmark's real kernel EIO, independent of the reproducer. (This kernel has no
 * device-mapper, so no dm-error target; FUSE is built in.)
 *
 *   bbbadfile FILE SIZE      (as root; FILE must be an existing regular file)
 *
 * Mounts a one-file FUSE filesystem over FILE (a FUSE root can be a regular file) and
 * serves it: stat, open and close succeed and report a file of SIZE bytes; every read
 * fails with EIO; writes fail with EROFS. The kernel's FUSE driver returns the error from
 * the read syscall itself, so a tracer sees an ordinary read() = -EIO. Opens use direct
 * I/O, so every read reaches this server (no page cache hides the error).
 *
 * Prints "bbbadfile: serving FILE" once mounted. Runs until the mount goes away
 * (`umount FILE`) or SIGTERM/SIGINT (then it unmounts FILE itself).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static int fuse_fd = -1;
static const char *target;
static uint64_t file_size;
static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void reply(uint64_t unique, int error, const void *data, size_t size)
{
	struct fuse_out_header h = { .len = sizeof(h) + (error ? 0 : size), .error = error, .unique = unique };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)data, error ? 0 : size } };
	if (writev(fuse_fd, iov, 2) < 0 && errno != ENOENT)
		perror("bbbadfile: reply");
}

static void fill_attr(struct fuse_attr *a)
{
	time_t now = time(NULL);
	memset(a, 0, sizeof(*a));
	a->ino = FUSE_ROOT_ID;
	a->size = file_size;
	a->blocks = (file_size + 511) / 512;
	a->atime = a->mtime = a->ctime = now;
	a->mode = S_IFREG | 0644;
	a->nlink = 1;
	a->blksize = 4096;
}

NOINLINE void serve_one(const struct fuse_in_header *in, const void *arg)
{
	switch (in->opcode) {
	case FUSE_INIT: {
		const struct fuse_init_in *i = arg;
		struct fuse_init_out o = { 0 };
		o.major = FUSE_KERNEL_VERSION;
		o.minor = i->minor < FUSE_KERNEL_MINOR_VERSION ? i->minor : FUSE_KERNEL_MINOR_VERSION;
		o.max_readahead = i->max_readahead;
		o.max_write = 4096;
		o.max_background = 16;
		o.congestion_threshold = 12;
		o.time_gran = 1;
		reply(in->unique, 0, &o, sizeof(o));
		break;
	}
	case FUSE_GETATTR: {
		struct fuse_attr_out o = { 0 };
		o.attr_valid = 1;
		fill_attr(&o.attr);
		reply(in->unique, 0, &o, sizeof(o));
		break;
	}
	case FUSE_OPEN: {
		const struct fuse_open_in *i = arg;
		if ((i->flags & O_ACCMODE) != O_RDONLY) {
			reply(in->unique, -EROFS, NULL, 0);
			break;
		}
		struct fuse_open_out o = { .fh = 1, .open_flags = FOPEN_DIRECT_IO };
		reply(in->unique, 0, &o, sizeof(o));
		break;
	}
	case FUSE_READ:
		/* the bad sector */
		reply(in->unique, -EIO, NULL, 0);
		break;
	case FUSE_FLUSH:
	case FUSE_RELEASE:
	case FUSE_FSYNC:
	case FUSE_ACCESS:
		reply(in->unique, 0, NULL, 0);
		break;
	case FUSE_STATFS: {
		struct fuse_statfs_out o = { 0 };
		o.st.bsize = o.st.frsize = 4096;
		o.st.namelen = 255;
		reply(in->unique, 0, &o, sizeof(o));
		break;
	}
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_INTERRUPT:
		break; /* no reply */
	case FUSE_DESTROY:
		reply(in->unique, 0, NULL, 0);
		stop = 1;
		break;
	case FUSE_WRITE:
	case FUSE_SETATTR:
		reply(in->unique, -EROFS, NULL, 0);
		break;
	default:
		reply(in->unique, -ENOSYS, NULL, 0);
	}
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: bbbadfile FILE SIZE\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	target = argv[1];
	file_size = strtoull(argv[2], NULL, 10);
	struct stat st;
	if (stat(target, &st) != 0 || !S_ISREG(st.st_mode)) {
		fprintf(stderr, "bbbadfile: %s must be an existing regular file\n", target);
		return 2;
	}
	fuse_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fuse_fd < 0) {
		perror("bbbadfile: /dev/fuse");
		return 1;
	}
	char opts[128];
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=%o,user_id=0,group_id=0,allow_other", fuse_fd, S_IFREG | 0644);
	if (mount("bbbadfile", target, "fuse.bbbadfile", MS_NOSUID | MS_NODEV, opts) != 0) {
		perror("bbbadfile: mount");
		return 1;
	}
	struct sigaction sa = { 0 };
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	printf("bbbadfile: serving %s\n", target);
	static char buf[FUSE_MIN_READ_BUFFER + 65536];
	while (!stop) {
		ssize_t n = read(fuse_fd, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR || errno == ENOENT || errno == EAGAIN)
				continue;
			break; /* ENODEV: unmounted */
		}
		if ((size_t)n < sizeof(struct fuse_in_header))
			continue;
		const struct fuse_in_header *in = (const void *)buf;
		serve_one(in, buf + sizeof(*in));
	}
	umount2(target, MNT_DETACH);
	return 0;
}
