/*
 * Short reads and writes on a real file, for tracerd's short-I/O events, and the calls
 * that must not count as short (reads that end at the end of the file, pipes, sysfs).
 *
 *   shortio FILE
 *
 * Writes past RLIMIT_FSIZE (5000 bytes; SIGXFSZ ignored) are cut at the limit by the
 * kernel: write() and pwrite64() return fewer bytes than asked, and the next write fails
 * with EFBIG. Reads into a buffer whose second page is PROT_NONE stop at the page: a
 * read() and a pread64() that end before the end of the file. Prints what each call
 * returned, one "NAME RET of COUNT" line each, for the test to compare with the dump.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define LIMIT 5000

static void report(const char *name, long ret, long count)
{
	if (ret < 0)
		printf("%s -%d of %ld\n", name, errno, count);
	else
		printf("%s %ld of %ld\n", name, ret, count);
}

int main(int argc, char **argv)
{
	static char data[8192];
	struct rlimit lim = { LIMIT, LIMIT };
	int fd, p[2];
	char *page;
	long r;

	if (argc != 2) {
		fprintf(stderr, "usage: shortio FILE\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(data, 'x', sizeof(data));
	signal(SIGXFSZ, SIG_IGN);
	if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
		perror("setrlimit");
		return 1;
	}
	fd = open(argv[1], O_CREAT | O_TRUNC | O_RDWR, 0644);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	report("write", write(fd, data, 4096), 4096);       /* whole */
	report("write", write(fd, data, 1064), 1064);       /* 904: cut at the limit */
	report("write", write(fd, data, 100), 100);         /* EFBIG */
	report("pwrite64", pwrite(fd, data, 1064, 4500), 1064); /* 500 */

	/* reads that stop at the end of the file are not short */
	lseek(fd, 0, SEEK_SET);
	report("read", read(fd, data, sizeof(data)), sizeof(data)); /* 5000, at the end */
	report("read", read(fd, data, sizeof(data)), sizeof(data)); /* 0 */
	report("pread64", pread(fd, data, 100, 0), 100);             /* whole */

	/* reads that stop before it: the buffer's second page is not writable */
	page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED || mprotect(page + 4096, 4096, PROT_NONE) != 0) {
		perror("mmap");
		return 1;
	}
	lseek(fd, 0, SEEK_SET);
	report("read", read(fd, page, 4200), 4200);                   /* 4096 of 4200 */
	report("pread64", pread(fd, page + 1000, 4000, 10), 4000);    /* 3096 of 4000 */

	/* not regular files: a pipe, a sysfs attribute (which says it holds 4096 bytes) */
	if (pipe(p) != 0 || write(p[1], "hello", 5) != 5) {
		perror("pipe");
		return 1;
	}
	r = read(p[0], data, sizeof(data));
	report("pipe-read", r, sizeof(data));
	int sys = open("/sys/devices/system/cpu/online", O_RDONLY);
	if (sys >= 0)
		report("sysfs-read", read(sys, data, 4096), 4096);
	return 0;
}
